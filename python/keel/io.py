"""keel.io: Paddle's Dataset and DataLoader for Python datasets.

A DataLoader draws indices (shuffled with NumPy's generator when asked),
reads samples from the dataset, and stacks each field of a batch into
one Tensor with keel's stack op. Worker processes are not provided
(num_workers must be 0).
"""
import numbers as _numbers

import numpy as _np

import keel as _k


class Dataset:
    def __getitem__(self, idx):
        raise NotImplementedError

    def __len__(self):
        raise NotImplementedError


class TensorDataset(Dataset):
    def __init__(self, tensors):
        self.tensors = list(tensors)
        n = {t.shape[0] for t in self.tensors}
        if len(n) != 1:
            raise ValueError("TensorDataset: the tensors' first dimensions "
                             "differ: %s" % sorted(n))

    def __getitem__(self, idx):
        return tuple(t[idx] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


def _collate(samples):
    first = samples[0]
    if isinstance(first, (tuple, list)):
        return [_collate([s[i] for s in samples]) for i in range(len(first))]
    if isinstance(first, dict):
        return {k: _collate([s[k] for s in samples]) for k in first}
    if isinstance(first, _k.Tensor):
        return _k.stack(*samples, axis=0)
    if isinstance(first, (_np.ndarray, _numbers.Number, _np.generic)):
        return _k.to_tensor(_np.stack([_np.asarray(s) for s in samples]))
    raise TypeError("DataLoader: cannot batch samples of type %s"
                    % type(first).__name__)


class DataLoader:
    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False,
                 collate_fn=None, num_workers=0, batch_sampler=None,
                 return_list=True, places=None):
        if num_workers:
            raise ValueError("DataLoader: worker processes are not provided "
                             "(num_workers must be 0)")
        if batch_sampler is not None:
            raise ValueError("DataLoader: batch_sampler is not provided")
        if batch_size < 1:
            raise ValueError("DataLoader: batch_size must be >= 1")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.collate_fn = collate_fn or _collate

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else \
            -(-n // self.batch_size)

    def __iter__(self):
        n = len(self.dataset)
        order = _np.random.permutation(n) if self.shuffle else _np.arange(n)
        for b in range(len(self)):
            idx = order[b * self.batch_size:(b + 1) * self.batch_size]
            yield self.collate_fn([self.dataset[int(i)] for i in idx])
