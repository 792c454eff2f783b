"""Reduced-precision inference weights (Q8_0, Q4_0, F16 in llama.cpp's layouts): the
layer against the packed op, whole-model swaps on every preset with logits within the
stated tolerance of float32, decode against the full forward, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.nn as nn
import riftco.tensor as rt
from riftco.autograd import Variable, no_grad

#: Relative L2 error of the logits against float32 (the README states the measured
#: figures: about 5e-4, 2e-2 and 0.2 on the small presets; random weights, 6 layers).
TOLERANCE = {"f16": 2e-3, "q8_0": 4e-2, "q4_0": 0.35}
TINY = dict(vocab_size=64, context_length=32, d_model=64, n_heads=4, n_layers=2, d_ff=128)


def model(preset: str) -> nn.DecoderOnlyTransformer:
    extra = dict(kv_heads=2) if preset == "llama" else {}
    return nn.DecoderOnlyTransformer(nn.TransformerConfig.preset(preset, **TINY, **extra), seed=3)


def tokens(batch=2, length=12):
    return rt.tensor(np.random.default_rng(0).integers(0, TINY["vocab_size"], (batch, length)))


@pytest.mark.parametrize("fmt", nn.INFERENCE_FORMATS)
def test_block_linear_is_the_packed_op_and_shares_a_frozen_bias(fmt):
    linear = nn.Linear(96, 40, seed=1)
    layer = nn.BlockLinear.from_linear(linear, fmt)
    assert layer.bias is linear.bias and not layer.bias.requires_grad
    x = rt.normal((3, 96), seed=2)
    packed = rt.block_quantize(linear.weight.value, fmt)
    assert np.array_equal(layer(x).numpy(), rt.block_linear(x, packed, linear.bias.value).numpy())
    assert layer.weight_bytes == packed.nbytes
    assert fmt in repr(layer)
    # No float32 copy of the weight is kept: the only buffer is the packed bytes.
    assert [n for n, _ in layer.named_buffers()] == ["weight_data"]
    assert layer.weight_data.dtype is rt.DType.uint8


def test_a_recorded_forward_is_refused():
    layer = nn.BlockLinear.from_linear(nn.Linear(32, 8), "q8_0")
    with pytest.raises(nn.ConfigError, match="for inference"):
        layer(Variable(rt.zeros((1, 32)), requires_grad=True))
    with no_grad():
        layer(Variable(rt.zeros((1, 32)), requires_grad=True))
    with pytest.raises(nn.ConfigError, match="format must be one of"):
        nn.quantize_for_inference(model("gpt2"), "q5_0")


@pytest.mark.parametrize("preset", ["gpt2", "riftco_v1", "llama"])
@pytest.mark.parametrize("fmt", nn.INFERENCE_FORMATS)
def test_logits_stay_within_the_stated_tolerance(preset, fmt):
    ref, q = model(preset), model(preset)
    names = q.quantize_for_inference(fmt)
    linears = [n for n, m in ref.named_modules() if type(m) is nn.Linear]
    assert names == linears and len(names) == TINY["n_layers"] * (7 if preset == "llama" else 6)
    assert nn.inference_formats(q) == dict.fromkeys(names, fmt)
    t = tokens()
    with no_grad():
        want, got = ref(t).numpy(), q(t).numpy()
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel <= TOLERANCE[fmt], rel
    if fmt == "q8_0":
        assert rel > 1e-4  # the weights really are 8-bit


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_decoding_follows_the_full_forward(fmt):
    m = model("llama")
    m.quantize_for_inference(fmt)
    prompt = [5, 9, 1, 33]
    out = nn.generate(m, [prompt], nn.SamplingConfig(max_new_tokens=6))[0].tokens
    seq = prompt + out
    with no_grad():
        logits = m(rt.tensor(np.array([seq]))).numpy()[0]
    # Greedy decode picks the argmax of the full forward at every step (margins of
    # random-weight logits are wide enough against summation-order differences).
    assert out == [int(logits[len(prompt) - 1 + i].argmax()) for i in range(len(out))]


def test_rows_off_the_block_stay_float32_and_training_weights_come_back():
    m = nn.DecoderOnlyTransformer(
        nn.TransformerConfig.preset("gpt2", **{**TINY, "d_ff": 80}), seed=1
    )
    names = nn.quantize_for_inference(m, "q4_0")
    assert not any(n.endswith("feed_forward.project") for n in names)  # 80 inputs
    assert type(m.blocks[0].feed_forward.project) is nn.Linear
    layer = m.blocks[0].attention.query
    dense = layer.dequantized_weight().numpy()
    assert nn.dequantize_for_training(m) == names
    back = m.blocks[0].attention.query
    assert type(back) is nn.Linear and np.array_equal(back.weight.value.numpy(), dense)
    assert back.bias.requires_grad
