"""paddle.utils.dlpack: to_dlpack(x) and from_dlpack(capsule_or_array)."""
from .. import from_dlpack, to_dlpack  # noqa: F401
