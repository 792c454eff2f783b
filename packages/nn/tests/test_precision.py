"""Mixed precision: under ``mixed_precision("bfloat16")`` products and attention read
bfloat16 operands and accumulate in float32; parameters, results and gradients stay
float32; outside it nothing changes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import riftco.nn as nn
import riftco.tensor as rt
from riftco.autograd import Variable
from riftco.nn import functional as F

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(autouse=True)
def _bf16_backend(backend):
    if rt.bfloat16 not in backend.dtypes:
        pytest.skip(f"backend {backend.name!r} holds no bfloat16 tensors")


def values(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def rounded(x: np.ndarray) -> np.ndarray:
    """The float32 values of ``x`` rounded to bfloat16 (nearest, ties to even)."""
    return x.astype(BF16).astype(np.float64)


def test_linear_rounds_operands_and_accumulates_in_float32(backend):
    x, w, b, g = values((2, 5, 24), 1), values((7, 24), 2), values((7,), 3), values((2, 5, 7), 4)
    xv = Variable(rt.from_numpy(x, backend=backend), requires_grad=True)
    wv = Variable(rt.from_numpy(w, backend=backend), requires_grad=True)
    bv = Variable(rt.from_numpy(b, backend=backend), requires_grad=True)
    with nn.mixed_precision("bfloat16"):
        assert nn.compute_dtype() is rt.bfloat16
        y = F.linear(xv, wv, bv)
    assert nn.compute_dtype() is None
    assert y.value.dtype is rt.float32
    want = rounded(x) @ rounded(w).T + b
    np.testing.assert_allclose(y.value.numpy(), want, rtol=1e-5, atol=1e-5)
    # f32 would differ from the rounded operands' product by far more than f32 error.
    assert np.abs(y.value.numpy() - (x @ w.T + b)).max() > 1e-4
    # Backward (run outside the context) keeps the precision chosen at record time.
    (y * rt.from_numpy(g, backend=backend)).sum().backward()
    g2 = rounded(g.reshape(-1, 7))
    for var, expected in (
        (xv, (g2 @ rounded(w)).reshape(x.shape)),
        (wv, g2.T @ rounded(x.reshape(-1, 24))),
        (bv, g.reshape(-1, 7).sum(0)),
    ):
        assert var.grad.dtype is rt.float32 and var.value.dtype is rt.float32
        np.testing.assert_allclose(var.grad.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_outside_the_context_nothing_is_rounded(backend):
    x, w = values((6, 16), 5), values((4, 16), 6)
    y = F.linear(rt.from_numpy(x, backend=backend), rt.from_numpy(w, backend=backend))
    plain = rt.matmul(rt.from_numpy(x, backend=backend), rt.from_numpy(w, backend=backend).T)
    np.testing.assert_array_equal(y.numpy(), plain.numpy())
    with nn.mixed_precision("f32"):
        assert nn.compute_dtype() is None
    with pytest.raises(ValueError, match="expected bfloat16 or float32, found int64"):
        with nn.mixed_precision("int64"):
            pass


@pytest.mark.parametrize(
    ("preset", "method"), [("gpt2", "flash"), ("llama", "flash"), ("llama", "materialized")]
)
def test_model_close_to_float32_with_float32_gradients(backend, preset, method):
    config = nn.TransformerConfig.preset(
        preset, size="tiny", vocab_size=40, d_model=32, d_ff=64, n_heads=2, attention=method
    )
    model = nn.DecoderOnlyTransformer(config, seed=0, backend=backend)
    ids = rt.from_numpy(np.arange(24, dtype=np.int64).reshape(2, 12) % 40, backend=backend)
    targets = rt.from_numpy(
        (np.arange(24, dtype=np.int64).reshape(2, 12) + 1) % 40, backend=backend
    )
    full = model.loss(ids, targets)
    full.backward()
    grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    model.zero_grad()
    with nn.mixed_precision("bf16"):
        low = model.loss(ids, targets)
    low.backward()
    assert low.value.dtype is rt.float32
    assert low.item() == pytest.approx(full.item(), rel=2e-2)
    assert low.item() != full.item()
    low_grads = {}
    for name, p in model.named_parameters():
        assert p.value.dtype is rt.float32 and p.grad.dtype is rt.float32, name
        low_grads[name] = p.grad.numpy()
    # The whole gradient agrees to bfloat16's precision (a few 2^-8), not exactly.
    ref = np.concatenate([g.ravel() for g in grads.values()])
    got = np.concatenate([low_grads[n].ravel() for n in grads])
    error = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert 0 < error < 0.03


def test_a_checkpoint_replays_in_the_precision_of_its_forward(backend):
    grads = {}
    for checkpoint in (False, True):
        config = nn.TransformerConfig.preset(
            "llama",
            size="tiny",
            vocab_size=40,
            d_model=32,
            d_ff=64,
            n_heads=2,
            checkpoint=checkpoint,
        )
        model = nn.DecoderOnlyTransformer(config, seed=0, backend=backend)
        ids = rt.from_numpy(np.arange(24, dtype=np.int64).reshape(2, 12) % 40, backend=backend)
        with nn.mixed_precision("bfloat16"):
            loss = model.loss(ids, ids)
        loss.backward()  # outside the context: the replay must still round
        grads[checkpoint] = [p.grad.numpy().copy() for _, p in model.named_parameters()]
    for plain, replayed in zip(grads[False], grads[True]):
        np.testing.assert_array_equal(plain, replayed)
