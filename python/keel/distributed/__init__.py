"""keel.distributed: Paddle's collective data parallelism for Python,
over keel's dist layer (keel/dist.h, docs/distributed.md).

    dist.init_parallel_env()          # under mpirun -np N
    model = paddle.DataParallel(model)
    loss = loss_fn(model(x), y)
    loss.backward()                   # gradients averaged over the ranks
    opt.step(); opt.clear_grad()

DataParallel hands the model's parameter tensors to the C DataParallel
(broadcast from rank 0 at wrap time, Paddle's buckets, overlap); the
backward of a loss computed through a DataParallel's forward runs as
keel_data_parallel_backward. Launch with Open MPI's mpirun;
paddle.distributed.launch is refused by keel_dist_init.
"""
import atexit as _atexit
import contextlib as _contextlib

from .. import _C
from .. import nn as _nn


class ReduceOp:
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    PROD = "prod"
    AVG = "avg"


class ParallelEnv:
    def __init__(self):
        info = _C.dist_info()
        self.rank = info["rank"]
        self.world_size = info["world_size"]
        self.local_rank = info["local_rank"]
        self.nranks = self.world_size
        self.dev_id = 0


_finalize_registered = []


def _finalize():
    """At exit: keel_dist_finalize (MPI_Finalize when keel started MPI),
    which mpirun expects of every rank."""
    try:
        _C.dist_finalize()
    except Exception as e:  # a peer lost: say so, exit anyway
        print("keel.distributed: %s" % e)


def init_parallel_env():
    _C.dist_init()
    if not _finalize_registered:
        _atexit.register(_finalize)
        _finalize_registered.append(True)
    return ParallelEnv()


def get_rank():
    return _C.dist_info()["rank"]


def get_world_size():
    return _C.dist_info()["world_size"]


def all_reduce(tensor, op=ReduceOp.SUM, group=None, sync_op=True):
    if group is not None:
        raise ValueError("all_reduce: groups are not provided from Python "
                         "yet (the world only)")
    _C.dist_all_reduce(tensor, op)


def barrier(group=None):
    _C.dist_barrier()


# The DataParallel whose forward ran last, waiting for its backward.
_pending = []


def _backward_through(loss):
    """Tensor.backward's hook: the loss of a DataParallel's forward goes
    through keel_data_parallel_backward. Returns False when no
    DataParallel is waiting."""
    if not _pending:
        return False
    dp = _pending.pop()
    _pending.clear()
    dp._h.backward(loss)
    return True


class DataParallel(_nn.Layer):
    """paddle.DataParallel(layers, comm_buffer_size=25,
    last_comm_buffer_size=1, find_unused_parameters=False)."""

    def __init__(self, layers, strategy=None, comm_buffer_size=25,
                 last_comm_buffer_size=1, find_unused_parameters=False,
                 group=None):
        super().__init__()
        if group is not None:
            raise ValueError("DataParallel: groups are not provided from "
                             "Python yet (the world only)")
        self._layers = layers
        init_parallel_env()
        holder = _C.param_layer(list(layers.named_parameters()))
        object.__setattr__(self, "_h", _C.data_parallel(
            holder, float(comm_buffer_size), float(last_comm_buffer_size),
            bool(find_unused_parameters), True))

    def forward(self, *inputs, **kwargs):
        _pending[:] = [self]
        return self._layers(*inputs, **kwargs)

    @_contextlib.contextmanager
    def no_sync(self):
        self._h.set_sync(False)
        try:
            yield
        finally:
            self._h.set_sync(True)

    def state_dict(self):
        return self._layers.state_dict()

    def set_state_dict(self, state_dict, use_structured_name=True):
        return self._layers.set_state_dict(state_dict)

    def stats(self):
        """Buckets, all-reduces made, seconds (keel's counters)."""
        return self._h.stats()


from . import fleet  # noqa: E402,F401  (uses the names above)
