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
