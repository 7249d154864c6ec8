"""keel.optimizer.lr: Paddle's learning-rate schedulers, each one of
keel's C schedulers (keel/optim.h, docs/lr.md).

    sched = keel.optimizer.lr.CosineAnnealingDecay(learning_rate=1e-3,
                                                    T_max=100)
    opt = keel.optimizer.Adam(learning_rate=sched,
                              parameters=model.parameters())
    ...
    sched.step()        # each epoch or step, as in Paddle
"""
from .. import _C


class LRScheduler:
    def __init__(self, *args):
        self._h = _C.lr_scheduler(type(self).__name__, *args)

    def step(self, epoch=None):
        self._h.step(epoch)

    def get_lr(self):
        return self._h.get_lr()

    def __call__(self):
        return self._h.last_lr()

    @property
    def last_lr(self):
        return self._h.last_lr()

    @property
    def last_epoch(self):
        return self._h.last_epoch()


class StepDecay(LRScheduler):
    def __init__(self, learning_rate, step_size, gamma=0.1, last_epoch=-1,
                 verbose=False):
        super().__init__(float(learning_rate), int(step_size), float(gamma))


class MultiStepDecay(LRScheduler):
    def __init__(self, learning_rate, milestones, gamma=0.1, last_epoch=-1,
                 verbose=False):
        super().__init__(float(learning_rate), list(milestones), float(gamma))


class ExponentialDecay(LRScheduler):
    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        super().__init__(float(learning_rate), float(gamma))


class CosineAnnealingDecay(LRScheduler):
    def __init__(self, learning_rate, T_max, eta_min=0, last_epoch=-1,
                 verbose=False):
        super().__init__(float(learning_rate), int(T_max), float(eta_min))


class PolynomialDecay(LRScheduler):
    def __init__(self, learning_rate, decay_steps, end_lr=0.0001, power=1.0,
                 cycle=False, last_epoch=-1, verbose=False):
        super().__init__(float(learning_rate), int(decay_steps),
                         float(end_lr), float(power), bool(cycle))


class LinearWarmup(LRScheduler):
    def __init__(self, learning_rate, warmup_steps, start_lr, end_lr,
                 last_epoch=-1, verbose=False):
        inner = learning_rate._h if isinstance(learning_rate, LRScheduler) \
            else float(learning_rate)
        self._inner = learning_rate
        super().__init__(inner, int(warmup_steps), float(start_lr),
                         float(end_lr))


class OneCycleLR(LRScheduler):
    def __init__(self, max_learning_rate, total_steps, divide_factor=25.0,
                 end_learning_rate=0.0001, phase_pct=0.3,
                 anneal_strategy="cos", three_phase=False, last_epoch=-1,
                 verbose=False):
        super().__init__(float(max_learning_rate), int(total_steps),
                         float(divide_factor), float(end_learning_rate),
                         float(phase_pct), anneal_strategy, bool(three_phase))


class ReduceOnPlateau(LRScheduler):
    def __init__(self, learning_rate, mode="min", factor=0.1, patience=10,
                 threshold=1e-4, threshold_mode="rel", cooldown=0, min_lr=0,
                 epsilon=1e-8, verbose=False):
        super().__init__(float(learning_rate), mode, float(factor),
                         int(patience), float(threshold), threshold_mode,
                         int(cooldown), float(min_lr), float(epsilon))

    def step(self, metrics, epoch=None):
        value = metrics.item() if hasattr(metrics, "item") else metrics
        self._h.step_metric(float(value))
