"""Reduced-precision inference weights (Q8_0, Q4_0, F16 in llama.cpp's layouts): the
layer against the packed op, the one rule for each matrix's type (embedding and head
included, ``keep_float``), whole-model swaps on every preset with logits within the
stated tolerance of float32, decode against the full forward, the way back to
training weights, and the refusals."""

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
LINEARS_ONLY = ("token_embd", "output")


def model(preset: str, **overrides) -> nn.DecoderOnlyTransformer:
    extra = dict(kv_heads=2) if preset == "llama" else {}
    config = nn.TransformerConfig.preset(preset, **{**TINY, **extra, **overrides})
    return nn.DecoderOnlyTransformer(config, seed=3)


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


def test_a_recorded_forward_and_what_the_quantizer_cannot_do_are_refused():
    layer = nn.BlockLinear.from_linear(nn.Linear(32, 8), "q8_0")
    with pytest.raises(nn.ConfigError, match="for inference"):
        layer(Variable(rt.zeros((1, 32)), requires_grad=True))
    with no_grad():
        layer(Variable(rt.zeros((1, 32)), requires_grad=True))
    m = model("gpt2")
    with pytest.raises(nn.ConfigError, match="format must be one of"):
        nn.quantize_for_inference(m, "q5_0")
    with pytest.raises(nn.ConfigError, match="keep_float: expected names among"):
        nn.quantize_for_inference(m, "q8_0", ["lm_head"])
    with pytest.raises(nn.ConfigError, match="a collection of names.*the string 'output'"):
        nn.quantize_for_inference(m, "q8_0", "output")
    with pytest.raises(nn.ConfigError, match="a collection of names.*found int"):
        nn.quantize_for_inference(m, "q8_0", 3)  # type: ignore[arg-type]
    assert not nn.inference_formats(m)  # nothing was replaced by a refused call
    nn.quantize_for_inference(m, "q8_0")
    with pytest.raises(nn.ConfigError, match="quantized already"):
        nn.quantize_for_inference(m, "q4_0")
    with pytest.raises(nn.ConfigError, match="role must be one of"):
        nn.matrix_type("q8_0", "lm_head", 64)
    lora = model("gpt2")
    nn.attach_lora(lora, nn.LoraConfig(rank=2))
    with pytest.raises(nn.ConfigError, match="LoRA adapters"):
        nn.quantize_for_inference(lora, "q8_0")


def test_the_rule_gives_each_matrix_its_type():
    t = nn.matrix_type
    assert [t(f, "linear", 64) for f in ("q8_0", "q4_0", "f16", "f32")] == [
        "Q8_0",
        "Q4_0",
        "F16",
        "F32",
    ]
    assert t("q4_0", "linear", 80) == "F16"  # rows off the block of 32
    assert t("q4_0", "linear", 64, {"token_embd", "output"}) == "Q4_0"  # linears always
    assert t("q8_0", "position_embd", 64) == "F32"
    assert t("q8_0", "token_embd", 64, {"output"}) == "Q8_0"
    assert t("q8_0", "output", 64, {"output"}) == "F32"
    # A tied head is both names: either keeps it float32.
    assert t("q8_0", "tied", 64) == "Q8_0"
    assert t("q8_0", "tied", 64, {"output"}) == t("q8_0", "tied", 64, {"token_embd"}) == "F32"
    assert nn.check_keep_float(None) == frozenset()
    assert nn.check_keep_float(("output",)) == {"output"}


@pytest.mark.parametrize("fmt", nn.INFERENCE_FORMATS)
@pytest.mark.parametrize(
    ("preset", "overrides", "keep"),
    [
        ("gpt2", {}, ()),
        ("gpt2", {}, ("output",)),
        ("llama", {}, ("token_embd",)),
        ("llama", {"tie_embeddings": True}, ()),
        ("llama", {"tie_embeddings": True}, ("output",)),
        ("riftco_v1", {}, ()),
        ("riftco_v1", {}, LINEARS_ONLY),
    ],
    ids=["gpt2", "float-head", "float-embedding", "tied", "tied-kept", "biased", "linears-only"],
)
def test_every_matrix_takes_the_rule_embedding_and_head_included(fmt, preset, overrides, keep):
    ref, q = model(preset, **overrides), model(preset, **overrides)
    tied = q.config.tie_embeddings
    bias = q.language_model_head.bias
    types = nn.quantize_for_inference(q, fmt, keep)
    linears = [n for n, m in ref.named_modules() if type(m) is nn.Linear]
    assert list(types) == [*linears, "token_embedding", "language_model_head"]
    assert {types[n] for n in linears} == {fmt.upper()}
    embedding_type = nn.matrix_type(fmt, "tied" if tied else "token_embd", 64, keep)
    head_type = nn.matrix_type(fmt, "tied" if tied else "output", 64, keep)
    assert types["token_embedding"] == embedding_type and types["language_model_head"] == head_type
    table = ref.token_embedding.weight.value
    got = q.token_embedding.weight.value.numpy()
    if embedding_type == "F32":
        assert np.array_equal(got, table.numpy())
    else:  # the values of its blocks, as llama.cpp's row lookup reads them
        blocks = rt.block_quantize(table, embedding_type.lower())
        assert np.array_equal(got, rt.block_dequantize(blocks).numpy())
        assert not np.array_equal(got, table.numpy())
    head = q.language_model_head
    if head_type == "F32":
        assert type(head) is nn.LanguageModelHead and head.tied == tied
    else:
        assert type(head) is nn.BlockHead and head.format == head_type.lower()
        source = table if tied else ref.language_model_head.weight.value
        want = rt.block_quantize(source, head_type.lower()).data.numpy()
        assert np.array_equal(head.weight_data.numpy(), want)
        assert head.bias is bias and (bias is None or not bias.requires_grad)
    if preset == "gpt2":  # the position embedding stays float32
        assert np.array_equal(
            q.position_embedding.weight.value.numpy(), ref.position_embedding.weight.value.numpy()
        )
    # The model runs on what it holds: the logits stay within the stated tolerance.
    t = tokens()
    with no_grad():
        want_logits, got_logits = ref(t).numpy(), q(t).numpy()
    rel = np.linalg.norm(got_logits - want_logits) / np.linalg.norm(want_logits)
    assert rel <= TOLERANCE[fmt], rel


@pytest.mark.parametrize("preset", ["gpt2", "riftco_v1", "llama"])
@pytest.mark.parametrize("fmt", nn.INFERENCE_FORMATS)
def test_logits_of_quantized_linears_stay_within_the_stated_tolerance(preset, fmt):
    """The README's figures: the linears alone (embedding and head kept float32)."""
    ref, q = model(preset), model(preset)
    names = list(q.quantize_for_inference(fmt, LINEARS_ONLY))
    linears = [n for n, m in ref.named_modules() if type(m) is nn.Linear]
    assert names == [*linears, "token_embedding", "language_model_head"]
    assert len(linears) == TINY["n_layers"] * (7 if preset == "llama" else 6)
    assert nn.inference_formats(q) == dict.fromkeys(linears, fmt)
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


def test_rows_off_the_block_are_f16_and_training_weights_come_back():
    m = nn.DecoderOnlyTransformer(
        nn.TransformerConfig.preset("gpt2", **{**TINY, "d_ff": 80}), seed=1
    )
    types = nn.quantize_for_inference(m, "q4_0")
    assert {n: k for n, k in types.items() if n.endswith("feed_forward.project")} == {
        "blocks.0.feed_forward.project": "F16",  # 80 inputs: not whole blocks of 32
        "blocks.1.feed_forward.project": "F16",
    }
    assert m.blocks[0].feed_forward.project.format == "f16"
    layer = m.blocks[0].attention.query
    dense = layer.dequantized_weight().numpy()
    head = m.language_model_head.dequantized_weight().numpy()
    t = tokens()
    assert nn.dequantize_for_training(m) == [n for n in types if n != "token_embedding"]
    back = m.blocks[0].attention.query
    assert type(back) is nn.Linear and np.array_equal(back.weight.value.numpy(), dense)
    assert back.bias.requires_grad
    float_head = m.language_model_head
    assert type(float_head) is nn.LanguageModelHead and not float_head.tied
    assert np.array_equal(float_head.weight.value.numpy(), head)
    assert not nn.inference_formats(m)
    m(t)  # trainable again: a recorded forward runs


def test_a_tied_head_is_tied_again_after_dequantizing():
    ref, m = model("llama", tie_embeddings=True), model("llama", tie_embeddings=True)
    nn.quantize_for_inference(m, "f16")
    assert type(m.language_model_head) is nn.BlockHead
    t = tokens()
    with no_grad():
        quantized = m(t).numpy()
    nn.dequantize_for_training(m)
    head = m.language_model_head
    assert type(head) is nn.LanguageModelHead and head.tied and head.weight is None
    assert set(m.state_dict()) == set(ref.state_dict())
    with no_grad():
        # F16 products take float32 inputs: the float32 model on the dequantized values
        # computes the same up to summation order.
        np.testing.assert_allclose(m(t).numpy(), quantized, rtol=1e-4, atol=1e-4)
