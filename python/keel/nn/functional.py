"""keel.nn.functional: Paddle's functional forms, each one catalog op."""
import keel as _k


def relu(x, name=None):
    return _k.relu(x)


def gelu(x, approximate=False, name=None):
    return _k.gelu(x, approximate=approximate)


def sigmoid(x, name=None):
    return _k.sigmoid(x)


def tanh(x, name=None):
    return _k.tanh(x)


def silu(x, name=None):
    return _k.silu(x)


def leaky_relu(x, negative_slope=0.01, name=None):
    return _k.leaky_relu(x, negative_slope=negative_slope)


def softmax(x, axis=-1, dtype=None, name=None):
    if dtype is not None:
        x = x.astype(dtype)
    return _k.softmax(x, axis=axis)


def log_softmax(x, axis=-1, dtype=None, name=None):
    if dtype is not None:
        x = x.astype(dtype)
    return _k.log_softmax(x, axis=axis)


def linear(x, weight, bias=None, name=None):
    return _k.linear(x, weight, bias)


def cross_entropy(input, label, weight=None, ignore_index=-100,
                  reduction="mean", soft_label=False, axis=-1,
                  use_softmax=True, label_smoothing=0.0, name=None):
    out = _k.cross_entropy(input, label, weight, soft_label=soft_label,
                           ignore_index=ignore_index, reduction=reduction,
                           axis=axis, use_softmax=use_softmax,
                           label_smoothing=label_smoothing)
    return out[0] if isinstance(out, tuple) else out


def mse_loss(input, label, reduction="mean", name=None):
    return _k.mse_loss(input, label, reduction=reduction)
