"""keel.optimizer: Paddle's optimizers over keel's C optimizers.

    opt = keel.optimizer.AdamW(learning_rate=1e-3,
                               parameters=model.parameters())
    loss.backward(); opt.step(); opt.clear_grad()

The update itself (and its weight decay, gradient clipping and state) is
the C optimizer's (keel/optim.h).
"""
from .. import _C
from . import lr


class ClipGradByGlobalNorm:
    def __init__(self, clip_norm):
        self.clip_norm = float(clip_norm)


_GROUP_KEYS = {"params", "learning_rate", "weight_decay"}


def _named(parameters):
    """[(unique name, Tensor)] and, per parameter group, its options:
    [(names, learning-rate scale, weight decay or None)]."""
    if parameters is None:
        raise ValueError("the optimizer needs parameters= (e.g. "
                         "model.parameters())")
    parameters = list(parameters)
    if parameters and all(isinstance(g, dict) for g in parameters):
        groups = parameters
    elif any(isinstance(g, dict) for g in parameters):
        raise ValueError("parameters: either Tensors or parameter-group "
                         "dicts ({'params': [...], ...}), not both")
    else:
        groups = [{"params": parameters}]
    out, names, seen, options = [], set(), set(), []
    i = 0
    for g in groups:
        unknown = set(g) - _GROUP_KEYS
        if unknown:
            raise ValueError("parameter group: unknown keys %s (provided: "
                             "params, learning_rate, weight_decay)"
                             % sorted(unknown))
        if "params" not in g:
            raise ValueError("parameter group without 'params'")
        group_names = []
        for p in g["params"]:
            if id(p) in seen:
                raise ValueError("a parameter appears in two groups")
            seen.add(id(p))
            name = getattr(p, "name", None) or "param_%d" % i
            while name in names:
                name = "%s_%d" % (name, i)
            names.add(name)
            out.append((name, p))
            group_names.append(name)
            i += 1
        wd = g.get("weight_decay")
        if wd is not None and not isinstance(wd, (int, float)):
            raise ValueError("parameter group weight_decay: a number")
        options.append((group_names, float(g.get("learning_rate", 1.0)),
                        None if wd is None else float(wd)))
    return out, options


class Optimizer:
    _kind = None

    def __init__(self, learning_rate=0.001, parameters=None,
                 weight_decay=None, grad_clip=None, momentum=0.9,
                 use_nesterov=False, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 name=None):
        self._params, groups = _named(parameters)
        self._lr = learning_rate
        if isinstance(learning_rate, lr.LRScheduler):
            lr_arg = learning_rate._h
        elif isinstance(learning_rate, (int, float)):
            lr_arg = float(learning_rate)
        else:
            raise ValueError("learning_rate: a number or a "
                             "keel.optimizer.lr scheduler")
        if weight_decay is not None and not isinstance(weight_decay,
                                                       (int, float)):
            raise ValueError("weight_decay: a number (regularizer objects "
                             "are not provided)")
        clip = grad_clip.clip_norm if grad_clip is not None else 0.0
        self._h = _C.optimizer(self._kind, self._params, lr_arg,
                               -1.0 if weight_decay is None
                               else float(weight_decay),
                               float(momentum), bool(use_nesterov),
                               float(beta1), float(beta2), float(epsilon),
                               clip)
        # Paddle's parameter groups: a group's learning_rate scales the
        # optimizer's, its weight_decay replaces the optimizer's.
        for names, scale, wd in groups:
            if scale == 1.0 and wd is None:
                continue
            for n in names:
                self._h.set_param_options(
                    n, scale, float("nan") if wd is None else wd)

    def step(self):
        self._h.step()

    def clear_grad(self, set_to_zero=True):
        if set_to_zero:
            self._h.clear_grad()
        else:
            for _, p in self._params:
                p.clear_grad(False)

    def get_lr(self):
        return self._h.get_lr()

    def set_lr(self, value):
        self._h.set_lr(float(value))

    def state_dict(self):
        """Accumulators ("<param>_moment1_0", ...), global_step and the
        scheduler's fields, as keel's C optimizer names them."""
        return dict(self._h.state_get())

    def set_state_dict(self, state_dict):
        self._h.state_set(list(state_dict.items()))


class SGD(Optimizer):
    _kind = "sgd"


class Momentum(Optimizer):
    _kind = "momentum"


class Adam(Optimizer):
    _kind = "adam"


class AdamW(Optimizer):
    _kind = "adamw"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999,
                 epsilon=1e-8, parameters=None, weight_decay=0.01,
                 grad_clip=None, name=None):
        super().__init__(learning_rate=learning_rate, parameters=parameters,
                         weight_decay=weight_decay, grad_clip=grad_clip,
                         beta1=beta1, beta2=beta2, epsilon=epsilon)
