"""keel.nn: Paddle's Layer model in Python over keel's C layers.

A Layer subclass registers what it is given as attributes, as Paddle's
does: a Layer becomes a sublayer, a Tensor with stop_gradient = False (a
parameter) becomes a parameter. The built-in layers (Linear, Conv2D, ...)
each hold one C layer and register its tensors, so the C layer computes
and the optimizer updates those same tensors.
"""
import collections as _collections
import math as _math

from .. import _C
from .. import Tensor as _Tensor
from .. import uniform as _uniform
from . import functional  # noqa: F401


class Layer:
    """Paddle's paddle.nn.Layer."""

    def __init__(self, name_scope=None, dtype="float32"):
        object.__setattr__(self, "_parameters", _collections.OrderedDict())
        object.__setattr__(self, "_buffers", _collections.OrderedDict())
        object.__setattr__(self, "_sub_layers", _collections.OrderedDict())
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_dtype", dtype)

    # -- registration ------------------------------------------------------
    def _ready(self):
        if "_parameters" not in self.__dict__:
            raise RuntimeError("%s.__init__ must call super().__init__() "
                               "before assigning attributes"
                               % type(self).__name__)

    def __setattr__(self, name, value):
        d = self.__dict__
        if isinstance(value, Layer):
            self._ready()
            d["_parameters"].pop(name, None)
            d["_sub_layers"][name] = value
        elif isinstance(value, _Tensor) and not value.stop_gradient:
            self._ready()
            d["_sub_layers"].pop(name, None)
            d["_parameters"][name] = value
            if getattr(value, "name", None) is None:
                value.name = name
        else:
            if "_parameters" in d:
                d["_parameters"].pop(name, None)
                d["_sub_layers"].pop(name, None)
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for table in ("_parameters", "_sub_layers", "_buffers"):
            if table in d and name in d[table]:
                return d[table][name]
        raise AttributeError("'%s' object has no attribute '%s'"
                             % (type(self).__name__, name))

    def __delattr__(self, name):
        for table in ("_parameters", "_sub_layers", "_buffers"):
            if name in self.__dict__.get(table, {}):
                del self.__dict__[table][name]
                return
        object.__delattr__(self, name)

    def add_sublayer(self, name, sublayer):
        setattr(self, name, sublayer)
        return sublayer

    def add_parameter(self, name, parameter):
        setattr(self, name, parameter)
        return parameter

    def register_buffer(self, name, tensor, persistable=True):
        self._ready()
        self.__dict__["_buffers"][name] = tensor

    def create_parameter(self, shape, dtype=None, is_bias=False,
                         default_initializer=None, attr=None):
        """A new parameter: zeros for a bias, else Xavier uniform (Paddle's
        defaults); default_initializer(shape) may return the values."""
        shape = [int(s) for s in shape]
        if default_initializer is not None:
            t = default_initializer(shape)
        elif is_bias:
            t = _C.create("zeros", shape, dtype or self._dtype, None)
        else:
            fan_in = shape[0] if shape else 1
            fan_out = shape[1] if len(shape) > 1 else fan_in
            limit = _math.sqrt(6.0 / (fan_in + fan_out))
            t = _uniform(shape, dtype or self._dtype, -limit, limit)
        t.stop_gradient = False
        return t

    # -- calling -----------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        raise NotImplementedError("%s does not define forward"
                                  % type(self).__name__)

    def __call__(self, *inputs, **kwargs):
        return self.forward(*inputs, **kwargs)

    # -- traversal ---------------------------------------------------------
    def named_sublayers(self, prefix="", include_self=False):
        if include_self:
            yield prefix, self
        for n, l in self._sub_layers.items():
            p = prefix + ("." if prefix else "") + n
            yield p, l
            yield from l.named_sublayers(p)

    def sublayers(self, include_self=False):
        return [l for _, l in self.named_sublayers(include_self=include_self)]

    def children(self):
        return iter(self._sub_layers.values())

    def named_parameters(self, prefix=""):
        seen = set()
        for lp, layer in self.named_sublayers(prefix, include_self=True):
            for n, p in layer._parameters.items():
                if id(p) in seen:
                    continue
                seen.add(id(p))
                yield lp + ("." if lp else "") + n, p

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def named_buffers(self, prefix=""):
        for lp, layer in self.named_sublayers(prefix, include_self=True):
            for n, b in layer._buffers.items():
                yield lp + ("." if lp else "") + n, b

    def buffers(self):
        return [b for _, b in self.named_buffers()]

    def state_dict(self):
        """Parameters and buffers by dotted name (the tensors themselves)."""
        sd = _collections.OrderedDict()
        for lp, layer in self.named_sublayers(include_self=True):
            for table in (layer._parameters, layer._buffers):
                for n, t in table.items():
                    sd[lp + ("." if lp else "") + n] = t
        return sd

    def set_state_dict(self, state_dict, use_structured_name=True):
        """Copy values into this layer's parameters and buffers by name
        (the tensors keep their identity). Returns (missing_keys,
        unexpected_keys), as Paddle; shapes and dtypes are checked before
        anything is written."""
        own = self.state_dict()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        _C.load_into([(k, v) for k, v in own.items() if k in state_dict],
                     [(k, v) for k, v in state_dict.items() if k in own],
                     True)
        return missing, unexpected

    set_dict = set_state_dict
    load_dict = set_state_dict

    def to(self, device=None, dtype=None, blocking=None):
        if dtype is not None:
            raise ValueError("Layer.to(dtype=...) is not provided yet")
        if device is not None and not str(device).startswith(
                _C.get_device().split(":")[0]):
            raise ValueError("Layer.to(device): parameters live on the "
                             "device current when the layer was made; "
                             "call keel.set_device first")
        return self

    def train(self):
        for l in self.sublayers(include_self=True):
            object.__setattr__(l, "training", True)
            l._set_training(True)
        return self

    def eval(self):
        for l in self.sublayers(include_self=True):
            object.__setattr__(l, "training", False)
            l._set_training(False)
        return self

    def _set_training(self, on):
        pass

    def clear_gradients(self, set_to_zero=True):
        for p in self.parameters():
            if p.grad is not None:
                p.clear_grad(set_to_zero)

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [type(self).__name__ + "(" + self.extra_repr()]
        for n, l in self._sub_layers.items():
            sub = repr(l).replace("\n", "\n  ")
            lines.append("  (%s): %s" % (n, sub))
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"


class _CLayer(Layer):
    """A built-in layer: one C layer, whose tensors it registers."""

    def __init__(self, *args):
        super().__init__()
        object.__setattr__(self, "_handle", _C.layer(*args))
        for n, t in self._handle.named_state():
            if t.stop_gradient:
                self.__dict__["_buffers"][n] = t
            else:
                self.__dict__["_parameters"][n] = t
                t.name = n

    def forward(self, *inputs):
        return self._handle.forward(*inputs)

    def _set_training(self, on):
        self._handle.set_training(on)


def _pair(v):
    return list(v) if isinstance(v, (list, tuple)) else [v, v]


def _conv_args(in_channels, out_channels, kernel_size, stride, padding,
               dilation, groups, bias_attr):
    """The C conv layers' arguments; a string padding ('SAME', 'VALID')
    is the padding algorithm."""
    algo = "EXPLICIT"
    if isinstance(padding, str):
        algo, padding = padding.upper(), 0
    return (in_channels, out_channels, _pair(kernel_size), _pair(stride),
            list(padding) if isinstance(padding, (list, tuple))
            else [padding], _pair(dilation), groups, bias_attr is not False,
            algo)


class Linear(_CLayer):
    def __init__(self, in_features, out_features, weight_attr=None,
                 bias_attr=None, name=None):
        super().__init__("linear", in_features, out_features,
                         bias_attr is not False)
        self._desc = "in_features=%d, out_features=%d" % (in_features,
                                                          out_features)

    def extra_repr(self):
        return self._desc


class Conv2D(_CLayer):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1,
                 padding=0, dilation=1, groups=1, padding_mode="zeros",
                 weight_attr=None, bias_attr=None, data_format="NCHW"):
        if padding_mode != "zeros" or data_format != "NCHW":
            raise ValueError("Conv2D: only padding_mode='zeros' and "
                             "data_format='NCHW' are provided")
        super().__init__("conv2d", *_conv_args(
            in_channels, out_channels, kernel_size, stride, padding,
            dilation, groups, bias_attr))


class Conv2DTranspose(_CLayer):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1,
                 padding=0, output_padding=0, groups=1, dilation=1,
                 weight_attr=None, bias_attr=None, data_format="NCHW"):
        if data_format != "NCHW":
            raise ValueError("Conv2DTranspose: only data_format='NCHW' is "
                             "provided")
        super().__init__("conv2d_transpose", *_conv_args(
            in_channels, out_channels, kernel_size, stride, padding,
            dilation, groups, bias_attr), _pair(output_padding))


class MaxPool2D(_CLayer):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False):
        super().__init__("max_pool2d", kernel_size,
                         kernel_size if stride is None else stride, padding,
                         ceil_mode)


class AvgPool2D(_CLayer):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 exclusive=True):
        super().__init__("avg_pool2d", kernel_size,
                         kernel_size if stride is None else stride, padding,
                         ceil_mode, exclusive)


class AdaptiveAvgPool2D(_CLayer):
    def __init__(self, output_size):
        oh, ow = _pair(output_size)
        super().__init__("adaptive_avg_pool2d", oh, ow)


class Flatten(_CLayer):
    def __init__(self, start_axis=1, stop_axis=-1):
        super().__init__("flatten", start_axis, stop_axis)


def _activation(kind, doc):
    class _A(_CLayer):
        def __init__(self, *args, **kwargs):
            a = b = 0.0
            vals = list(args) + list(kwargs.values())
            if vals:
                a = float(vals[0])
                b = float(vals[1]) if len(vals) > 1 else (
                    20.0 if kind == "softplus" else 0.0)
                super().__init__("activation", kind, a, b, False)
            else:
                super().__init__("activation", kind)
    _A.__doc__ = doc
    return _A


ReLU = _activation("relu", "ReLU")
ReLU6 = _activation("relu6", "ReLU6")
Sigmoid = _activation("sigmoid", "Sigmoid")
Tanh = _activation("tanh", "Tanh")
Silu = _activation("silu", "Silu")
Hardswish = _activation("hardswish", "Hardswish")
GELU = _activation("gelu", "GELU(approximate=False)")
LeakyReLU = _activation("leaky_relu", "LeakyReLU(negative_slope=0.01)")
ELU = _activation("elu", "ELU(alpha=1.0)")
Softplus = _activation("softplus", "Softplus(beta=1, threshold=20)")
Softmax = _activation("softmax", "Softmax(axis=-1)")
LogSoftmax = _activation("log_softmax", "LogSoftmax(axis=-1)")
for _n, _c in list(globals().items()):
    if isinstance(_c, type) and _c.__doc__ and _c.__name__ == "_A":
        _c.__name__ = _c.__qualname__ = _n


class BatchNorm1D(_CLayer):
    def __init__(self, num_features, momentum=0.9, epsilon=1e-5):
        super().__init__("batch_norm1d", num_features, momentum, epsilon)


class BatchNorm2D(_CLayer):
    def __init__(self, num_features, momentum=0.9, epsilon=1e-5):
        super().__init__("batch_norm2d", num_features, momentum, epsilon)


class LayerNorm(_CLayer):
    def __init__(self, normalized_shape, epsilon=1e-5):
        if isinstance(normalized_shape, int):
            normalized_shape = [normalized_shape]
        super().__init__("layer_norm", list(normalized_shape), epsilon)


class Dropout(_CLayer):
    def __init__(self, p=0.5, axis=None, mode="upscale_in_train"):
        if axis is not None:
            raise ValueError("Dropout: axis is not provided")
        super().__init__("dropout", p, mode == "downscale_in_infer")


class Embedding(_CLayer):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None,
                 sparse=False):
        super().__init__("embedding", num_embeddings, embedding_dim,
                         -(2 ** 63) if padding_idx is None else padding_idx)


class CrossEntropyLoss(_CLayer):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean",
                 soft_label=False, axis=-1, use_softmax=True,
                 label_smoothing=0.0):
        super().__init__("cross_entropy", ignore_index, reduction,
                         soft_label, axis, use_softmax, label_smoothing,
                         weight)


class GroupNorm(_CLayer):
    def __init__(self, num_groups, num_channels, epsilon=1e-5,
                 weight_attr=None, bias_attr=None, data_format="NCHW"):
        if data_format != "NCHW":
            raise ValueError("GroupNorm: only data_format='NCHW' is provided")
        super().__init__("group_norm", num_groups, num_channels, epsilon)


class SmoothL1Loss(_CLayer):
    def __init__(self, reduction="mean", delta=1.0):
        super().__init__("smooth_l1", reduction, delta)


class NLLLoss(_CLayer):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__("nll", weight, ignore_index, reduction)


class BCEWithLogitsLoss(_CLayer):
    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__("bce_with_logits", weight, reduction, pos_weight)


class MSELoss(_CLayer):
    def __init__(self, reduction="mean"):
        super().__init__("mse", reduction)


class L1Loss(_CLayer):
    def __init__(self, reduction="mean"):
        super().__init__("l1", reduction)


class Sequential(Layer):
    """Sequential(*layers) or Sequential(("name", layer), ...)."""

    def __init__(self, *layers):
        super().__init__()
        for i, l in enumerate(layers):
            if isinstance(l, tuple):
                self.add_sublayer(l[0], l[1])
            else:
                self.add_sublayer(str(i), l)

    def forward(self, x):
        for l in self._sub_layers.values():
            x = l(x)
        return x

    def __getitem__(self, i):
        return list(self._sub_layers.values())[i]

    def __len__(self):
        return len(self._sub_layers)


class LayerList(Layer):
    def __init__(self, sublayers=None):
        super().__init__()
        for l in sublayers or []:
            self.append(l)

    def append(self, layer):
        self.add_sublayer(str(len(self._sub_layers)), layer)
        return self

    def __getitem__(self, i):
        return list(self._sub_layers.values())[i]

    def __iter__(self):
        return iter(self._sub_layers.values())

    def __len__(self):
        return len(self._sub_layers)
