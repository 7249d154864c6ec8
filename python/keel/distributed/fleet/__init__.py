"""keel.distributed.fleet: Paddle's collective Fleet API for dynamic-graph
(eager) training, the data-parallel part, over keel.distributed.

    import keel.distributed.fleet as fleet
    fleet.init(is_collective=True, strategy=strategy)
    model = fleet.distributed_model(model)        # DataParallel when N > 1
    opt = fleet.distributed_optimizer(opt)
    scaler = fleet.distributed_scaler(keel.amp.GradScaler())

What each call does follows Paddle 3.x in eager mode: distributed_model
wraps the model in DataParallel with the strategy's bucket sizes when the
world has more than one rank, and with strategy.amp at a pure level
(amp_configs use_pure_fp16 / use_pure_bf16) first decorates it at O2; the
optimizer and the scaler come back as they are (DataParallel has already
averaged the gradients, so a non-finite gradient is seen on every rank).
strategy.recompute and recompute_configs are static-graph settings in
Paddle and kept here unused, as there; recompute a layer with
fleet.utils.recompute. Pipeline, tensor, sharding and the other hybrid
strategies are refused with a message (docs/distributed.md).
"""
import copy as _copy

from .. import (init_parallel_env as _init_parallel_env, get_rank as _rank,
                get_world_size as _world, barrier as _barrier,
                DataParallel as _DataParallel, ParallelEnv as _ParallelEnv)
from ... import amp as _amp
from . import utils  # noqa: F401

_AMP_DEFAULTS = {
    "init_loss_scaling": 32768.0, "incr_every_n_steps": 1000,
    "decr_every_n_nan_or_inf": 2, "incr_ratio": 2.0, "decr_ratio": 0.8,
    "use_dynamic_loss_scaling": True, "custom_white_list": [],
    "custom_black_list": [], "custom_black_varnames": [],
    "use_pure_fp16": False, "use_pure_bf16": False, "use_fp16_guard": True,
    "use_optimizer_fp16": False, "use_master_grad": False,
}
_RECOMPUTE_DEFAULTS = {"checkpoints": [], "enable_offload": False,
                       "checkpoint_shape": []}
# Strategies keel does not provide: True (or a degree above 1) is refused.
_REFUSED = ("pipeline", "tensor_parallel", "sharding", "localsgd",
            "adaptive_localsgd", "dgc", "lars", "lamb", "gradient_merge",
            "heter_ccl_mode", "a_sync", "auto", "semi_auto", "fuse_all_optimizer_ops")


class DistributedStrategy:
    """paddle.distributed.fleet.DistributedStrategy with Paddle's
    defaults. Assigning amp_configs / recompute_configs / hybrid_configs a
    dict updates the keys it names (unknown keys are refused, as in
    Paddle)."""

    def __init__(self):
        d = self.__dict__
        d["amp"] = False
        d["recompute"] = False
        d["fuse_grad_size_in_MB"] = 32
        d["last_comm_group_size_MB"] = 1
        d["find_unused_parameters"] = False
        d["fuse_all_reduce_ops"] = True
        d["_amp_configs"] = dict(_AMP_DEFAULTS)
        d["_recompute_configs"] = dict(_RECOMPUTE_DEFAULTS)
        d["_hybrid_configs"] = {"dp_degree": -1, "mp_degree": 1,
                                "pp_degree": 1, "sharding_degree": 1,
                                "sep_degree": 1}
        for name in _REFUSED:
            d[name] = False

    @staticmethod
    def _merge(table, what, value):
        if not isinstance(value, dict):
            raise TypeError("%s: a dict, not %s" % (what, type(value).__name__))
        unknown = set(value) - set(table)
        if unknown:
            raise ValueError("%s: unknown keys %s (known: %s)"
                             % (what, sorted(unknown), sorted(table)))
        table.update(value)

    @property
    def amp_configs(self):
        return self.__dict__["_amp_configs"]

    @amp_configs.setter
    def amp_configs(self, value):
        self._merge(self.__dict__["_amp_configs"], "amp_configs", value)

    @property
    def recompute_configs(self):
        return self.__dict__["_recompute_configs"]

    @recompute_configs.setter
    def recompute_configs(self, value):
        self._merge(self.__dict__["_recompute_configs"], "recompute_configs",
                    value)

    @property
    def hybrid_configs(self):
        return self.__dict__["_hybrid_configs"]

    @hybrid_configs.setter
    def hybrid_configs(self, value):
        self._merge(self.__dict__["_hybrid_configs"], "hybrid_configs", value)

    def __setattr__(self, name, value):
        if isinstance(getattr(type(self), name, None), property):
            object.__setattr__(self, name, value)
        elif name in self.__dict__:
            self.__dict__[name] = value
        else:
            raise AttributeError("DistributedStrategy has no option %r" % name)

    def _check(self):
        """Refuse what keel's Fleet does not do, naming it."""
        on = [n for n in _REFUSED if self.__dict__[n]]
        on += ["hybrid_configs['%s'] = %s" % (k, v)
               for k, v in self.hybrid_configs.items()
               if k != "dp_degree" and v not in (1, -1)]
        if on:
            raise NotImplementedError(
                "fleet: %s: keel's Fleet does data parallelism only "
                "(with amp and recompute); see docs/distributed.md"
                % ", ".join(on))
        if self.amp_configs["use_pure_fp16"] and \
                self.amp_configs["use_pure_bf16"]:
            raise ValueError("amp_configs: use_pure_fp16 and use_pure_bf16 "
                             "are exclusive")


class _Fleet:
    """What fleet.init keeps: the strategy (None before init)."""

    def __init__(self):
        self.strategy = None


_fleet = _Fleet()


def init(role_maker=None, is_collective=False, strategy=None,
         log_level="INFO"):
    """fleet.init: collective mode only (parameter-server training is not
    provided). Starts the process group (keel.distributed's
    init_parallel_env) and keeps a copy of the strategy."""
    if not is_collective:
        raise NotImplementedError(
            "fleet.init(is_collective=False): parameter-server training is "
            "not provided; use is_collective=True")
    s = _copy.deepcopy(strategy) if strategy is not None \
        else DistributedStrategy()
    s._check()
    _init_parallel_env()
    _fleet.strategy = s


def _need_init(what):
    if _fleet.strategy is None:
        raise RuntimeError("fleet.%s: call fleet.init(is_collective=True) "
                           "first" % what)


def distributed_optimizer(optimizer, strategy=None):
    """The optimizer, as Paddle's eager Fleet gives it for data
    parallelism; a strategy given here replaces fleet.init's."""
    _need_init("distributed_optimizer")
    if strategy is not None:
        s = _copy.deepcopy(strategy)
        s._check()
        _fleet.strategy = s
    return optimizer


def distributed_model(model):
    """DataParallel(model) with the strategy's fuse_grad_size_in_MB,
    last_comm_group_size_MB and find_unused_parameters when the world has
    more than one rank (after amp.decorate at O2 when the strategy's amp
    is pure); the model itself in a world of one, as in Paddle."""
    _need_init("distributed_model")
    s = _fleet.strategy
    if _world() <= 1:
        return model
    if s.amp and (s.amp_configs["use_pure_fp16"] or
                  s.amp_configs["use_pure_bf16"]):
        model = _amp.decorate(
            model, level="O2",
            dtype="float16" if s.amp_configs["use_pure_fp16"]
            else "bfloat16")
    return _DataParallel(model, comm_buffer_size=s.fuse_grad_size_in_MB,
                         last_comm_buffer_size=s.last_comm_group_size_MB,
                         find_unused_parameters=s.find_unused_parameters)


def distributed_scaler(scaler):
    """The scaler itself: under DataParallel every rank sees the same
    averaged gradients, so they agree on a skipped step."""
    _need_init("distributed_scaler")
    return scaler


def worker_index():
    return _rank()


def worker_num():
    return _world()


def is_first_worker():
    return _rank() == 0


def barrier_worker():
    _barrier()


def local_rank():
    return _ParallelEnv().local_rank
