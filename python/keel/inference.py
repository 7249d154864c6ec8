"""keel.inference: Paddle's Config / create_predictor over keel's
Predictor (keel/inference.h, docs/inference.md).

    config = keel.inference.Config("model")    # jit.save's prefix
    config.enable_memory_optim()
    predictor = keel.inference.create_predictor(config)
    h = predictor.get_input_handle(predictor.get_input_names()[0])
    h.copy_from_cpu(images)
    predictor.run()
    out = predictor.get_output_handle(
        predictor.get_output_names()[0]).copy_to_cpu()
"""
import numpy as _np

from . import _C

_SUFFIX = ".keel.json"


class Config:
    """Config(prefix), or Config(model_file, params_file) as Paddle writes
    it (PREFIX.json or PREFIX.pdmodel, and PREFIX.pdiparams): either way
    the graph keel.jit.save wrote at PREFIX."""

    def __init__(self, model=None, params=None):
        if model is None:
            raise ValueError("Config: give jit.save's path prefix")
        model = str(model)
        # The prefix jit.save was given: keel's graph file is
        # PREFIX.keel.json; a Paddle-style "PREFIX.json" / "PREFIX.pdmodel"
        # names the same prefix (keel's weights file is named inside the
        # graph file, so params is not needed).
        for suffix in (_SUFFIX, ".json", ".pdmodel"):
            if model.endswith(suffix):
                model = model[:-len(suffix)]
                break
        self._prefix = model
        self._device = None
        self._threads = 0
        self._ir = True
        self._mem = True
        self._precision = "float32"
        self._deleted = []

    def enable_use_gpu(self, memory_pool_init_size_mb=100, device_id=0,
                       precision_mode=None):
        self._device = "gpu:%d" % device_id

    def disable_gpu(self):
        self._device = "cpu"

    def enable_custom_device(self, device_type, device_id=0, precision=None):
        self._device = "%s:%d" % (device_type, device_id)

    def set_cpu_math_library_num_threads(self, n):
        self._threads = int(n)

    def switch_ir_optim(self, on=True):
        self._ir = bool(on)

    def enable_memory_optim(self, on=True):
        self._mem = bool(on)

    def switch_use_feed_fetch_ops(self, on=False):
        pass  # keel has no feed/fetch ops: nothing to switch

    def delete_pass(self, name):
        self._deleted.append(str(name))

    def set_precision(self, dtype):
        self._precision = str(dtype)


class _Handle:
    def __init__(self, predictor, name, output):
        self._p, self._name, self._out = predictor, name, output

    def name(self):
        return self._name

    def reshape(self, shape):
        pass  # the shape comes with the data in copy_from_cpu

    def copy_from_cpu(self, data):
        a = _np.ascontiguousarray(data)
        if a.ndim == 0:
            a = a.reshape(())
        self._p.set_input(self._name, a, str(a.dtype), list(a.shape))

    def copy_to_cpu(self):
        raw, dtype, shape = self._p.get_output(self._name)
        return _np.frombuffer(raw, dtype=dtype).reshape(shape).copy()

    def shape(self):
        return list(self.copy_to_cpu().shape)


class Predictor:
    def __init__(self, config):
        self._h = _C.predictor(config._prefix, config._device,
                               config._threads, config._ir, config._mem,
                               config._precision, config._deleted)

    def get_input_names(self):
        return self._h.names(False)

    def get_output_names(self):
        return self._h.names(True)

    def get_input_handle(self, name):
        return _Handle(self._h, name, False)

    def get_output_handle(self, name):
        return _Handle(self._h, name, True)

    def run(self):
        self._h.run()
        return True

    def summary(self):
        return self._h.summary()


def create_predictor(config):
    return Predictor(config)
