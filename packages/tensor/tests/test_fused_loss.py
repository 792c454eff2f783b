"""Activation gradients, softmax cross-entropy and rotary embedding against numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tensor_helpers import close, on, rand

import riftco.tensor as rt

ERF = np.vectorize(math.erf)
ACTIVATIONS = {
    "gelu": lambda x: 0.5 * x * (1 + ERF(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x / (1 + np.exp(-x)),
}


@pytest.mark.parametrize("op", sorted(ACTIVATIONS))
def test_activation_backward(backend, op):
    x, dy = rand((3, 50), 1, -6, 6), rand((3, 50), 2)
    wide, h = x.astype(np.float64), 1e-5
    f = ACTIVATIONS[op]
    want = (f(wide + h) - f(wide - h)) / (2 * h) * dy
    close(rt.activation_backward(op, on(backend, x), on(backend, dy)), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="activation_backward"):
        rt.activation_backward("relu", on(backend, x), on(backend, dy))


def np_cross_entropy(x, t, ignore):
    x = x.astype(np.float64)
    lse = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
    kept = t != ignore
    picked = x[np.arange(len(t)), np.where(kept, t, 0)]
    return np.where(kept, lse - picked, 0.0), lse


@pytest.mark.parametrize("n,classes", [(5, 3), (64, 1000), (1, 1)])
def test_cross_entropy_forward_and_backward(backend, n, classes):
    x = rand((n, classes), 3, -8, 8)
    t = np.random.default_rng(0).integers(0, classes, n)
    t[::3] = -100
    losses, lse = rt.softmax_cross_entropy(on(backend, x), on(backend, t))
    want_loss, want_lse = np_cross_entropy(x, t, -100)
    close(losses, want_loss, rtol=1e-5, atol=1e-5)
    close(lse, want_lse, rtol=1e-5, atol=1e-5)
    g = rand((n,), 4)
    d = rt.softmax_cross_entropy_backward(on(backend, g), on(backend, x), on(backend, t), lse)
    wide = x.astype(np.float64)
    p = np.exp(wide - want_lse[:, None])
    kept = t != -100
    p[np.arange(n)[kept], t[kept]] -= 1
    close(d, p * np.where(kept, g, 0)[:, None], rtol=1e-4, atol=1e-6)


def test_cross_entropy_ignore_index_and_errors(backend):
    x = on(backend, rand((2, 4)))
    losses, _ = rt.softmax_cross_entropy(x, on(backend, np.array([7, 1])), ignore_index=7)
    assert losses.numpy()[0] == 0.0
    with pytest.raises(rt.KernelError, match="out of range"):
        rt.softmax_cross_entropy(x, on(backend, np.array([4, 1])))
    with pytest.raises(rt.ShapeError):
        rt.softmax_cross_entropy(x, on(backend, np.array([0, 1, 2])))
    with pytest.raises(rt.DTypeError):
        rt.softmax_cross_entropy(x, on(backend, np.array([0.0, 1.0], np.float32)))


@pytest.mark.parametrize(
    "n,classes,ignored", [(5, 3, (0, 3)), (64, 1000, ()), (300, 7, (5, 299)), (4, 2, (0, 1, 2, 3))]
)
def test_mean_cross_entropy_is_the_mean_over_the_kept_rows(backend, n, classes, ignored):
    # API 1.15 (one pass where a backend has the kernel): the per-row losses' mean over
    # the rows kept, 0 with none kept; the gradient every kept row's at grad * scale.
    x = rand((n, classes), 7, -8, 8)
    t = np.random.default_rng(1).integers(0, classes, n)
    t[list(ignored)] = -100
    xt, tt = on(backend, x), on(backend, t)
    loss, lse, scale = rt.softmax_cross_entropy_mean(xt, tt)
    assert (loss.shape, lse.shape, scale.shape) == ((), (n,), ())
    kept = int((t != -100).sum())
    assert scale.numpy() == np.float32(1.0) / np.float32(max(kept, 1))
    per_row, want_lse = np_cross_entropy(x, t, -100)
    close(loss, per_row.sum() / max(kept, 1), rtol=1e-5, atol=1e-6)
    close(lse, want_lse, rtol=1e-5, atol=1e-5)
    # The ops it stands for: the per-row losses' float32 sum times the scale (a kernel
    # may add the float64 partial sums in another order: the same float32 but rarely).
    losses, _ = rt.softmax_cross_entropy(xt, tt)
    assert loss.item() == pytest.approx((losses.sum() * scale).item(), rel=2**-23, abs=0)
    g = on(backend, np.float32(0.7))
    d = rt.softmax_cross_entropy_mean_backward(g, xt, tt, lse, scale)
    rows = (g * scale).broadcast_to((n,))
    np.testing.assert_array_equal(
        d.numpy(), rt.softmax_cross_entropy_backward(rows, xt, tt, lse).numpy()
    )
    if kept == 0:
        assert loss.item() == 0.0 and not d.numpy().any()


def test_mean_cross_entropy_checks_its_operands(backend):
    x = on(backend, rand((2, 4)))
    with pytest.raises(rt.KernelError, match="out of range"):
        rt.softmax_cross_entropy_mean(x, on(backend, np.array([4, 1])))
    loss, lse, scale = rt.softmax_cross_entropy_mean(x, on(backend, np.array([3, -100])))
    t = on(backend, np.array([3, -100]))
    with pytest.raises(rt.ShapeError, match="grad"):
        rt.softmax_cross_entropy_mean_backward(
            on(backend, np.ones(2, np.float32)), x, t, lse, scale
        )
    with pytest.raises(rt.ShapeError, match="scale"):
        rt.softmax_cross_entropy_mean_backward(loss, x, t, lse, lse)
    with pytest.raises(rt.DTypeError):
        rt.softmax_cross_entropy_mean(x, on(backend, np.array([0.0, 1.0], np.float32)))


def np_rotary(x, pos, theta):
    """Llama's rotate_half form, with float32 frequencies as transformers computes them."""
    dh = x.shape[-1]
    inv_freq = 1.0 / (np.float32(theta) ** (np.arange(0, dh, 2, dtype=np.float32) / dh))
    angle = pos.astype(np.float32)[..., None] * inv_freq
    emb = np.concatenate([angle, angle], -1)[..., None, :].astype(np.float64)
    rotated = np.concatenate([-x[..., dh // 2 :], x[..., : dh // 2]], -1)
    return x * np.cos(emb) + rotated * np.sin(emb)


@pytest.mark.parametrize("shape", [(2, 5, 3, 8), (7, 2, 64), (1, 1, 2)], ids=str)
def test_rotary_matches_rotate_half(backend, shape):
    x = rand(shape, 5)
    pos = np.random.default_rng(1).integers(0, 4096, shape[:-2])
    y = rt.rotary(on(backend, x), on(backend, pos), theta=10000.0)
    close(y, np_rotary(x.astype(np.float64), pos, 10000.0), rtol=1e-4, atol=1e-4)
    # The inverse is the adjoint: <R x, z> == <x, R^-1 z>.
    z = rand(shape, 6)
    back = rt.rotary(on(backend, z), on(backend, pos), theta=10000.0, inverse=True)
    lhs = float((y.numpy().astype(np.float64) * z).sum())
    rhs = float((x.astype(np.float64) * back.numpy()).sum())
    assert abs(lhs - rhs) < 1e-3 * max(1.0, abs(lhs))


def test_rotary_errors(backend):
    x = on(backend, rand((2, 3, 4)))
    with pytest.raises(rt.ShapeError, match="rotary"):
        rt.rotary(x, on(backend, np.zeros((3,), np.int64)))
    with pytest.raises(rt.ShapeError, match="rotary"):
        rt.rotary(on(backend, rand((2, 3, 5))), on(backend, np.zeros((2,), np.int64)))
    with pytest.raises(rt.KernelError, match="negative"):
        rt.rotary(x, on(backend, np.array([0, -1])))


def test_write_rows_in_place(backend):
    dst = on(backend, np.zeros((5, 2, 3), np.float32))
    src = rand((2, 2, 3), 9)
    before = dst.version
    rt.write_rows_(dst, on(backend, np.array([4, 1])), on(backend, src))
    want = np.zeros((5, 2, 3), np.float32)
    want[[4, 1]] = src
    close(dst, want)
    assert dst.version == before + 1
    with pytest.raises(rt.KernelError, match="out of range"):
        rt.write_rows_(dst, on(backend, np.array([5, 0])), on(backend, src))
    with pytest.raises(rt.ShapeError):
        rt.write_rows_(dst, on(backend, np.array([0])), on(backend, src))
