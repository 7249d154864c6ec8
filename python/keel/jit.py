"""keel.jit: Paddle's jit.to_static / jit.save / jit.load over keel's
tracer and graph files (keel/jit.h, docs/inference.md).

jit.save traces the model's forward (in eval mode, without gradients) on
the current device, with one input per InputSpec, and writes
PREFIX.keel.json (the graph) and PREFIX.safetensors (its weights).
jit.load gives back a layer that runs the graph (Paddle's
TranslatedLayer); keel.inference.Config(PREFIX) serves it.
"""
from . import _C
from . import nn as _nn
from .static import InputSpec


def to_static(function=None, input_spec=None, full_graph=True, **kwargs):
    """Paddle's to_static on a Layer: keel keeps running it eagerly and
    remembers input_spec for jit.save (keel traces at save time)."""
    def mark(layer):
        layer._input_spec = list(input_spec) if input_spec else None
        return layer
    if function is None:
        return mark
    return mark(function)


def _specs(layer, input_spec):
    specs = input_spec if input_spec is not None else getattr(
        layer, "_input_spec", None)
    if not specs:
        raise ValueError("jit.save: give input_spec (a list of "
                         "keel.static.InputSpec)")
    out = []
    for s in specs:
        if not isinstance(s, InputSpec):
            raise TypeError("jit.save: input_spec holds InputSpec objects, "
                            "not %s" % type(s).__name__)
        out.append((s.name, s.dtype, s.shape))
    return out


def save(layer, path, input_spec=None, **configs):
    specs = _specs(layer, input_spec)
    was_training = getattr(layer, "training", False)
    layer.eval()
    try:
        handle = _C.py_layer(layer, list(layer.named_parameters()),
                             list(layer.named_buffers()))
        graph = _C.jit_trace(handle, specs)
    finally:
        if was_training:
            layer.train()
    graph.save(str(path))


class TranslatedLayer(_nn.Layer):
    """A loaded graph as a layer: forward runs the graph (first output)."""

    def __init__(self, graph):
        super().__init__()
        object.__setattr__(self, "_graph", graph)
        object.__setattr__(self, "_handle", graph.layer())

    def forward(self, *inputs):
        return self._handle.forward(*inputs)

    def program_info(self):
        return self._graph.info()


def load(path, **configs):
    return TranslatedLayer(_C.jit_load(str(path)))
