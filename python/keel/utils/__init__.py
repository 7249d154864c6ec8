"""keel.utils: paddle.utils's DLPack functions."""
from . import dlpack  # noqa: F401
