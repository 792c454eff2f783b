"""The model lists the backend capabilities a job needs: from its configuration, and
from the layers it holds (NF4 and block-layout weights add their kernels)."""

from __future__ import annotations

import pytest

import riftco.nn as nn
import riftco.tensor as rt
from riftco.nn import DecoderOnlyTransformer, TransformerConfig, required_capabilities_for

TINY = {"vocab_size": 64, "context_length": 16, "d_model": 32, "n_layers": 1, "n_heads": 2}


def tiny(preset: str = "gpt2", **fields):
    return TransformerConfig.preset(preset, **{**TINY, **fields})


def test_every_list_is_in_table_order_and_starts_from_the_base_op_layer():
    for preset in ("gpt2", "llama"):
        for job in nn.JOBS:
            needs = required_capabilities_for(TransformerConfig.preset(preset), job)
            assert needs == tuple(c for c in rt.CAPABILITIES if c in needs)
            assert set(rt.BASE_CAPABILITIES) <= set(needs)
            assert "decode_step" not in needs and "decode_program" not in needs


def test_training_jobs_need_backward_kernels_and_the_configs_own():
    gpt = set(required_capabilities_for(TransformerConfig.preset("gpt2"), "train"))
    assert {"layer_norm", "layer_norm_backward", "flash_attention_backward"} <= gpt
    assert {"adam_update", "cross_entropy", "cross_entropy_backward"} <= gpt
    assert not {"rms_norm", "rotary", "attention", "nf4_linear", "write_rows"} & gpt
    llama = TransformerConfig.preset("llama", attention="materialized")
    assert required_capabilities_for(llama, "lora") == required_capabilities_for(llama, "train")
    qlora = set(required_capabilities_for(llama, "qlora"))
    assert {"rms_norm_backward", "rotary", "attention_backward"} <= qlora
    assert {"nf4_dequantize", "nf4_linear", "nf4_linear_backward"} <= qlora


def test_decoding_jobs_need_the_forward_and_their_cache_kernels_only():
    for preset in ("gpt2", "llama"):
        config = TransformerConfig.preset(preset)
        generate = set(required_capabilities_for(config, "generate"))
        serve = set(required_capabilities_for(config, "serve"))
        assert generate - serve == {"attention_varlen"}
        assert serve - generate == {"paged_attention"}
        assert not {c for c in serve if c.endswith("_backward")}
        assert not {"adam_update", "cross_entropy", "attention", "flash_attention"} & serve
    llama = set(required_capabilities_for(TransformerConfig.preset("llama"), "serve"))
    assert {"rms_norm", "rotary"} <= llama and "layer_norm" not in llama


def test_weights_formats_add_their_layers_kernels():
    config = tiny()
    plain = set(required_capabilities_for(config, "serve"))
    for fmt in nn.INFERENCE_FORMATS:
        assert set(required_capabilities_for(config, "serve", weights=fmt)) == {
            *plain,
            "block_linear",
        }
    assert required_capabilities_for(config, "serve", weights="float32") == tuple(
        c for c in rt.CAPABILITIES if c in plain
    )
    generate = set(required_capabilities_for(config, "generate", weights="nf4"))
    assert generate - set(required_capabilities_for(config, "generate")) == {"nf4_linear"}


def test_unknown_jobs_and_formats_are_refused():
    with pytest.raises(nn.ConfigError, match="job must be one of"):
        required_capabilities_for(tiny(), "finetune")
    with pytest.raises(nn.ConfigError, match="weights must be one of"):
        required_capabilities_for(tiny(), "serve", weights="q2_k")
    with pytest.raises(TypeError, match="expected a TransformerConfig"):
        required_capabilities_for({"norm": "rms"}, "serve")  # type: ignore[arg-type]


def test_the_model_adds_what_its_layers_hold():
    model = DecoderOnlyTransformer(tiny())
    config = model.config
    for job in nn.JOBS:
        assert model.required_capabilities(job) == required_capabilities_for(config, job)
        assert DecoderOnlyTransformer.required_capabilities_for(config, job) == (
            required_capabilities_for(config, job)
        )
    model.quantize_for_inference("q8_0")
    assert set(model.required_capabilities("serve")) == {
        *required_capabilities_for(config, "serve"),
        "block_linear",
    }
    assert model.required_capabilities("serve") == required_capabilities_for(
        config, "serve", weights="q8_0"
    )
    quantized = DecoderOnlyTransformer(tiny("llama"))
    nn.quantize_model(quantized, block_size=32)
    assert "nf4_linear" in quantized.required_capabilities("generate")
    assert "nf4_linear_backward" not in quantized.required_capabilities("generate")
    assert quantized.required_capabilities("qlora") == required_capabilities_for(
        quantized.config, "qlora"
    )


def test_layers_declare_their_own_kernels():
    assert nn.Linear.layer_capabilities("train") == ()
    assert nn.BlockLinear.layer_capabilities("serve") == ("block_linear",)
    assert nn.QuantizedLinear.layer_capabilities("generate") == ("nf4_linear",)
    assert set(nn.QuantizedLinear.layer_capabilities("qlora")) == {
        "nf4_dequantize",
        "nf4_linear",
        "nf4_linear_backward",
    }
