"""A bundle holds plain float32 weights: adapted or quantized models are refused."""

import pytest

from riftco.interchange import save_bundle
from riftco.nn import (
    AdapterError,
    DecoderOnlyTransformer,
    LoraConfig,
    TransformerConfig,
    attach_lora,
)
from riftco.text import ByteTokenizer


def test_unmerged_adapters_are_refused(tmp_path):
    tokenizer = ByteTokenizer.train(bytes(range(32, 127)))
    config = TransformerConfig.preset(
        "gpt2",
        vocab_size=tokenizer.vocab_size,
        context_length=16,
        d_model=16,
        n_layers=1,
        n_heads=2,
        d_ff=32,
    )
    model = DecoderOnlyTransformer(config, seed=0)
    attach_lora(model, LoraConfig(rank=2, alpha=4))
    with pytest.raises(AdapterError, match="unmerged LoRA adapters"):
        save_bundle(tmp_path / "m.rift", model, tokenizer)
    assert not (tmp_path / "m.rift").exists()
