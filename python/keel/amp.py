"""keel.amp: Paddle's auto_cast and GradScaler over keel's AMP layer
(keel/amp.h, docs/amp.md).

    scaler = keel.amp.GradScaler(init_loss_scaling=1024)
    with keel.amp.auto_cast():
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)      # unscale, skip on inf/NaN
    scaler.update()
    optimizer.clear_grad()
"""
import functools as _functools

from . import _C


class auto_cast:
    """paddle.amp.auto_cast(enable, custom_white_list, custom_black_list,
    level, dtype, use_promote): a context manager and a decorator."""

    def __init__(self, enable=True, custom_white_list=None,
                 custom_black_list=None, level="O1", dtype="float16",
                 use_promote=True):
        self._args = (bool(enable), str(level), str(dtype),
                      list(custom_white_list or []),
                      list(custom_black_list or []), bool(use_promote))

    def __enter__(self):
        _C.amp_begin(*self._args)
        return self

    def __exit__(self, *exc):
        _C.amp_end()
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with auto_cast(*self._ctor()):
                return fn(*args, **kwargs)
        return wrapper

    def _ctor(self):
        e, lv, dt, w, b, p = self._args
        return (e, w, b, lv, dt, p)


amp_guard = auto_cast


def decorate(models, optimizers=None, level="O1", dtype="float16",
             master_weight=None, save_dtype=None):
    """paddle.amp.decorate: at level O2 the models' floating parameters and
    buffers become dtype in place (BatchNorm, and LayerNorm for float16,
    stay float32, as in Paddle) and the optimizers keep float32 master
    weights (master_weight None or True). Level O1 changes nothing.
    Returns models, or (models, optimizers) when optimizers are given.
    Call it before training: parameters with gradients or optimizer state
    are refused."""
    from . import nn

    model_list = models if isinstance(models, (list, tuple)) else [models]
    opt_list = ([] if optimizers is None else
                optimizers if isinstance(optimizers, (list, tuple))
                else [optimizers])
    for m in model_list:
        if not isinstance(m, nn.Layer):
            raise TypeError("decorate: models must be keel.nn.Layer "
                            "objects, not %s" % type(m).__name__)
    # The built-in layers are C layers, which keel_amp_decorate walks
    # (and keeps the norms float32); parameters that Python layers made
    # themselves go in as one holder layer.
    handles, loose, owned = [], [], set()
    for m in model_list:
        for layer in m.sublayers(include_self=True):
            h = getattr(layer, "_handle", None)
            if h is not None and isinstance(layer, nn._CLayer):
                handles.append(h)
                owned.update(id(t) for t in layer._parameters.values())
                owned.update(id(t) for t in layer._buffers.values())
    for m in model_list:
        for name, p in m.named_parameters():
            if id(p) not in owned:
                owned.add(id(p))
                loose.append((name, p))
    if loose:
        handles.append(_C.param_layer(loose))
    mw = -1 if master_weight is None else int(bool(master_weight))
    _C.amp_decorate(handles, [o._h for o in opt_list], str(level),
                    str(dtype), mw)
    if optimizers is None:
        return models
    return models, optimizers



class GradScaler:
    """paddle.amp.GradScaler with Paddle's defaults."""

    def __init__(self, enable=True, init_loss_scaling=65536.0,
                 incr_ratio=2.0, decr_ratio=0.5, incr_every_n_steps=2000,
                 decr_every_n_nan_or_inf=1, use_dynamic_loss_scaling=True):
        self._h = _C.grad_scaler(bool(enable), float(init_loss_scaling),
                                 float(incr_ratio), float(decr_ratio),
                                 int(incr_every_n_steps),
                                 int(decr_every_n_nan_or_inf),
                                 bool(use_dynamic_loss_scaling))

    def scale(self, var):
        return self._h.scale(var)

    def unscale_(self, optimizer):
        self._h.unscale_(optimizer._h)

    def step(self, optimizer):
        self._h.step(optimizer._h)

    def update(self):
        self._h.update()

    def minimize(self, optimizer, *args, **kwargs):
        self._h.minimize(optimizer._h)

    def get_loss_scaling(self):
        return self._h.info()["scale"]

    def is_enable(self):
        return self._h.info()["enabled"]

    def is_use_dynamic_loss_scaling(self):
        return self._h.info()["dynamic"]
