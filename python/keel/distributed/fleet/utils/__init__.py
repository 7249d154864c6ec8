"""paddle.distributed.fleet.utils.recompute over keel_recompute."""
from .... import _C

# One C layer per recomputed Python layer, kept as long as the layer: the
# graph that recompute builds calls it again in backward.
_handles = {}


def recompute(function, *args, **kwargs):
    """y = function(x) without keeping the activations inside function;
    backward runs it again (with the random generator as the first
    forward found it, so dropout masks repeat). function is a keel.nn
    Layer (or a callable with parameters()) called with one Tensor;
    keyword arguments other than Paddle's use_reentrant / preserve_rng_state
    are refused."""
    for k in kwargs:
        if k not in ("use_reentrant", "preserve_rng_state"):
            raise TypeError("recompute: unexpected keyword %r" % k)
    if len(args) != 1:
        raise ValueError("recompute: keel recomputes calls with one Tensor "
                         "argument, not %d" % len(args))
    entry = _handles.get(id(function))
    if entry is None or entry[0] is not function:
        params = (list(function.named_parameters())
                  if hasattr(function, "named_parameters") else [])
        buffers = (list(function.named_buffers())
                   if hasattr(function, "named_buffers") else [])
        entry = (function, _C.py_layer(function, params, buffers))
        _handles[id(function)] = entry
    return _C.recompute(entry[1], args[0])
