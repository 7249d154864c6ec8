"""keel: Paddle's tensor API over libkeel (the C library does the work).

    import keel
    keel.set_device("cpu")
    x = keel.to_tensor([[1.0, 2.0], [3.0, 4.0]], stop_gradient=False)
    y = (x * x).sum()
    y.backward()
    x.grad.numpy()          # [[2, 4], [6, 8]]

Every catalog op is a function here (keel.exp, keel.matmul, ...) and the
usual ones are Tensor methods and operators. dtypes are named by strings
("float32", ...; keel.float32 is that string). See docs/python.md.
"""

import builtins as _b
import functools as _functools
import numbers as _numbers

from . import _C
from ._C import KeelError, InvalidArgumentError, NotFoundError

__all__ = []

float32, float64, float16, bfloat16 = "float32", "float64", "float16", "bfloat16"
int8, uint8, int32, int64 = "int8", "uint8", "int32", "int64"
bool_ = "bool"

_FLOATS = (float32, float64, float16, bfloat16)

# NumPy dtype names <-> keel's. bfloat16 has no NumPy type: numpy() gives
# float32 for it.
_NP_OF = {
    "float32": "float32", "float64": "float64", "float16": "float16",
    "int8": "int8", "uint8": "uint8", "int32": "int32", "int64": "int64",
    "bool": "bool",
}


def _np():
    import numpy
    return numpy


def _dtype_name(dtype):
    """A keel dtype name from a string, a NumPy dtype or a Python type."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        name = dtype[7:] if dtype.startswith("paddle.") else dtype
        return {"float": "float32", "double": "float64", "int": "int64",
                "half": "float16"}.get(name, name)
    if dtype is float:
        return "float32"
    if dtype is int:
        return "int64"
    if dtype is bool:
        return "bool"
    return str(_np().dtype(dtype))


def _place_name(place):
    if place is None:
        return None
    return str(place)


# ---- the Tensor class -------------------------------------------------------

class Tensor(_C.TensorBase):
    """A keel tensor. Made by keel.to_tensor, the factories and the ops."""

    __array_priority__ = 100  # NumPy defers to our operators

    # -- properties --------------------------------------------------------
    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def dim(self):
        return self.ndim

    def numel(self):
        return self.size

    # -- host data ---------------------------------------------------------
    def numpy(self):
        """A NumPy copy of the values (bfloat16 comes back as float32)."""
        np = _np()
        t = self
        if t.dtype == "bfloat16":
            t = t.astype("float32")
        if t.size >= 2048 and _C.dlpack_device(t)[0] == 1:
            # Host memory: one copy, straight from the tensor's bytes
            # (below 2048 elements the DLPack capsule costs more than the
            # second copy saves: bench/python/dlpack_interchange.py).
            return np.array(np.from_dlpack(t), copy=True, order="C")
        a = np.frombuffer(t._to_bytes(), dtype=_NP_OF[t.dtype])
        return a.reshape(t.shape).copy()

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a.astype(dtype) if dtype is not None else a

    # -- DLPack (no copy where the device's memory is host memory) ---------
    def __dlpack__(self, stream=None, max_version=None, dl_device=None,
                   copy=None):
        """A DLPack capsule over this tensor's memory, for
        numpy.from_dlpack / torch.from_dlpack: no copy on a device whose
        memory the host addresses (the CPU plugin); BufferError elsewhere.
        copy=True exports a copy."""
        if stream is not None and stream != -1:
            raise BufferError("__dlpack__: keel exports host memory; "
                              "stream must be None, not %r" % (stream,))
        if dl_device is not None and tuple(dl_device) != \
                tuple(self.__dlpack_device__()):
            raise BufferError("__dlpack__: export to device %r is not "
                              "provided" % (dl_device,))
        t = self.clone() if copy else self
        # DLPack 1.0 (a versioned capsule, writable) when the consumer
        # reads it, else the legacy form.
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        try:
            return _C.to_dlpack(t, versioned)
        except KeelError as e:
            raise BufferError(str(e)) from e

    def __dlpack_device__(self):
        return _C.dlpack_device(self)

    def item(self):
        if self.size != 1:
            raise ValueError("item(): the tensor has %d elements, not 1"
                             % self.size)
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-D tensor")
        return self.shape[0]

    def __bool__(self):
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype not in ("int8", "uint8", "int32", "int64"):
            raise TypeError("only integer tensors can be used as an index")
        return int(self.item())

    def __repr__(self):
        return ("Tensor(shape=%s, dtype=%s, place=%s, stop_gradient=%s,\n"
                "       %s)" % (self.shape, self.dtype, self.place,
                                self.stop_gradient,
                                _np().array2string(self.numpy(),
                                                   prefix="       ")))

    __str__ = __repr__

    # -- devices and dtypes ------------------------------------------------
    def astype(self, dtype):
        return self._cast(_dtype_name(dtype))

    cast = astype

    def to(self, *args, **kwargs):
        """to(device), to(dtype) or to(device, dtype), as Paddle's."""
        device = kwargs.get("device")
        dtype = kwargs.get("dtype")
        for a in args:
            name = _dtype_name(a) if not isinstance(a, str) else a
            if isinstance(a, str) and (":" in a or a in _device_types()):
                device = a
            else:
                dtype = name
        t = self
        if device is not None:
            t = t._to_device(str(device))
        if dtype is not None:
            t = t.astype(dtype)
        return t

    def cpu(self):
        return self._to_device("cpu")

    def cuda(self, device_id=None):
        return self._to_device("gpu" if device_id is None
                               else "gpu:%d" % device_id)

    def clone(self):
        return _op("copy", [self])[0]

    # -- shape -------------------------------------------------------------
    def reshape(self, shape, *more):
        if more or isinstance(shape, _numbers.Integral):
            shape = (shape,) + more
        return _C.reshape(self, list(shape))

    def flatten(self, start_axis=0, stop_axis=-1):
        nd = self.ndim
        if nd == 0:
            return self.reshape([1])
        s, e = start_axis % nd, stop_axis % nd
        shape = self.shape
        n = 1
        for d in shape[s:e + 1]:
            n *= d
        return self.reshape(shape[:s] + [n] + shape[e + 1:])

    def transpose(self, perm):
        return _C.transpose(self, list(perm))

    @property
    def T(self):
        return self.transpose(list(range(self.ndim))[::-1])

    def unsqueeze(self, axis):
        return _C.unsqueeze(self, axis)

    def squeeze(self, axis=None):
        if axis is None:
            axes = [i for i, d in enumerate(self.shape) if d == 1]
        else:
            axes = [axis] if isinstance(axis, int) else list(axis)
            axes = [a % self.ndim for a in axes]
        t = self
        for a in sorted(axes, reverse=True):
            if self.shape[a] == 1:
                t = t._squeeze_axis(a)
        return t

    # -- indexing (views) --------------------------------------------------
    def __getitem__(self, index):
        """Paddle's (and NumPy's) indexing. ints, slices, None and ...
        give views of x; one advanced index — an integer Tensor, array or
        list (index_select along its axis, its dims in its place) or a
        boolean one over the leading dims (the elements where it is True,
        as a 1-D run along those dims) — gives a copy that autograd
        follows. Two advanced indices in one subscript are refused."""
        if not isinstance(index, tuple):
            index = (index,)
        adv = [k for k, i in enumerate(index) if _is_advanced(i)]
        if len(adv) > 1:
            raise IndexError("keel indexing takes one advanced (Tensor, "
                             "array or list) index per subscript, not %d"
                             % len(adv))
        if adv:
            # NumPy moves the advanced dims to the front when an int (an
            # advanced index too, there) and the array are not next to
            # each other; keel does not reorder: refuse that case.
            ints = [k for k, i in enumerate(index)
                    if isinstance(i, (_numbers.Integral, Tensor))
                    and not _is_advanced(i)]
            pos = sorted(ints + adv)
            if ints and pos[-1] - pos[0] != len(pos) - 1:
                raise IndexError("an integer and an advanced index "
                                 "separated by a slice, None or ... (NumPy "
                                 "would move the result's dims) are not "
                                 "provided; index in two steps")
        if _b.any(i is Ellipsis for i in index):
            k = index.index(Ellipsis)
            used = _b.sum(_index_dims(i) for i in index if i is not Ellipsis)
            index = index[:k] + (slice(None),) * (self.ndim - used) + \
                index[k + 1:]
        t, axis, drop = self, 0, []
        for i in index:
            if i is None:
                t = t.unsqueeze(axis)
                axis += 1
            elif isinstance(i, slice):
                n = t.shape[axis]
                start, stop, step = i.indices(n)
                if (start, stop, step) != (0, n, 1):
                    t = t._slice(axis, start, stop, step)
                axis += 1
            elif _is_advanced(i):
                t, axis = _advanced(t, axis, i)
            elif isinstance(i, (_numbers.Integral, Tensor)):
                i = int(i)
                n = t.shape[axis]
                if not -n <= i < n:
                    raise IndexError("index %d is out of bounds for axis %d "
                                     "of size %d" % (i, axis, n))
                i %= n
                t = t._slice(axis, i, i + 1, 1)
                drop.append(axis)
                axis += 1
            else:
                raise TypeError("keel indexing takes ints, slices, None, "
                                "..., and integer or boolean Tensors, "
                                "arrays and lists, not %s"
                                % type(i).__name__)
        # Axes still to drop shift left by the advanced index's dims
        # only when they come after it; drop from the right.
        for a in reversed(drop):
            t = t._squeeze_axis(a)
        return t

    def expand(self, shape):
        """A broadcast view of x with `shape` (-1 keeps a dim), as
        paddle.expand."""
        return self._expand(list(shape))

    broadcast_to = expand

    def expand_as(self, y):
        return self._expand(list(y.shape))

    def __setitem__(self, index, value):
        """x[index] = value (a number, Tensor or array, broadcast): for
        basic indices the view's elements are written; for a boolean
        Tensor or array over the leading dims, the elements where it is
        True (where(mask, value, x)). Written in place, as set_value:
        refused on a tensor that requires a gradient while grad mode is
        on."""
        if not self.stop_gradient and _C.is_grad_enabled():
            raise InvalidArgumentError(
                "x[...] = v: the tensor requires a gradient; assignment is "
                "provided on tensors outside autograd (stop_gradient = True, "
                "or under keel.no_grad())")
        key = index if isinstance(index, tuple) else (index,)
        if _b.any(_is_advanced(i) for i in key):
            if len(key) != 1 or not _is_bool_index(key[0]):
                raise IndexError("x[index] = v takes basic indices or one "
                                 "boolean mask over the leading dims")
            mask = _mask_tensor(key[0], self)
            while mask.ndim < self.ndim:
                mask = mask.unsqueeze(mask.ndim)
            v = _value_like(value, self)
            self.set_value(where(mask.expand(self.shape),
                                 v.expand(self.shape), self))
            return
        view = self[index]
        v = _value_like(value, view)
        if v.shape != view.shape:
            v = v.expand(view.shape)
        view.set_value(v)

    # -- writing in place ----------------------------------------------------
    def set_value(self, value):
        """Paddle's set_value: copy value (a Tensor, array or nested list of
        the same shape) into this tensor's own storage; the tensor keeps
        its identity, dtype and device. Not recorded by autograd; a graph
        that saved this tensor for backward then refuses to run."""
        if isinstance(value, Tensor):
            src = value if value.dtype == self.dtype else value.astype(
                self.dtype)
        else:
            src = to_tensor(_np().asarray(value), dtype=self.dtype)
        _C.load_into([("value", self)], [("value", src)], True)
        return self

    def _inplace(self, name, compute):
        """Write compute()'s result into this tensor (name_ in errors)."""
        if not self.stop_gradient and _C.is_grad_enabled():
            raise InvalidArgumentError(
                "%s_: the tensor requires a gradient; in-place ops are "
                "provided on tensors outside autograd (stop_gradient = True, "
                "or under keel.no_grad())" % name)
        out = compute()
        if out.shape != self.shape:
            raise InvalidArgumentError(
                "%s_: the result's shape %s is not the tensor's %s"
                % (name, out.shape, self.shape))
        return self.set_value(out)

    def add_(self, y): return self._inplace("add", lambda: add(self, y))
    def subtract_(self, y):
        return self._inplace("subtract", lambda: subtract(self, y))
    def multiply_(self, y):
        return self._inplace("multiply", lambda: multiply(self, y))
    def divide_(self, y): return self._inplace("divide", lambda: divide(self, y))
    def clip_(self, min=None, max=None):
        kw = {k: v for k, v in (("min", min), ("max", max)) if v is not None}
        return self._inplace("clip", lambda: clip(self, **kw))
    def exp_(self): return self._inplace("exp", lambda: exp(self))
    def sqrt_(self): return self._inplace("sqrt", lambda: sqrt(self))
    def scale_(self, scale=1.0, bias=0.0):
        return self._inplace("scale", lambda: self * scale + bias)

    def zero_(self):
        return self.set_value(zeros_like(self))

    def fill_(self, value):
        return self.set_value(full_like(self, value))

    def __iadd__(self, o): return self.add_(o)
    def __isub__(self, o): return self.subtract_(o)
    def __imul__(self, o): return self.multiply_(o)
    def __itruediv__(self, o): return self.divide_(o)

    # -- autograd ----------------------------------------------------------
    def backward(self, grad_tensor=None, retain_graph=False):
        """Paddle's backward; a loss computed through a DataParallel's
        forward averages the gradients over the ranks (keel.distributed)."""
        if (grad_tensor is None and not retain_graph and
                distributed._backward_through(self)):
            return
        _C.TensorBase.backward(self, grad_tensor, retain_graph)

    def gradient(self):
        g = self.grad
        return None if g is None else g.numpy()

    # -- operators ---------------------------------------------------------
    # Tensor-with-Tensor operands take the C fast path (no attributes, no
    # Python-level argument handling); anything else goes through the op
    # functions, which convert Python numbers.
    def __add__(self, o):
        if type(o) is Tensor:
            return _binary(_ADD, self, o)
        return add(self, o)

    def __radd__(self, o): return add(o, self)

    def __sub__(self, o):
        if type(o) is Tensor:
            return _binary(_SUB, self, o)
        return subtract(self, o)

    def __rsub__(self, o): return subtract(o, self)

    def __mul__(self, o):
        if type(o) is Tensor:
            return _binary(_MUL, self, o)
        return multiply(self, o)

    def __rmul__(self, o): return multiply(o, self)

    def __truediv__(self, o):
        if type(o) is Tensor:
            return _binary(_DIV, self, o)
        return divide(self, o)

    def __rtruediv__(self, o): return divide(o, self)
    def __floordiv__(self, o): return floor_divide(self, o)
    def __mod__(self, o): return remainder(self, o)
    def __pow__(self, o): return pow(self, o)
    def __rpow__(self, o): return pow(o, self)
    def __matmul__(self, o): return matmul(self, o)
    def __rmatmul__(self, o): return matmul(o, self)
    def __neg__(self): return neg(self)
    def __abs__(self): return abs(self)
    def __invert__(self): return logical_not(self)
    def __and__(self, o): return logical_and(self, o)
    def __or__(self, o): return logical_or(self, o)
    def __xor__(self, o): return logical_xor(self, o)
    def __eq__(self, o): return equal(self, o)
    def __ne__(self, o): return not_equal(self, o)
    def __lt__(self, o): return less(self, o)
    def __le__(self, o): return less_equal(self, o)
    def __gt__(self, o): return greater(self, o)
    def __ge__(self, o): return greater_equal(self, o)
    __hash__ = object.__hash__


_C._set_tensor_class(Tensor)
_binary = _C.binary
_ADD, _SUB, _MUL, _DIV = (_C.op_id(n) for n in
                          ("add", "subtract", "multiply", "divide"))


def _device_types():
    return ("cpu", "gpu", "cuda", "npu", "xpu", "mlu", "dcu", "opencl")


# ---- making tensors ----------------------------------------------------------

def _as_tensor(value, like=None):
    """value as a Tensor; Python scalars take like's dtype and place (as
    Paddle's scalar operands do)."""
    if isinstance(value, Tensor):
        return value
    if like is not None and isinstance(value, (_numbers.Number, bool)):
        dt = like.dtype
        if isinstance(value, float) and dt not in _FLOATS:
            dt = "float32"
        if isinstance(value, bool):
            value = int(value)
        return _C.create("full", [], dt, like.place, float(value))
    return to_tensor(value)


def to_tensor(data, dtype=None, place=None, stop_gradient=True):
    """Paddle's to_tensor: from a Tensor, a NumPy array, a buffer, or
    (nested) lists of numbers. Python floats become float32 (Paddle's
    default dtype), ints int64, bools bool."""
    np = _np()
    dtype = _dtype_name(dtype)
    if isinstance(data, Tensor):
        t = data.detach() if dtype is None else data.astype(dtype)
        if place is not None:
            t = t._to_device(_place_name(place))
        if t is data:
            t = data.clone()
    else:
        if isinstance(data, np.ndarray):
            a = data  # keeps its dtype, as in Paddle
        else:
            a = np.asarray(data)
            if dtype is None and a.dtype == np.float64:
                a = a.astype(np.float32)
        if dtype is not None and dtype != "bfloat16":
            a = a.astype(_NP_OF[dtype], copy=False)
        name = str(a.dtype)
        if name not in _NP_OF:
            raise TypeError("to_tensor: NumPy dtype %s has no keel dtype"
                            % name)
        if not a.flags.c_contiguous:
            a = a.copy(order="C")  # (ascontiguousarray would make 0-D 1-D)
        t = _C.from_buffer(a, name, list(a.shape), _place_name(place))
        if dtype == "bfloat16":
            t = t.astype("bfloat16")
    t.stop_gradient = stop_gradient
    return t


def _default_float(dtype):
    return _dtype_name(dtype) or "float32"


def _shape_list(shape):
    if isinstance(shape, Tensor):
        shape = shape.tolist()
    if isinstance(shape, _numbers.Integral):
        return [int(shape)]
    return [int(s) for s in shape]


def zeros(shape, dtype=None, place=None):
    return _C.create("zeros", _shape_list(shape), _default_float(dtype),
                     _place_name(place))


def ones(shape, dtype=None, place=None):
    return _C.create("ones", _shape_list(shape), _default_float(dtype),
                     _place_name(place))


def full(shape, fill_value, dtype=None, place=None):
    return _C.create("full", _shape_list(shape), _default_float(dtype),
                     _place_name(place), float(fill_value))


def empty(shape, dtype=None, place=None):
    return _C.create("empty", _shape_list(shape), _default_float(dtype),
                     _place_name(place))


def zeros_like(x, dtype=None):
    return zeros(x.shape, dtype or x.dtype, x.place)


def ones_like(x, dtype=None):
    return ones(x.shape, dtype or x.dtype, x.place)


def full_like(x, fill_value, dtype=None):
    return full(x.shape, fill_value, dtype or x.dtype, x.place)


def rand(shape, dtype=None):
    return _C.create("rand", _shape_list(shape), _default_float(dtype), None)


def randn(shape, dtype=None):
    return _C.create("randn", _shape_list(shape), _default_float(dtype), None)


def uniform(shape, dtype=None, min=-1.0, max=1.0):
    return _C.create("uniform", _shape_list(shape), _default_float(dtype),
                     None, float(min), float(max))


def normal(mean=0.0, std=1.0, shape=None):
    return _C.create("normal", _shape_list(shape or [1]), "float32", None,
                     float(mean), float(std))


def randint(low=0, high=None, shape=(1,), dtype=None):
    if high is None:
        low, high = 0, low
    return _C.create("randint", _shape_list(shape), _dtype_name(dtype) or
                     "int64", None, float(low), float(high))


def arange(start=0, end=None, step=1, dtype=None):
    if end is None:
        start, end = 0, start
    if dtype is None:
        dtype = "int64" if _b.all(isinstance(v, _numbers.Integral)
                               for v in (start, end, step)) else "float32"
    return _C.arange(float(start), float(end), float(step),
                     _dtype_name(dtype), None)


# ---- devices, seeds, grad mode -------------------------------------------------

def set_device(device):
    """Paddle's set_device("cpu" / "gpu:0" / "npu:1" ...); returns the
    device selected."""
    return _C.set_device(str(device))


def get_device():
    return _C.get_device()


def device_count(device_type):
    return _C.device_count(device_type)


def is_compiled_with_cuda():
    """True when a CUDA plugin with at least one device is loaded (keel
    loads backends at run time, so this is what Paddle's question means
    here)."""
    return _C.device_count("gpu") > 0


def seed(value):
    _C.seed(int(value))


class no_grad:
    """Paddle's no_grad: a context manager and a decorator."""

    def __enter__(self):
        _C.no_grad_begin()
        return self

    def __exit__(self, *exc):
        _C.no_grad_end()
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with no_grad():
                return fn(*args, **kwargs)
        return wrapper


class enable_grad:
    def __enter__(self):
        _C.enable_grad_begin()
        return self

    def __exit__(self, *exc):
        _C.enable_grad_end()
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with enable_grad():
                return fn(*args, **kwargs)
        return wrapper


def is_grad_enabled():
    return _C.is_grad_enabled()


# ---- the ops -------------------------------------------------------------------

def _op(name, inputs, attrs=()):
    return _C.run_op(name, inputs, attrs)


def _parse_attrs(spec):
    """The catalog's "name:type=default;..." as [(name, type, has_default)]."""
    out = []
    for part in spec.split(";"):
        part = part.strip()
        if not part:
            continue
        head, _, default = part.partition("=")
        name, _, typ = head.partition(":")
        out.append((name.strip(), typ.strip(), "=" in part))
    return out


def _attr_value(typ, value):
    if typ == "ints" and isinstance(value, _numbers.Integral):
        return [int(value)]
    if typ == "ints" and isinstance(value, Tensor):
        return value.tolist()
    if typ == "dtype":
        return _dtype_name(value)
    return value


# Ops whose arguments the generated function cannot express well get a
# hand-written one below; ops that take a seed draw it from keel's
# generator through the factories instead.
_SKIP = {"full", "arange", "linspace", "eye", "uniform", "normal", "randint",
         "cast"}

_OPS = {}


def _make_op(name, nin, nout, spec, differentiable):
    attrs = _parse_attrs(spec)
    attr_names = [a[0] for a in attrs]

    def fn(*args, **kwargs):
        kwargs.pop("name", None)  # Paddle's name= argument
        if nin >= 0 and len(args) > nin + len(attrs):
            raise TypeError("%s takes at most %d positional arguments"
                            % (name, nin + len(attrs)))
        if nin < 0 and len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])  # concat([a, b]) as Paddle writes it
        n = nin if nin >= 0 else len(args)
        ins = list(args[:n])
        rest = list(args[n:])
        like = next((a for a in ins if isinstance(a, Tensor)), None)
        if (like is not None and like.dtype not in _FLOATS and
                _b.any(isinstance(a, float) for a in ins)):
            # Paddle: an integer tensor with a float scalar computes in
            # float32.
            ins = [a.astype("float32") if isinstance(a, Tensor) and
                   a.dtype not in _FLOATS else a for a in ins]
            like = next(a for a in ins if isinstance(a, Tensor))
        ins = [None if a is None else _as_tensor(a, like) for a in ins]
        while ins and ins[-1] is None:  # absent optional inputs at the end
            ins.pop()
        given = {}
        for (an, _, _), v in zip(attrs, rest):
            given[an] = v
        for k, v in kwargs.items():
            if k not in attr_names:
                raise TypeError("%s() got an unexpected keyword argument "
                                "'%s' (attributes: %s)"
                                % (name, k, ", ".join(attr_names) or "none"))
            given[k] = v
        triples = [(an, typ, _attr_value(typ, given[an]))
                   for an, typ, _ in attrs if an in given and
                   given[an] is not None]
        outs = _C.run_op(name, ins, triples)
        return outs[0] if len(outs) == 1 else outs

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = "keel op '%s' (%s inputs; attributes: %s)%s" % (
        name, "any number of" if nin < 0 else nin, spec or "none",
        "" if differentiable else "; not differentiable")
    return fn


for _name, _nin, _nout, _spec, _diff in _C.ops():
    if _name in _SKIP:
        continue
    _OPS[_name] = _make_op(_name, _nin, _nout, _spec, _diff)
    globals()[_name] = _OPS[_name]
    if _name not in __all__:
        __all__.append(_name)

# Paddle's spellings of a few catalog ops.
less_than = less                 # noqa: F821 (made above)
greater_than = greater           # noqa: F821


def cast(x, dtype):
    return x.astype(dtype)


def reshape(x, shape):
    return x.reshape(shape)


def transpose(x, perm):
    return x.transpose(perm)


def flatten(x, start_axis=0, stop_axis=-1):
    return x.flatten(start_axis, stop_axis)


def unsqueeze(x, axis):
    return x.unsqueeze(axis)


def squeeze(x, axis=None):
    return x.squeeze(axis)


def _method(opname):
    f = _OPS[opname]

    def m(self, *args, **kwargs):
        return f(self, *args, **kwargs)
    m.__name__ = opname
    m.__doc__ = f.__doc__
    return m


# The catalog ops that read as methods of their first input.
for _name in ("sum", "mean", "max", "min", "prod", "argmax", "argmin", "var",
              "std", "logsumexp", "all", "any", "cumsum", "exp", "log",
              "log1p", "sqrt", "rsqrt", "square", "sin", "cos", "floor",
              "ceil", "round", "abs", "sign", "tanh", "sigmoid", "matmul",
              "add", "subtract", "multiply", "divide", "pow", "maximum",
              "minimum", "equal", "not_equal", "clip", "tile", "flip",
              "topk", "sort", "argsort", "gather", "index_select",
              "take_along_axis", "logical_not", "neg", "relu", "softmax"):
    if _name in _OPS:
        setattr(Tensor, _name, _method(_name))

Tensor.less_than = _method("less")
Tensor.greater_than = _method("greater")

__version__ = _C.version()



# ---- advanced indexing -------------------------------------------------------------

def _is_bool_index(i):
    if isinstance(i, Tensor):
        return i.dtype == "bool"
    if isinstance(i, (list, tuple)):
        return len(i) > 0 and _b.all(isinstance(v, bool) for v in i)
    return getattr(getattr(i, "dtype", None), "kind", None) == "b"


def _is_advanced(i):
    if isinstance(i, Tensor):
        return i.ndim > 0 or i.dtype == "bool"
    if isinstance(i, (list, tuple)):
        return True
    return hasattr(i, "__array_interface__") and \
        getattr(i, "ndim", 0) > 0


def _index_dims(i):
    """How many of x's dims an index component consumes."""
    if i is None:
        return 0
    if _is_advanced(i) and _is_bool_index(i):
        return _np().asarray(i.numpy() if isinstance(i, Tensor) else i).ndim
    return 1


def _mask_tensor(i, x):
    m = i if isinstance(i, Tensor) else to_tensor(_np().asarray(i, bool))
    if m.shape != x.shape[:m.ndim]:
        raise IndexError("boolean index of shape %s does not match the "
                         "leading dims of a tensor of shape %s"
                         % (m.shape, x.shape))
    return m


def _value_like(value, like):
    if isinstance(value, Tensor):
        return value if value.dtype == like.dtype else value.astype(
            like.dtype)
    if isinstance(value, _numbers.Number):
        return full([], value, like.dtype)
    return to_tensor(_np().asarray(value), dtype=like.dtype)


def _advanced(t, axis, i):
    """t indexed at `axis` by one advanced index; returns (t, next axis)."""
    np = _np()
    if _is_bool_index(i):
        m = np.asarray(i.numpy() if isinstance(i, Tensor) else i, bool)
        lead = t.shape[axis:axis + m.ndim]
        if list(m.shape) != lead:
            raise IndexError("boolean index of shape %s does not match dims "
                             "%s of a tensor of shape %s"
                             % (list(m.shape), lead, t.shape))
        flat = t.reshape(t.shape[:axis] + [-1] + t.shape[axis + m.ndim:]) \
            if m.ndim != 1 else t
        idx = to_tensor(np.flatnonzero(m).astype("int64"))
        return index_select(flat, idx, axis=axis), axis + 1
    idx = i if isinstance(i, Tensor) else to_tensor(np.asarray(i))
    if idx.dtype not in (int32, int64):
        raise IndexError("an index Tensor is integer or bool, not %s"
                         % idx.dtype)
    n = t.shape[axis]
    a = idx.numpy()
    if a.size and (a.min() < -n or a.max() >= n):
        raise IndexError("index out of bounds for axis %d of size %d"
                         % (axis, n))
    if a.size and a.min() < 0:
        idx = to_tensor(a % n)
    shape = idx.shape
    out = index_select(t, idx.flatten() if idx.ndim != 1 else idx, axis=axis)
    if len(shape) != 1:
        out = out.reshape(t.shape[:axis] + shape + t.shape[axis + 1:])
    return out, axis + len(shape)


# ---- DLPack ----------------------------------------------------------------------

def from_dlpack(dlpack):
    """A Tensor over another library's memory, without a copy: an object
    with __dlpack__ (a NumPy array, a PyTorch CPU tensor, a keel Tensor)
    or a DLPack capsule. Host memory becomes a tensor of the CPU device;
    the producer's memory stays alive while any view of it does, and
    writes through either side are seen by the other."""
    if hasattr(dlpack, "__dlpack__"):
        if hasattr(dlpack, "__dlpack_device__"):
            kind = dlpack.__dlpack_device__()[0]
            if kind not in (1, 3, 11):  # kDLCPU, kDLCUDAHost, kDLROCMHost
                raise BufferError(
                    "from_dlpack: the object's memory is on DLPack device "
                    "type %d, not host memory; keel takes CPU memory in "
                    "place (move it to the CPU first)" % kind)
        try:  # DLPack 1.0 where the producer has it (it can say read-only)
            capsule = dlpack.__dlpack__(max_version=(1, 0))
        except TypeError:  # a producer from before max_version
            capsule = dlpack.__dlpack__()
    else:
        capsule = dlpack
    return _C.from_dlpack(capsule, "cpu")


def to_dlpack(x):
    """A DLPack capsule over x's memory (paddle.utils.dlpack.to_dlpack)."""
    return x.__dlpack__()


# ---- save and load ---------------------------------------------------------------

def save(obj, path, **configs):
    """paddle.save for state dicts: a dict of name -> Tensor (a model's or
    an optimizer's state_dict()) written as a safetensors file,
    atomically."""
    if not isinstance(obj, dict) or not _b.all(
            isinstance(v, Tensor) for v in obj.values()):
        raise TypeError("keel.save writes a dict of name -> Tensor (a "
                        "state_dict()); other objects are not provided")
    _C.save(str(path), list(obj.items()))


def load(path, **configs):
    """paddle.load of a file keel.save wrote: a dict of name -> Tensor on
    the current device."""
    return dict(_C.load(str(path)))


from . import nn  # noqa: E402  (needs Tensor and the ops above)
from . import optimizer  # noqa: E402
from . import amp  # noqa: E402
from . import io  # noqa: E402
from . import distributed  # noqa: E402
from . import static  # noqa: E402
from . import jit  # noqa: E402
from . import inference  # noqa: E402
from . import utils  # noqa: E402
from .distributed import DataParallel  # noqa: E402,F401
