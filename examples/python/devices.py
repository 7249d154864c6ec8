"""Device selection, as in the Paddle 3.3 quick reference's "devices and
precision" section: set_device by name, is_compiled_with_cuda, moving a
tensor with cuda() / cpu(), and a half-precision tensor.

Written against Paddle's API; the first import line is the only one that
differs from the same script for Paddle (`import paddle`). Devices this
machine lacks are reported, not fatal. Run:
    PYTHONPATH=build/python python examples/python/devices.py
"""
import keel as paddle  # the one line that differs from the Paddle script

import sys

for name in ("gpu", "gpu:2", "cpu", "npu", "xpu"):
    try:
        paddle.set_device(name)
        print("set_device(%r): now on %s" % (name, paddle.get_device()))
    except Exception as e:  # no such device here
        print("set_device(%r): not available: %s"
              % (name, str(e).splitlines()[0][:100]))

paddle.set_device("cpu")
on_cpu = paddle.get_device().startswith("cpu")
cuda = paddle.is_compiled_with_cuda()
print("compiled with CUDA:", cuda)

x = paddle.to_tensor([1.0, 2.0, 3.0])
x = x.cuda() if cuda else x
x = x.cpu()
back = x.numpy().tolist() == [1.0, 2.0, 3.0]

h = paddle.to_tensor([0.1, 2.0, 65504.0], dtype="float16")  # half precision
half = h.dtype == paddle.float16 and float(h[2]) == 65504.0

print("on the CPU: %s, tensor moved and back: %s, float16 tensor: %s"
      % (on_cpu, back, half))
sys.exit(0 if on_cpu and back and half else 1)
