"""keel's Python package: tensors, ops, autograd and errors, checked
against NumPy (and hand-worked values), never against keel itself."""
import gc

import numpy as np
import pytest

import keel


@pytest.fixture(autouse=True)
def cpu():
    keel.set_device("cpu")
    yield


def test_round_trip_every_dtype():
    for dt in ("float32", "float64", "float16", "int8", "uint8", "int32",
               "int64", "bool"):
        a = (np.arange(12).reshape(3, 4) % 5).astype(dt)
        t = keel.to_tensor(a)
        assert t.dtype == dt
        assert t.shape == [3, 4]
        b = t.numpy()
        assert b.dtype == a.dtype
        np.testing.assert_array_equal(b, a)


def test_to_tensor_defaults_follow_paddle():
    assert keel.to_tensor([1.5, 2.0]).dtype == "float32"
    assert keel.to_tensor([1, 2]).dtype == "int64"
    assert keel.to_tensor(np.zeros(2, np.float64)).dtype == "float64"
    assert keel.to_tensor([1, 2], dtype="float16").dtype == "float16"
    t = keel.to_tensor(3.25)
    assert t.shape == [] and t.item() == 3.25
    assert keel.to_tensor([1.0]).stop_gradient is True
    assert keel.to_tensor([1.0], stop_gradient=False).stop_gradient is False


def test_bfloat16_numpy_is_float32():
    t = keel.to_tensor([1.0, 2.5, -3.0], dtype="bfloat16")
    assert t.dtype == "bfloat16"
    np.testing.assert_array_equal(t.numpy(), np.array([1.0, 2.5, -3.0],
                                                      np.float32))


def test_arithmetic_matches_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32) + 3  # broadcast
    x, y = keel.to_tensor(a), keel.to_tensor(b)
    np.testing.assert_allclose((x + y).numpy(), a + b, rtol=1e-6)
    np.testing.assert_allclose((x - y).numpy(), a - b, rtol=1e-6)
    np.testing.assert_allclose((x * y).numpy(), a * b, rtol=1e-6)
    np.testing.assert_allclose((x / y).numpy(), a / b, rtol=1e-6)
    np.testing.assert_allclose((-x).numpy(), -a)
    np.testing.assert_allclose((x @ x.T).numpy(), a @ a.T, rtol=1e-5)
    np.testing.assert_allclose((x ** 2).numpy(), a ** 2, rtol=1e-6)
    np.testing.assert_array_equal((x > 0).numpy(), a > 0)
    np.testing.assert_array_equal((x == x).numpy(), np.ones_like(a, bool))


def test_scalars_keep_the_tensor_dtype():
    x = keel.to_tensor([1.0, 2.0], dtype="float16")
    assert (x * 2).dtype == "float16"
    assert (2 + x).dtype == "float16"
    np.testing.assert_array_equal((1 - x).numpy(), np.array([0, -1],
                                                            np.float16))
    i = keel.to_tensor([1, 2, 3])
    assert (i + 1).dtype == "int64"
    assert (i * 0.5).dtype == "float32"


def test_catalog_ops_as_functions_and_methods():
    a = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]], np.float32)
    x = keel.to_tensor(a)
    np.testing.assert_allclose(keel.exp(x).numpy(), np.exp(a), rtol=1e-6)
    np.testing.assert_allclose(x.sum().numpy(), a.sum(), rtol=1e-6)
    np.testing.assert_allclose(x.sum(axis=1).numpy(), a.sum(1), rtol=1e-6)
    np.testing.assert_allclose(keel.mean(x, axis=[0], keepdim=True).numpy(),
                               a.mean(0, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(x.argmax(axis=1).numpy(), a.argmax(1))
    np.testing.assert_allclose(keel.relu(x).numpy(), np.maximum(a, 0))
    s = keel.softmax(x, axis=-1).numpy()
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(s, e / e.sum(1, keepdims=True), rtol=1e-6)


def test_variadic_op():
    a = np.ones((2, 2), np.float32)
    out = keel.concat(keel.to_tensor(a), keel.to_tensor(2 * a), axis=0)
    np.testing.assert_array_equal(out.numpy(), np.concatenate([a, 2 * a]))


def test_backward_gradients():
    a = np.array([1.0, -2.0, 3.0], np.float32)
    x = keel.to_tensor(a, stop_gradient=False)
    y = (x * x + keel.sin(x)).sum()
    assert y.grad_fn is not None
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * a + np.cos(a), rtol=1e-6)
    # Gradients accumulate; clear_grad zeroes them.
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * a + np.cos(a) + 3,
                               rtol=1e-6)
    x.clear_grad()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(3, np.float32))
    assert x.is_leaf and not y.is_leaf


def test_matmul_gradient():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    x = keel.to_tensor(a, stop_gradient=False)
    w = keel.to_tensor(b, stop_gradient=False)
    (x @ w).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(),
                               np.ones((2, 4), np.float32) @ b.T, rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(),
                               a.T @ np.ones((2, 4), np.float32), rtol=1e-5)


def test_no_grad_context_and_decorator():
    x = keel.to_tensor([1.0], stop_gradient=False)
    with keel.no_grad():
        assert not keel.is_grad_enabled()
        y = x * 2
    assert keel.is_grad_enabled()
    assert y.stop_gradient

    @keel.no_grad()
    def f(t):
        return t * 3
    assert f(x).stop_gradient
    assert not (x * 3).stop_gradient


def test_indexing_views_share_storage():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = keel.to_tensor(a)
    for idx in (1, (0, 2), (slice(None), 1), (..., 1), (1, slice(1, 3)),
                (slice(None, None, 2),), (None, 0), (-1, -1, -1)):
        v = x[idx]
        np.testing.assert_array_equal(v.numpy(), a[idx])
    assert x[1]._shares_storage(x)
    with pytest.raises(IndexError):
        x[2]


def test_advanced_indexing_against_numpy():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = keel.to_tensor(a)
    cases = [([1, 0],), (slice(None), [2, 0, 2]), (..., np.array([[0, 3],
                                                                 [1, 1]])),
             (a[:, :, 0] > 5,), (a > 20,), (1, [0, 2], slice(1, 3)),
             (slice(None), np.array([True, False, True])), (..., 1, [3, -1]),
             (None, [1]), (np.array([], dtype=np.int64),)]
    for idx in cases:
        np.testing.assert_array_equal(x[idx].numpy(), a[idx],
                                      err_msg=repr(idx))
    # keel Tensors as indices
    np.testing.assert_array_equal(x[keel.to_tensor([1])].numpy(), a[[1]])
    np.testing.assert_array_equal(
        x[:, keel.to_tensor([True, False, True])].numpy(),
        a[:, [True, False, True]])
    with pytest.raises(IndexError, match="one advanced"):
        x[[0], [1]]
    with pytest.raises(IndexError, match="separated"):
        x[1, :, [0, 2]]
    with pytest.raises(IndexError, match="out of bounds"):
        x[[5]]
    with pytest.raises(IndexError, match="does not match"):
        x[a[0] > 5]


def test_advanced_indexing_gradients():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = keel.to_tensor(a, stop_gradient=False)
    (x[[2, 0, 2]] * 2).sum().backward()
    want = np.zeros_like(a)
    want[0] = 2
    want[2] = 4          # picked twice
    np.testing.assert_array_equal(x.grad.numpy(), want)
    x.clear_grad()
    x[a > 6].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), (a > 6).astype(np.float32))


def test_item_assignment_against_numpy():
    a = np.zeros((3, 4), np.float32)
    z = keel.to_tensor(a)
    for key, val in [(1, 5.0), ((slice(None), 0), np.array([1, 2, 3])),
                     ((0, slice(1, 3)), np.array([7, 8])),
                     ((Ellipsis, -1), 9.0)]:
        z[key] = val if not isinstance(val, np.ndarray) else \
            keel.to_tensor(val.astype(np.float32))
        a[key] = val
        np.testing.assert_array_equal(z.numpy(), a)
    z[z > 4] = -1.0
    a[a > 4] = -1.0
    np.testing.assert_array_equal(z.numpy(), a)
    w = keel.to_tensor([1.0, 2.0], stop_gradient=False)
    with pytest.raises(keel.InvalidArgumentError, match="requires a grad"):
        w[0] = 3.0
    with keel.no_grad():
        w[0] = 3.0
    assert w.numpy()[0] == 3.0
    assert keel.to_tensor([1.0])[None].expand([2, 1]).shape == [2, 1]


def test_reshape_transpose_squeeze():
    a = np.arange(6, dtype=np.float32)
    x = keel.to_tensor(a)
    np.testing.assert_array_equal(x.reshape([2, 3]).numpy(), a.reshape(2, 3))
    np.testing.assert_array_equal(x.reshape([2, 3]).T.numpy(),
                                  a.reshape(2, 3).T)
    assert x.reshape([1, 6, 1]).squeeze().shape == [6]
    assert x.unsqueeze(0).shape == [1, 6]
    assert keel.flatten(x.reshape([1, 2, 3])).shape == [6]


def test_errors_are_exceptions_with_keel_messages():
    x = keel.to_tensor(np.ones((2, 3), np.float32))
    y = keel.to_tensor(np.ones((4, 5), np.float32))
    with pytest.raises(keel.InvalidArgumentError) as e:
        x @ y
    assert "matmul" in str(e.value)
    assert e.value.status == "INVALID_ARGUMENT"
    assert isinstance(e.value, ValueError)
    with pytest.raises(keel.KeelError):
        keel.set_device("nosuchdevice:0")
    with pytest.raises(TypeError):
        keel.exp(x, nosuchattr=1)
    with pytest.raises(TypeError):
        keel.Tensor()
    with pytest.raises(ValueError):
        keel.to_tensor(np.ones(3), dtype="float32").reshape([7])
    # A failed call leaves earlier results intact.
    assert x.numpy().sum() == 6


def test_devices_and_seeds():
    assert keel.set_device("cpu").startswith("cpu")
    assert keel.get_device().startswith("cpu")
    assert keel.is_compiled_with_cuda() in (True, False)
    keel.seed(7)
    a = keel.randn([5]).numpy()
    keel.seed(7)
    b = keel.randn([5]).numpy()
    np.testing.assert_array_equal(a, b)
    assert keel.zeros([2, 2]).numpy().sum() == 0
    assert keel.ones([2], dtype="int32").dtype == "int32"
    np.testing.assert_array_equal(keel.arange(5).numpy(), np.arange(5))
    np.testing.assert_array_equal(keel.full([2], 3.5).numpy(), [3.5, 3.5])
    t = keel.to_tensor([1.0]).to("cpu", "float64")
    assert t.dtype == "float64" and t.place.startswith("cpu")


def test_no_leak_over_a_training_loop():
    """Linear regression by gradient descent, 200 steps after a warm-up:
    the loss falls, and neither device memory nor the number of Python
    objects grows (every reference the binding takes is given back)."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((16, 4)).astype(np.float32)
    xs = keel.to_tensor(a)
    ys = keel.to_tensor(a @ np.array([[1.0], [-2.0], [0.5], [3.0]],
                                     np.float32))
    w = keel.to_tensor(np.zeros((4, 1), np.float32), stop_gradient=False)

    def step(w):
        loss = ((xs @ w - ys) ** 2).mean()
        loss.backward()
        with keel.no_grad():
            w_new = w - 0.05 * w.grad
        w_new.stop_gradient = False
        return loss.item(), w_new

    first, w = step(w)
    for _ in range(4):
        _, w = step(w)
    gc.collect()
    before = keel._C.memory_stats()["allocated"]
    objs = len(gc.get_objects())
    for _ in range(200):
        last, w = step(w)
    gc.collect()
    assert last < first * 1e-3
    assert keel._C.memory_stats()["allocated"] == before
    assert len(gc.get_objects()) <= objs + 50


def test_in_place_and_set_value():
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    x = keel.to_tensor(a)
    ident = id(x)
    x.add_(keel.to_tensor([10.0, 20.0]))  # broadcast into x's shape
    x *= 2
    x.clip_(max=40.0)
    assert id(x) == ident
    np.testing.assert_array_equal(x.numpy(),
                                  np.minimum((a + [10, 20]) * 2, 40))
    x.zero_()
    assert x.numpy().sum() == 0
    x.fill_(1.5)
    np.testing.assert_array_equal(x.numpy(), np.full((2, 2), 1.5))
    x.set_value(np.eye(2))
    np.testing.assert_array_equal(x.numpy(), np.eye(2, dtype=np.float32))
    # A view shares the storage: writing through x shows in it.
    row = x[1]
    x.add_(1.0)
    np.testing.assert_array_equal(row.numpy(), [1.0, 2.0])
    # Shape changes and leaves that require a gradient are refused.
    with pytest.raises(keel.InvalidArgumentError):
        x.add_(keel.ones([3, 2, 2]))
    w = keel.to_tensor([1.0, 2.0], stop_gradient=False)
    with pytest.raises(keel.InvalidArgumentError):
        w.add_(1.0)
    with keel.no_grad():
        w.add_(1.0)  # an optimizer-style update
    np.testing.assert_array_equal(w.numpy(), [2.0, 3.0])
    # A tensor saved for backward and then written: backward says so.
    y = (w * w).sum()
    with keel.no_grad():
        w.add_(1.0)
    with pytest.raises(keel.InvalidArgumentError) as e:
        y.backward()
    assert "modified in place" in str(e.value)
