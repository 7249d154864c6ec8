"""keel.static: InputSpec, for keel.jit.save and keel.jit.to_static."""


class InputSpec:
    """paddle.static.InputSpec(shape, dtype='float32', name=None); None or
    -1 in shape is a dynamic dimension."""

    def __init__(self, shape, dtype="float32", name=None, stop_gradient=False):
        self.shape = [None if d is None or d == -1 else int(d) for d in shape]
        self.dtype = str(dtype)
        self.name = name

    def __repr__(self):
        return "InputSpec(shape=%s, dtype=%s, name=%s)" % (
            self.shape, self.dtype, self.name)
