"""Layer norm and RMS norm (forward, statistics, backward) against numpy formulas."""

from __future__ import annotations

import numpy as np
import pytest
from tensor_helpers import close, on, rand

import riftco.tensor as rt


def np_layer_norm(x, w, b, eps):
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def np_rms_norm(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1 if w is None else w)


def numeric_grad(f, x, h=1e-6):
    """Central differences of the scalar f at float64 x."""
    g = np.zeros_like(x)
    flat, gf = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + h
        up = f(x)
        flat[i] = old - h
        gf[i] = (up - f(x)) / (2 * h)
        flat[i] = old
    return g


@pytest.mark.parametrize("shape", [(3, 7), (2, 5, 64), (1, 1), (300, 33)], ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_forward(backend, shape, affine):
    x = rand(shape, 1) * 3 + 1
    w, b = (rand(shape[-1:], 2), rand(shape[-1:], 3)) if affine else (None, None)
    y, mean, rstd = rt.layer_norm_with_stats(
        on(backend, x), w if w is None else on(backend, w), b if b is None else on(backend, b)
    )
    close(y, np_layer_norm(x, w, b, 1e-5), rtol=1e-4, atol=1e-5)
    close(mean, x.astype(np.float64).mean(-1), rtol=1e-5, atol=1e-6)
    close(rstd, 1 / np.sqrt(x.astype(np.float64).var(-1) + 1e-5), rtol=1e-4)


@pytest.mark.parametrize("shape", [(3, 7), (2, 5, 64), (1, 1), (300, 33)], ids=str)
def test_rms_norm_forward(backend, shape):
    x, w = rand(shape, 4), rand(shape[-1:], 5)
    y, rstd = rt.rms_norm_with_stats(on(backend, x), on(backend, w), eps=1e-6)
    close(y, np_rms_norm(x, w, 1e-6), rtol=1e-4, atol=1e-5)
    close(rt.rms_norm(on(backend, x)), np_rms_norm(x, None, 1e-6), rtol=1e-4, atol=1e-5)
    close(rstd, 1 / np.sqrt((x.astype(np.float64) ** 2).mean(-1) + 1e-6), rtol=1e-4)


@pytest.mark.parametrize("kind", ["layer", "layer_plain", "rms"])
def test_norm_backward_matches_finite_differences(backend, kind):
    shape = (2, 3, 6)
    x, c = rand(shape, 6).astype(np.float64), rand(shape, 7).astype(np.float64)
    w, b = rand(shape[-1:], 8).astype(np.float64), rand(shape[-1:], 9).astype(np.float64)
    if kind == "layer_plain":
        w = b = None
    if kind == "rms":
        b = None

    def forward(x_, w_=w, b_=b):
        if kind == "rms":
            return np_rms_norm(x_, w_, 1e-5)
        return np_layer_norm(x_, w_, b_, 1e-5)

    t = on(backend, x.astype(np.float32))
    tw = None if w is None else on(backend, w.astype(np.float32))
    grad = on(backend, c.astype(np.float32))
    if kind == "rms":
        _, rstd = rt.rms_norm_with_stats(t, tw, eps=1e-5)
        dx, dw = rt.rms_norm_backward(grad, t, tw, rstd)
        db = None
    else:
        tb = None if b is None else on(backend, b.astype(np.float32))
        _, mean, rstd = rt.layer_norm_with_stats(t, tw, tb, eps=1e-5)
        dx, dw, db = rt.layer_norm_backward(grad, t, tw, mean, rstd, with_bias=b is not None)
    close(dx, numeric_grad(lambda v: (forward(v) * c).sum(), x.copy()), rtol=1e-3, atol=1e-4)
    if w is None:
        assert dw is None and db is None
        return
    close(dw, numeric_grad(lambda v: (forward(x, v) * c).sum(), w.copy()), rtol=1e-3, atol=1e-4)
    if b is not None:
        close(db, c.sum(axis=(0, 1)), rtol=1e-5, atol=1e-5)


def test_norm_shape_errors(backend):
    x = on(backend, rand((2, 4)))
    with pytest.raises(rt.ShapeError, match=r"weight must be \[4\]"):
        rt.layer_norm(x, on(backend, rand((3,))))
    with pytest.raises(rt.ShapeError, match="d > 0"):
        rt.rms_norm(on(backend, np.zeros((2, 0), np.float32)))
    with pytest.raises(rt.DTypeError):
        rt.layer_norm(on(backend, np.ones((2, 2), np.int64)))


def test_parameter_gradients_do_not_depend_on_threads():
    x, dy = on("cpu", rand((5000, 48), 1)), on("cpu", rand((5000, 48), 2))
    w = on("cpu", rand((48,), 3))
    _, mean, rstd = rt.layer_norm_with_stats(x, w, None)
    before = rt.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 3):
            rt.set_num_threads(threads)
            dx, dw, db = rt.layer_norm_backward(dy, x, w, mean, rstd, with_bias=True)
            results.append([t.numpy().copy() for t in (dx, dw, db)])
    finally:
        rt.set_num_threads(before)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)


def _bits(t):
    return np.asarray(t.numpy()).view(np.uint32)


@pytest.mark.parametrize("shape", [(3, 7), (2, 5, 64), (1, 1), (300, 33)], ids=str)
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_add_layer_norm_has_the_bits_of_the_add_then_the_norm(backend, shape, affine):
    x, r = rand(shape, 6) * 2 + 1, rand(shape, 7)
    w = None if affine == "none" else on(backend, rand(shape[-1:], 8))
    b = on(backend, rand(shape[-1:], 9)) if affine == "both" else None
    tx, tr = on(backend, x), on(backend, r)
    s, y, mean, rstd = rt.add_layer_norm_with_stats(tx, tr, w, b, eps=1e-5)
    want_s = tx + tr
    want = rt.layer_norm_with_stats(want_s, w, b, 1e-5)
    for got, ref in zip((s, y, mean, rstd), (want_s, *want)):
        assert got.shape == ref.shape
        np.testing.assert_array_equal(_bits(got), _bits(ref))
    s2, y2 = rt.add_layer_norm(tx, tr, w, b)
    np.testing.assert_array_equal(_bits(s2), _bits(s))
    np.testing.assert_array_equal(_bits(y2), _bits(y))


def test_add_layer_norm_checks_its_operands(backend):
    x = on(backend, rand((4, 6), 1))
    with pytest.raises(rt.ShapeError, match=r"residual must have shape \(4, 6\), found \(4, 5\)"):
        rt.add_layer_norm(x, on(backend, rand((4, 5), 2)))
    with pytest.raises(rt.ShapeError, match=r"weight must be \[6\], found \(5,\)"):
        rt.add_layer_norm(x, x, on(backend, rand((5,), 3)))
    with pytest.raises(rt.DTypeError, match="float32"):
        rt.add_layer_norm(x, rt.tensor(np.ones((4, 6), np.int64), backend=x.backend))


@pytest.mark.parametrize("shape", [(3, 7), (2, 5, 64), (300, 33)], ids=str)
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_add_layer_norm_backward_has_the_bits_of_the_norms_backward_then_the_add(
    backend, shape, affine
):
    x, r = rand(shape, 10) * 2 + 1, rand(shape, 11)
    w = None if affine == "none" else on(backend, rand(shape[-1:], 12))
    with_bias = affine == "both"
    b = on(backend, rand(shape[-1:], 13)) if with_bias else None
    s, _, mean, rstd = rt.add_layer_norm_with_stats(on(backend, x), on(backend, r), w, b)
    gy, gs = on(backend, rand(shape, 14)), on(backend, rand(shape, 15))
    got = rt.add_layer_norm_backward(gy, gs, s, w, mean, rstd, with_bias)
    dx, dw, db = rt.layer_norm_backward(gy, s, w, mean, rstd, with_bias)
    want = (gs + dx, dw, db)
    for g, e in zip(got, want):
        assert (g is None) == (e is None)
        if g is not None:
            assert g.shape == e.shape
            np.testing.assert_array_equal(_bits(g), _bits(e))


def test_add_layer_norm_backward_checks_its_operands(backend):
    x = on(backend, rand((4, 6), 1))
    s, _, mean, rstd = rt.add_layer_norm_with_stats(x, x)
    with pytest.raises(rt.ShapeError, match=r"grad_s must have shape \(4, 6\), found \(4, 5\)"):
        rt.add_layer_norm_backward(x, on(backend, rand((4, 5), 2)), s, None, mean, rstd)
    with pytest.raises(rt.DTypeError, match="float32"):
        ints = rt.tensor(np.ones((4, 6), np.int64), backend=x.backend)
        rt.add_layer_norm_backward(x, ints, s, None, mean, rstd)
