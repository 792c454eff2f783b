"""NF4 quantized linears and QLoRA: forward and backward against the dequantized
float32 linear, no float32 copy of the weight, no weight gradient, memory figures,
whole-model quantization, adapters over quantized bases and their merge."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.nn as nn
import riftco.tensor as rt
from riftco.autograd import Parameter, Variable, gradcheck, no_grad
from riftco.nn import functional as F

TINY = dict(vocab_size=32, context_length=16, d_model=64, n_heads=2, n_layers=2, d_ff=128)


def linear(seed=0, bias=True, backend=None):
    layer = nn.Linear(96, 40, bias=bias, seed=seed, backend=backend)
    if bias:
        layer.bias.value.assign_(rt.normal((40,), std=0.1, seed=seed + 7, backend=backend))
    return layer


def x_var(shape=(2, 5, 96), seed=1, backend=None):
    return Variable(rt.normal(shape, seed=seed, backend=backend), requires_grad=True)


def tensors_in(obj, seen=None):
    """Every Tensor reachable from a module's attributes (parameters, buffers, caches)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, rt.Tensor):
        return [obj]
    if isinstance(obj, Variable):
        return tensors_in(obj.value, seen) + ([] if obj.grad is None else [obj.grad])
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in tensors_in(v, seen)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in tensors_in(v, seen)]
    if isinstance(obj, np.ndarray):
        return [obj]
    if hasattr(obj, "__dict__"):
        return tensors_in(vars(obj), seen)
    return []


@pytest.mark.parametrize("block_size, double_quant", [(64, True), (32, False), (128, True)])
def test_forward_and_backward_match_the_dequantized_linear(backend, block_size, double_quant):
    base = linear(backend=backend)
    q = nn.QuantizedLinear.from_linear(base, block_size, double_quant)
    dense = q.dequantized_weight()
    x = x_var(backend=backend)
    y = q(x)
    want = F.linear(x.value, dense, base.bias.value)
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    g = rt.normal(y.shape, seed=9, backend=backend)
    y.backward(g)
    dx = rt.matmul(g.reshape(-1, 40), dense).reshape(x.shape)
    np.testing.assert_allclose(x.grad.numpy(), dx.numpy(), rtol=1e-5, atol=1e-5)
    assert base.bias.grad is None  # the frozen base learns nothing


def test_bias_gradient_when_asked_and_finite_differences():
    q = nn.QuantizedLinear.from_linear(linear(seed=3))
    q.bias.requires_grad = True
    x = x_var((3, 96), seed=4)
    assert gradcheck(lambda x, b: nn.quantized.nf4_linear(x, q.weight, b), [x, q.bias])


def test_no_float32_copy_of_the_weight_exists():
    q = nn.QuantizedLinear.from_linear(linear(seed=5))
    q(x_var())  # forward, with the packed-weight cache filled
    big = [t for t in tensors_in(q) if getattr(t, "size", 0) >= 40 * 96 // 2]
    assert [(t.dtype, t.shape) for t in big] == [(rt.uint8, (1920,))]  # the codes only
    assert not any(isinstance(t, np.ndarray) for t in tensors_in(q))
    assert [n for n, _ in q.named_parameters()] == ["bias"]
    assert [n for n, _ in q.named_buffers()] == [
        "weight_codes",
        "weight_absmax",
        "weight_group_range",
        "weight_offset",
    ]
    assert q.weight_bytes == 1920 + 60 + 4 + 4
    assert round(q.bits_per_weight, 3) == round(8 * 1988 / 3840, 3)


def test_weight_has_no_gradient_inside_a_model():
    model = nn.DecoderOnlyTransformer(nn.TransformerConfig.preset("gpt2", **TINY))
    nn.quantize_model(model)
    ids = np.random.default_rng(0).integers(0, 32, (2, 9))
    model.loss(ids[:, :-1], ids[:, 1:]).backward()
    names = {n for n, p in model.named_parameters() if p.grad is not None}
    assert not any(n.endswith(("query.weight", "expand.weight", "project.weight")) for n in names)
    assert not any(".attention." in n or ".feed_forward." in n for n in names)  # biases frozen
    assert "token_embedding.weight" in names


@pytest.mark.parametrize("preset", ["gpt2", "llama"])
def test_quantized_model_matches_its_dequantized_twin(preset):
    model = nn.DecoderOnlyTransformer(nn.TransformerConfig.preset(preset, **TINY), seed=1)
    ids = np.random.default_rng(1).integers(0, 32, (2, 12))
    with no_grad():
        fp32 = model(ids).numpy().copy()
    names = nn.quantize_model(model)
    assert len(names) == 2 * (7 if preset == "llama" else 6)
    assert all(type(m) is not nn.Linear for _, m in model.named_modules())
    with no_grad():
        quantized = model(ids).numpy().copy()
    assert 0 < np.abs(quantized - fp32).max() < 0.25 * np.abs(fp32).max()
    assert nn.dequantize_model(model) == names
    with no_grad():
        np.testing.assert_allclose(model(ids).numpy(), quantized, rtol=1e-5, atol=1e-5)
    assert all(p.requires_grad for p in model.parameters())


def test_memory_figures():
    model = nn.DecoderOnlyTransformer(nn.TransformerConfig.preset("gpt2", **TINY))
    fp32 = nn.weight_memory(model)
    assert fp32.quantized == 0 and fp32.bits_per_weight == 32.0
    nn.quantize_model(model)
    nf4 = nn.weight_memory(model)
    assert nf4.elements == fp32.elements and nf4.layers == fp32.layers == nf4.quantized == 12
    assert nf4.float32_bytes == fp32.stored_bytes
    assert 4.12 < nf4.bits_per_weight < 4.14 and nf4.ratio > 7.7


def test_state_dict_holds_the_payload_and_moves(backend):
    q = nn.QuantizedLinear.from_linear(linear(seed=6))
    state = q.state_dict()
    assert state["weight_codes"].dtype is rt.uint8 and state["weight_absmax"].dtype is rt.uint8
    other = nn.QuantizedLinear.from_linear(linear(seed=8))
    assert other.weight.identity != q.weight.identity
    other.load_state_dict(state)
    assert other.weight.identity == q.weight.identity
    x = x_var()
    expected = q(x.value).numpy().copy()
    q.to(backend)
    assert q.weight.backend.name == backend.name
    got = q(rt.from_numpy(x.value.numpy(), backend=backend))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_qlora_trains_adapters_only_and_merges_to_float32():
    model = nn.DecoderOnlyTransformer(nn.TransformerConfig.preset("llama", **TINY), seed=2)
    nn.quantize_model(model)
    targets = ("attention.query", "attention.value", "feed_forward.down")
    nn.attach_lora(model, nn.LoraConfig(rank=4, alpha=8, targets=targets))
    layer = model.blocks[0].attention.query
    assert isinstance(layer, nn.LoraQuantizedLinear) and isinstance(layer, nn.QuantizedLinear)
    ids = np.random.default_rng(2).integers(0, 32, (2, 12))
    with no_grad():
        start = model(ids).numpy().copy()
    payload = {
        n: m.weight.identity for n, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)
    }
    frozen = {n: p.value.numpy().copy() for n, p in model.named_parameters() if "lora" not in n}
    for _ in range(3):
        model.loss(ids[:, :-1], ids[:, 1:]).backward()
        for n, p in model.named_parameters():
            assert (p.grad is not None) == ("lora" in n)
            if p.grad is not None:
                p.value.assign_(p.value - p.grad * 0.5)
                p.grad = None
    for n, p in model.named_parameters():
        if "lora" not in n:
            assert np.array_equal(p.value.numpy(), frozen[n])
    assert payload == {
        n: m.weight.identity for n, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)
    }
    with no_grad():
        adapted = model(ids).numpy().copy()
    assert not np.array_equal(adapted, start)
    with pytest.raises(nn.AdapterError, match="unmerged"):
        nn.check_exportable(model)
    nn.merge_lora(model)
    assert type(model.blocks[0].attention.query) is nn.Linear
    with pytest.raises(nn.AdapterError, match="NF4"):
        nn.check_exportable(model)  # the layers without adapters are still quantized
    nn.dequantize_model(model)
    nn.check_exportable(model)
    with no_grad():
        np.testing.assert_allclose(model(ids).numpy(), adapted, rtol=1e-5, atol=1e-5)


def test_refusals():
    with pytest.raises(TypeError, match="NF4Weight"):
        nn.QuantizedLinear(np.ones((2, 64)))
    packed = rt.nf4_quantize(np.ones((4, 64), np.float32))
    with pytest.raises(nn.ConfigError, match="bias"):
        nn.QuantizedLinear(packed, Parameter(rt.zeros(3)))
    model = nn.DecoderOnlyTransformer(nn.TransformerConfig.preset("gpt2", **TINY))
    nn.attach_lora(model, nn.LoraConfig())
    with pytest.raises(nn.ConfigError, match="quantize before attaching"):
        nn.quantize_model(model)
