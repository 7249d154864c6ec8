# Regenerates reference.safetensors with the reference safetensors writer
# (pip install safetensors numpy). The committed tests read the file and do
# not need Python; test_io.c holds the same values.
import numpy as np
from safetensors.numpy import save_file

tensors = {
    "fc1.weight": (np.arange(6, dtype=np.float32) * 0.5 - 1.0).reshape(2, 3),
    "fc1.bias": np.array([1.5, -2.0, 65504.0], dtype=np.float16),
    "d": np.array([np.pi, -1e300], dtype=np.float64),
    "steps": np.array(42, dtype=np.int64),
    "ids": np.array([[1, -2], [2147483647, -2147483648]], dtype=np.int32),
    "small": np.array([-128, 0, 127], dtype=np.int8),
    "u": np.arange(250, 255, dtype=np.uint8),
    "mask": np.array([True, False, False, True]),
    "empty": np.zeros((0, 3), dtype=np.float32),
}
save_file(tensors, "reference.safetensors",
          metadata={"format": "np", "note": "keel fixture"})
