"""Run only by the python-runner-canfail test, which must see it fail:
proof that a wrong value fails the python suite's runner."""
import numpy as np

import keel


def test_wrong_value_fails():
    x = keel.to_tensor([1.0, 2.0])
    np.testing.assert_array_equal((x + x).numpy(), [2.0, 5.0])
