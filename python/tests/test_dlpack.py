"""DLPack: keel tensors to NumPy and PyTorch and back without a copy,
checked by writing through one side and reading the other; lifetimes and
reference counts; refusals."""
import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import keel


@pytest.fixture(autouse=True)
def cpu():
    keel.set_device("cpu")
    yield


def test_numpy_views_keel_memory():
    t = keel.to_tensor(np.arange(6, dtype="float32").reshape(2, 3))
    a = np.from_dlpack(t)
    assert a.shape == (2, 3) and a.dtype == np.float32
    np.testing.assert_array_equal(a, np.arange(6).reshape(2, 3))
    a[1, 2] = 50.0                       # NumPy writes ...
    assert t.numpy()[1, 2] == 50.0       # ... keel reads the same bytes
    del t
    gc.collect()
    assert a[1, 2] == 50.0               # the array keeps the memory


def test_numpy_view_of_a_strided_keel_view():
    t = keel.to_tensor(np.arange(12, dtype="int64").reshape(3, 4))
    v = t.transpose([1, 0])[1:3]
    a = np.from_dlpack(v)
    np.testing.assert_array_equal(a, np.arange(12).reshape(3, 4).T[1:3])


def test_keel_views_numpy_memory():
    a = np.arange(8, dtype="float64").reshape(2, 4)
    t = keel.from_dlpack(a)
    assert t.shape == [2, 4] and t.dtype == "float64"
    np.testing.assert_array_equal((t * 2).numpy(), a * 2)
    a[0, 1] = -7.0                       # seen by keel
    assert t.numpy()[0, 1] == -7.0
    t.set_value(np.ones((2, 4)))         # keel writes, NumPy sees
    np.testing.assert_array_equal(a, np.ones((2, 4)))


def test_keel_views_a_transposed_numpy_array():
    a = np.arange(6, dtype="int32").reshape(2, 3)
    t = keel.from_dlpack(a.T)
    np.testing.assert_array_equal(t.numpy(), a.T)
    np.testing.assert_array_equal(t.sum(axis=0).numpy(), a.T.sum(axis=0))


def test_every_dtype_both_ways():
    for dt in ("float32", "float64", "float16", "int8", "uint8", "int32",
               "int64", "bool"):
        a = (np.arange(6) % 3).astype(dt)
        t = keel.from_dlpack(a)
        assert t.dtype == dt
        np.testing.assert_array_equal(t.numpy(), a)
        b = np.from_dlpack(keel.to_tensor(a))
        assert b.dtype == a.dtype
        np.testing.assert_array_equal(b, a)


def test_round_trip_through_keel_is_the_same_storage():
    t = keel.to_tensor([1.0, 2.0, 3.0])
    u = keel.from_dlpack(t)
    np.from_dlpack(u)[0] = 9.0
    assert t.numpy()[0] == 9.0


def test_numpy_array_lives_while_keel_uses_it():
    a = np.arange(1000, dtype="float32")
    before = sys.getrefcount(a)
    t = keel.from_dlpack(a)
    assert sys.getrefcount(a) > before   # keel holds the array
    del a
    gc.collect()
    assert float(t.sum()) == float(np.arange(1000, dtype="float32").sum())
    u = t[10:20]                          # a view keeps it too
    del t
    gc.collect()
    np.testing.assert_array_equal(u.numpy(), np.arange(10, 20))


def test_references_return_after_use():
    a = np.arange(16, dtype="float32")
    base = sys.getrefcount(a)
    for _ in range(200):
        t = keel.from_dlpack(a)
        (t + 1).sum()
        del t
    gc.collect()
    assert sys.getrefcount(a) == base
    t = keel.to_tensor(a)
    for _ in range(200):
        np.from_dlpack(t).sum()
    gc.collect()
    assert sys.getrefcount(t) == 2


def test_capsule_is_consumed_once():
    t = keel.to_tensor([1.0, 2.0])
    cap = keel.utils.dlpack.to_dlpack(t)
    u = keel.utils.dlpack.from_dlpack(cap)
    np.testing.assert_array_equal(u.numpy(), [1.0, 2.0])
    with pytest.raises(TypeError, match="already consumed"):
        keel.from_dlpack(cap)
    with pytest.raises(TypeError, match="dltensor"):
        keel.from_dlpack(object())


def test_unconsumed_capsule_frees_its_reference():
    t = keel.to_tensor([1.0, 2.0])
    base = sys.getrefcount(t)
    for _ in range(100):
        t.__dlpack__()
    gc.collect()
    assert sys.getrefcount(t) == base


def test_read_only_producers_are_refused():
    a = np.frombuffer(bytes(range(8)), dtype=np.uint8)  # read-only
    with pytest.raises(BufferError, match="read-only"):
        keel.from_dlpack(a)


class _OldProducer:
    """A producer from before DLPack 1.0: __dlpack__ takes no max_version."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_producer_without_max_version():
    a = np.arange(4, dtype=np.float32)
    t = keel.from_dlpack(_OldProducer(a))
    a[1] = 9.0
    assert t.numpy()[1] == 9.0


def test_export_refusals():
    t = keel.to_tensor([1.0])
    with pytest.raises(BufferError, match="stream"):
        t.__dlpack__(stream=5)
    assert t.__dlpack_device__() == (1, 0)


def test_discrete_memory_is_not_exported():
    # The CPU plugin's discrete mode gives device addresses that are not
    # the host's: export must refuse (BufferError), import must still work.
    code = (
        "import numpy as np, keel\n"
        "t = keel.to_tensor([1.0, 2.0])\n"
        "assert t.__dlpack_device__()[0] == 12, t.__dlpack_device__()\n"
        "try:\n"
        "    np.from_dlpack(t)\n"
        "except BufferError as e:\n"
        "    assert 'KEEL_FEATURE_HOST_ADDRESSES' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('exported discrete memory')\n"
        "a = np.arange(4, dtype='float32')\n"
        "u = keel.from_dlpack(a)\n"
        "a[0] = 5\n"
        "assert (u * 1).numpy()[0] == 5\n"
        "print('ok')\n")
    env = dict(os.environ, KEEL_CPU_DISCRETE="1")
    r = subprocess.run([sys.executable, "-c", code], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "ok"


def test_torch_both_ways():
    torch = pytest.importorskip(
        "torch", reason="PyTorch is not in .venv (KEEL_WITH_TORCH=1 "
        "bash tools/deps.sh installs it)")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = keel.from_dlpack(x)
    x[0, 0] = 42.0
    assert t.numpy()[0, 0] == 42.0
    k = keel.to_tensor(np.ones((3, 2), dtype="float32"))
    y = torch.from_dlpack(k)
    y.mul_(3.0)
    np.testing.assert_array_equal(k.numpy(), np.full((3, 2), 3.0))
    z = keel.matmul(t, k)
    np.testing.assert_allclose(z.numpy(), (x @ y).numpy())
