"""Every layer and fused function against finite differences (gradcheck), plus the
behaviour of Embedding and Dropout."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.nn as nn
import riftco.tensor as rt
from riftco.autograd import Variable, gradcheck, no_grad
from riftco.nn import functional as F


def var(shape, seed, scale=1.0, backend=None):
    values = np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32) * scale
    return Variable(rt.from_numpy(values, backend=backend), requires_grad=True)


def check_module(module, *inputs):
    """gradcheck of ``module`` with respect to its inputs and every parameter (the
    parameter slots are pointed at gradcheck's variables while it runs)."""
    slots = [
        (m, name, p)
        for _, m in module.named_modules()
        for name, p in m._parameters.items()
        if p is not None
    ]

    def fn(*args):
        n = len(inputs)
        for (m, name, _), value in zip(slots, args[n:]):
            m.__dict__[name] = value
        return module(*args[:n])

    try:
        params = [Variable(p.value, requires_grad=True) for _, _, p in slots]
        assert gradcheck(fn, [*inputs, *params])
    finally:
        for m, name, p in slots:
            m.__dict__[name] = p


@pytest.mark.parametrize("bias", [True, False])
def test_linear(backend, bias):
    layer = nn.Linear(5, 3, bias, seed=1, backend=backend)
    assert layer.weight.shape == (3, 5)
    check_module(layer, var((2, 4, 5), 0, backend=backend))


def test_norms(backend):
    check_module(nn.LayerNorm(6, backend=backend), var((3, 6), 1, 2.0, backend))
    check_module(nn.LayerNorm(6, bias=False, backend=backend), var((3, 6), 2, 2.0, backend))
    check_module(nn.RMSNorm(6, backend=backend), var((2, 2, 6), 3, 2.0, backend))
    ln = nn.LayerNorm(6)
    ln.weight.value.assign_(rt.normal((6,), seed=4))
    check_module(ln, var((3, 6), 5, 2.0))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_activations(backend, approximate):
    check_module(nn.GELU(approximate), var((4, 5), 6, 3.0, backend))
    check_module(nn.SiLU(), var((4, 5), 7, 3.0, backend))


def test_feed_forward_layers(backend):
    check_module(nn.FeedForward(4, 6, gelu="exact", backend=backend), var((2, 4), 8, 1.0, backend))
    check_module(nn.SwiGLU(4, 6, backend=backend), var((2, 4), 9, 1.0, backend))


@pytest.mark.parametrize("method", ["flash", "materialized"])
@pytest.mark.parametrize("window", [0, 2])
def test_attention_function(backend, method, window):
    q, k, v = (
        var((1, 4, 2, 4), 10, 1.5, backend),
        var((1, 4, 1, 4), 11, 1.5, backend),
        var((1, 4, 1, 4), 12, 1.0, backend),
    )
    assert gradcheck(lambda a, b, c: F.attention(a, b, c, window=window, method=method), [q, k, v])


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_attention_layer(name):
    config = nn.TransformerConfig.preset(
        name, vocab_size=8, context_length=8, d_model=8, n_heads=2, n_layers=1, d_ff=8
    )
    layer = nn.CausalSelfAttention(config)
    positions = F.positions_for(1, 3, "cpu")
    for p in layer.parameters():
        p.value.assign_(rt.normal(p.shape, std=0.5, seed=p.size))
    x = var((1, 3, 8), 13)

    class WithPositions(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = layer

        def forward(self, h):
            return self.inner(h, positions)

    check_module(WithPositions(), x)


def test_rotary_attention_needs_positions():
    config = nn.TransformerConfig.preset(
        "llama", vocab_size=8, context_length=8, d_model=8, n_heads=2, n_layers=1, d_ff=8
    )
    layer = nn.CausalSelfAttention(config)
    x = var((1, 3, 8), 13)
    with pytest.raises(nn.ConfigError, match="rotary model needs positions"):
        layer(x)
    # The adapted-projection path checks too (it used to fail inside rotary).
    nn.quantize_model(layer)
    with pytest.raises(nn.ConfigError, match="rotary model needs positions"):
        layer(x)
    assert layer(x, F.positions_for(1, 3, "cpu")).shape == (1, 3, 8)


@pytest.mark.parametrize("rotary", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_projected_attention_is_the_composition(backend, rotary, bias):
    """One node for projections and attention: the same values and gradients as
    three ``linear`` calls and ``attention`` (grouped-query heads here), and
    finite differences agree."""
    heads, kv_heads, dh, d = 2, 1, 4, 6
    x = var((2, 3, d), 20, 1.0, backend)
    ws = [var((n * dh, d), 21 + i, 0.7, backend) for i, n in enumerate((heads, kv_heads, kv_heads))]
    bs = [var((w.shape[0],), 31 + i, 0.3, backend) for i, w in enumerate(ws)] if bias else None
    positions = F.positions_for(2, 3, backend) if rotary else None
    kw = {"heads": heads, "kv_heads": kv_heads, "head_dim": dh, "positions": positions}

    def fused(x, *params):
        return F.projected_attention(x, params[:3], params[3:] or None, theta=50.0, **kw)

    def composed(x, *params):
        parts = [
            F.linear(x, w, b).reshape(2, 3, -1, dh)
            for w, b in zip(params[:3], params[3:] or [None] * 3)
        ]
        if rotary:
            parts[0], parts[1] = (F.rotary(p, positions, 50.0) for p in parts[:2])
        return F.attention(*parts).reshape(2, 3, heads * dh)

    inputs = [x, *ws, *(bs or [])]
    weights = rt.from_numpy(
        np.random.default_rng(5).normal(size=(2, 3, heads * dh)).astype(np.float32), backend=backend
    )
    results = []
    for fn in (fused, composed):
        for v in inputs:
            v.grad = None
        out = fn(*inputs)
        (out * Variable(weights)).sum().backward()
        results.append((out.value.numpy(), [v.grad.numpy() for v in inputs]))
    (a, da), (b, db) = results
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for g, h in zip(da, db):
        np.testing.assert_allclose(g, h, rtol=1e-4, atol=1e-5)
    assert gradcheck(fused, inputs)


def test_rotary_and_swiglu_functions(backend):
    positions = rt.tensor(np.array([[0, 3, 7]]), backend=backend)
    assert gradcheck(lambda x: F.rotary(x, positions, 100.0), [var((1, 3, 2, 4), 14, 1.0, backend)])
    assert gradcheck(F.swiglu, [var((3, 4), 15, 2.0, backend), var((3, 4), 16, 1.0, backend)])


def test_cross_entropy(backend):
    logits = var((2, 3, 5), 17, 3.0, backend)
    targets = rt.tensor(np.array([[1, 4, 0], [2, -100, 3]]), backend=backend)
    mask = rt.tensor(np.array([[True, False, True], [True, True, True]]), backend=backend)
    assert gradcheck(lambda x: F.cross_entropy(x, targets, mask=mask), [logits])
    with no_grad():
        got = F.cross_entropy(logits, targets, mask=mask).item()
    x = logits.numpy().astype(np.float64).reshape(6, 5)
    t = np.array([1, 4, 0, 2, -100, 3])
    kept = np.array([True, False, True, True, False, True])
    lse = np.log(np.exp(x).sum(-1))
    want = (lse - x[np.arange(6), np.where(kept, t, 0)])[kept].mean()
    assert abs(got - want) < 1e-5
    nothing = rt.tensor(np.full((2, 3), -100), backend=backend)
    assert F.cross_entropy(logits, nothing).item() == 0.0


def test_cross_entropy_and_its_gradient_read_nothing_from_the_device(monkeypatch):
    logits = var((2, 3, 5), 18, 3.0, None)
    targets = rt.tensor(np.array([[1, 4, 0], [2, -100, 3]]))
    reads = []
    real = rt.Tensor.numpy
    monkeypatch.setattr(rt.Tensor, "numpy", lambda self: reads.append(self.shape) or real(self))
    F.cross_entropy(logits, targets).backward()
    assert reads == []


def test_embedding(backend):
    emb = nn.Embedding(7, 3, seed=2, backend=backend)
    ids = rt.tensor(np.array([[1, 6], [1, 0]]), backend=backend)
    out = emb(ids)
    np.testing.assert_array_equal(out.numpy(), emb.weight.numpy()[[[1, 6], [1, 0]]])
    out.sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.numpy()[:, 0], [1, 2, 0, 0, 0, 0, 1])
    with no_grad():
        assert isinstance(emb(ids), rt.Tensor)


def test_dropout_is_seeded_and_train_only():
    x = Variable(rt.ones((1000,)), requires_grad=True)
    a, b = nn.Dropout(0.25, seed=3), nn.Dropout(0.25, seed=3)
    ya, yb = a(x).numpy(), b(x).numpy()
    np.testing.assert_array_equal(ya, yb)
    assert set(np.unique(ya)) <= {0.0, np.float32(1 / 0.75)}
    assert 0.15 < (ya == 0).mean() < 0.35
    assert not np.array_equal(a(x).numpy(), ya)  # the next call draws a new mask
    np.testing.assert_array_equal(a(x, key=123).numpy(), a(x, key=123).numpy())
    a.eval()
    assert a(x) is x
    with pytest.raises(nn.ConfigError):
        nn.Dropout(1.0)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_transformer_block(name):
    config = nn.TransformerConfig.preset(
        name, vocab_size=8, context_length=8, d_model=8, n_heads=2, kv_heads=1, n_layers=1, d_ff=8
    )
    block = nn.TransformerBlock(config)
    for p in block.parameters():
        p.value.assign_(p.value + rt.normal(p.shape, std=0.3, seed=p.size))
    positions = F.positions_for(1, 3, "cpu")

    class WithPositions(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = block

        def forward(self, h):
            return self.inner(h, positions)

    check_module(WithPositions(), var((1, 3, 8), 18))
