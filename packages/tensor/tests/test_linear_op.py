"""``linear`` and ``linear_backward`` (backend API 1.10): on a backend without the
kernels (the CPU) the composition of matmul, add, astype and sum, bit for bit, and
within float32 rounding of a numpy float64 formula; a backend with the kernels is
handed the storages and the compute dtype."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.tensor.capabilities import CAPABILITIES
from riftco.testing.tensor import NumpyReferenceBackend


def _data(rows=33, inner=12, out=7, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, inner)).astype(np.float32)
    w = rng.standard_normal((out, inner)).astype(np.float32)
    b = rng.standard_normal(out).astype(np.float32)
    g = rng.standard_normal((rows, out)).astype(np.float32)
    return x, w, b, g


def test_the_capabilities_are_in_the_table():
    assert CAPABILITIES["linear"] == CAPABILITIES["linear_backward"] == 10
    assert rt.BACKEND_API_VERSION >= (1, 10)
    assert {"linear", "linear_backward"} <= rt.get_backend("cpu").capabilities()
    reference = NumpyReferenceBackend()
    assert not {"linear", "linear_backward"} & reference.capabilities()
    assert {"linear", "linear_backward"} <= rt.composed_capabilities(reference)


@pytest.mark.parametrize("where", ["cpu", "composed"])
@pytest.mark.parametrize("compute", [None, "bfloat16"])
def test_the_composition_bit_for_bit(compute, where):
    backend = rt.get_backend("cpu") if where == "cpu" else NumpyReferenceBackend()
    x, w, b, g = (rt.tensor(a, backend=backend) for a in _data())
    xl, wl = (x, w) if compute is None else (x.astype(compute), w.astype(compute))
    y = rt.linear(x, w, b, compute=compute)
    want = rt.matmul(xl, wl, transpose_b=True) + b
    assert y.numpy().tobytes() == want.numpy().tobytes()
    assert rt.linear(x, w, compute=compute).numpy().tobytes() == (
        rt.matmul(xl, wl, transpose_b=True).numpy().tobytes()
    )
    gl = g if compute is None else g.astype(compute)
    dx, dw, db = rt.linear_backward(g, x, w, compute=compute)
    assert dx.numpy().tobytes() == rt.matmul(gl, wl).numpy().tobytes()
    assert dw.numpy().tobytes() == rt.matmul(gl, xl, transpose_a=True).numpy().tobytes()
    assert db.numpy().tobytes() == g.sum(axis=0).numpy().tobytes()
    # bfloat16 operands imply the bfloat16 gradient in the products
    if compute is not None:
        parts = rt.linear_backward(g, xl, wl)
        assert parts[0].numpy().tobytes() == dx.numpy().tobytes()


def test_against_numpy():
    x, w, b, g = _data(seed=1)
    y = rt.linear(rt.tensor(x), rt.tensor(w), rt.tensor(b)).numpy()
    np.testing.assert_allclose(
        y, x.astype(np.float64) @ w.T.astype(np.float64) + b, rtol=1e-5, atol=1e-5
    )
    dx, dw, db = rt.linear_backward(rt.tensor(g), rt.tensor(x), rt.tensor(w))
    g64 = g.astype(np.float64)
    np.testing.assert_allclose(dx.numpy(), g64 @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw.numpy(), g64.T @ x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db.numpy(), g64.sum(0), rtol=1e-5, atol=1e-5)


def test_only_the_parts_asked_for():
    x, w, _, g = (rt.tensor(a) for a in _data(seed=2))
    dx, dw, db = rt.linear_backward(g, x, w, need_x=False, need_w=True, need_b=False)
    assert dx is None and db is None and dw.shape == (7, 12)


def test_shapes_and_dtypes_are_checked():
    x, w, b, g = (rt.tensor(a) for a in _data(seed=3))
    with pytest.raises(rt.ShapeError, match="linear"):
        rt.linear(x, x, b)
    with pytest.raises(rt.ShapeError, match="bias"):
        rt.linear(x, w, g)
    with pytest.raises(rt.DTypeError):
        rt.linear(x.astype("bfloat16"), w, b)
    with pytest.raises(rt.DTypeError, match="compute"):
        rt.linear(x, w, b, compute="int64")
    with pytest.raises(rt.ShapeError, match="g"):
        rt.linear_backward(g[:3], x, w)
