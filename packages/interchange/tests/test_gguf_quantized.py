"""GGUF with Q8_0, Q4_0 and F16 matrices: export in llama.cpp's block layouts (the
bytes of gguf's reference quantizer, the file type and digest recorded), import that
keeps the stored bytes as the layers' weights, and, where llama.cpp's own
``llama-quantize`` is built (``bench/llamacpp_peer.py``'s cache), a file it made."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

import riftco.tensor as rt  # noqa: E402
from riftco.autograd import no_grad  # noqa: E402
from riftco.interchange import (  # noqa: E402
    ConversionError,
    export_gguf,
    import_gguf,
    import_gguf_model,
    model_arrays,
)
from riftco.interchange.gguf_layout import linear_sources, to_gguf_tensors  # noqa: E402
from riftco.nn import BlockLinear  # noqa: E402

SIZES = dict(d_model=64, n_heads=4, d_ff=96)
CASES = [("gpt2", {}), ("llama", {"kv_heads": 2})]
TYPES = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}
#: Relative L2 error of the logits of an imported Q8_0 / Q4_0 file against float32.
TOLERANCE = {"q8_0": 5e-2, "q4_0": 0.4, "f16": 2e-3}


def _logits(model, ids):
    with no_grad():
        return np.asarray(model(np.asarray([ids])).numpy(), dtype=np.float64)[0]


def _blocks(model):
    return {n: m for n, m in model.named_modules() if isinstance(m, BlockLinear)}


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0"])
@pytest.mark.parametrize(("preset", "overrides"), CASES, ids=["gpt2", "llama-gqa"])
def test_export_writes_llamacpp_blocks(tmp_path, make_model, tokenizer, dtype, preset, overrides):
    model = make_model(preset, **SIZES, **overrides)
    arrays = model_arrays(model)
    path = export_gguf(tmp_path / "m.gguf", model.config, arrays, tokenizer, dtype=dtype)
    reader = gguf.GGUFReader(path)
    file_type = reader.fields["general.file_type"].contents()
    assert file_type == int(gguf.LlamaFileType[f"MOSTLY_{dtype.upper()}"])
    found = {t.name: t for t in reader.tensors}
    for name, array in to_gguf_tensors(model.config, arrays).items():
        t = found[name]
        if array.ndim == 2 and name != "position_embd.weight":
            assert t.tensor_type == TYPES[dtype], name
            want = gguf.quants.quantize(array, TYPES[dtype])
            assert np.array_equal(np.asarray(t.data).reshape(-1), want.reshape(-1)), name
        else:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32, name
    # The digest recorded for this file type checks out on import.
    import_gguf(path)


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0", "f16"])
@pytest.mark.parametrize(("preset", "overrides"), CASES, ids=["gpt2", "llama-gqa"])
def test_stored_import_keeps_the_file_bytes(
    tmp_path, make_model, tokenizer, dtype, preset, overrides
):
    model = make_model(preset, **SIZES, **overrides)
    path = export_gguf(tmp_path / "m.gguf", model.config, model_arrays(model), tokenizer, dtype)
    runnable = import_gguf_model(path, weights="stored")
    blocks = _blocks(runnable.model)
    assert sorted(blocks) == sorted([*linear_sources(model.config), "language_model_head"])
    originals = dict(model.named_modules())
    for name, layer in blocks.items():
        assert layer.format == dtype
        # Rows split (gpt2's fused qkv) and reordered (llama's rotary pairs) as bytes:
        # each layer holds exactly the blocks of its own float32 weight.
        want = rt.quantize_block_array(originals[name].weight.value.numpy(), dtype)
        assert np.array_equal(layer.weight_data.numpy(), want), name
    # The token embedding holds the values of its blocks, as llama.cpp's lookup reads.
    embedding = model.token_embedding.weight.value.numpy()
    stored = rt.dequantize_block_array(
        rt.quantize_block_array(embedding, dtype), dtype, embedding.shape
    )
    assert np.array_equal(runnable.model.token_embedding.weight.value.numpy(), stored)
    ids = tokenizer.encode("the quick brown fox")
    want, got = _logits(model, ids), _logits(runnable.model, ids)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) <= TOLERANCE[dtype]
    plain = import_gguf_model(path)
    assert not _blocks(plain.model)


#: |riftco - reference| over the largest |reference logit|, on the same Q8_0 / Q4_0 file,
#: against llamacpp_logits(activations="ggml"), which quantizes each product's input as
#: ggml does: about 1e-7 measured (float32 rounding). Where an input lands within
#: float32 rounding of the boundary between two 8-bit codes, the two sides may take
#: different codes (riftco's float32 inputs are not the reference's float64 ones, nor
#: llama.cpp's): that row and the later ones, which read its keys, then move by up to
#: about 3e-2 (one case in these twenty files). So most rows must meet PARITY and every
#: row FLIP; without the input quantization every row is 1e-2 away.
PARITY = 2e-6
FLIP = 0.1
PARITY_CASES = [
    ("gpt2", {}, ()),
    ("llama", {"kv_heads": 2}, ()),
    ("llama", {"tie_embeddings": True}, ()),
    ("gpt2", {}, ("output",)),
    ("llama", {"kv_heads": 2}, ("token_embd", "output")),
    ("llama", {}, ("token_embd",)),
    ("gpt2", {"tie_embeddings": True}, ("output",)),
    ("llama", {"kv_heads": 1, "seed": 3}, ()),
    ("gpt2", {"seed": 5}, ()),
    ("llama", {"seed": 7}, ("output",)),
]


def _decode_last(model, ids):
    """The last token's logits through a key/value cache: the prompt's prefix, then one
    token (the whole-step decoder where the backend has one)."""
    from riftco.nn import ContiguousKVCache

    cache = ContiguousKVCache(model.config, 1)
    seq = [cache.add_sequence()]
    model.forward_incremental([ids[:-1]], cache, seq)
    return np.asarray(model.forward_incremental([ids[-1:]], cache, seq).numpy(), np.float64)[0]


def test_quantized_logits_equal_llamacpps_arithmetic(tmp_path, make_model, tokenizer):
    """On the same file riftco computes what llama.cpp computes (the inputs of the
    products quantized with half scales, as ggml does), to float32 rounding."""
    from riftco.nn.native_decode import decoder_for
    from riftco.testing.llamacpp import llamacpp_logits

    ids = tokenizer.encode("the quick brown fox jumps over the lazy dog")
    errors, plain = [], []
    for dtype in ("q8_0", "q4_0"):
        for k, (preset, overrides, keep) in enumerate(PARITY_CASES):
            model = make_model(preset, **SIZES, **overrides)
            path = tmp_path / f"{dtype}-{k}.gguf"
            export_gguf(path, model.config, model_arrays(model), tokenizer, dtype, keep_float=keep)
            runnable = import_gguf_model(path, weights="stored")
            ours = _logits(runnable.model, ids)
            theirs = llamacpp_logits(path, ids, activations="ggml")
            scale = np.abs(theirs).max()
            errors.append(np.abs(ours - theirs).max(-1) / scale)
            plain.append(np.abs(ours - llamacpp_logits(path, ids)).max(-1) / scale)
            # Decoding one token at a time (the cpu's native whole-step program, the
            # head on blocks too) gives the forward's last row.
            assert decoder_for(runnable.model) is not None
            step = _decode_last(runnable.model, ids)
            assert np.abs(step - ours[-1]).max() <= PARITY * scale, (dtype, k)
    errors_, plain_ = np.concatenate(errors), np.concatenate(plain)
    assert (errors_ <= PARITY).mean() >= 0.8, errors_
    assert errors_.max() <= FLIP
    assert (plain_ > 1e-3).all()
    assert np.median(errors_) <= PARITY / 5


def test_ggml_input_quantization_in_the_reference_matches_the_kernels():
    """riftco-testing's own quantizer (written from ggml's definition) and riftco's
    agree: the same codes and half scales, so the same dequantized input."""
    from riftco.testing.llamacpp import ggml_q8_0_input

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((7, 96)) * rng.uniform(0.01, 50, (7, 1))).astype(np.float32)
    x[0, :32] = np.arange(32) - 15.5  # ties at scale 15.5/127 are not ties: fine either way
    x[1, 32:64] = 127.0 * np.linspace(-1, 1, 32)  # scale 1: the codes are x rounded
    x[2, :32] = 0.0
    q, s = rt.quantize_activation_rows(x)
    want = (q.reshape(7, 3, 32).astype(np.float64) * s[..., None]).reshape(7, 96)
    assert np.array_equal(ggml_q8_0_input(x), want)


def test_stored_weights_refuse_training_and_unknown_modes(tmp_path, make_model, tokenizer):
    model = make_model("gpt2", **SIZES)
    path = export_gguf(tmp_path / "m.gguf", model.config, model_arrays(model), tokenizer, "q8_0")
    with pytest.raises(ConversionError, match="for inference"):
        import_gguf_model(path, weights="stored", trainable=True)
    with pytest.raises(ConversionError, match="weights: expected"):
        import_gguf_model(path, weights="q8_0")
    with pytest.raises(ConversionError, match="expected a dtype among"):
        export_gguf(tmp_path / "x.gguf", model.config, model_arrays(model), tokenizer, "q5_0")


def _llama_quantize() -> Path | None:
    cache = Path(
        os.environ.get("RIFTCO_LLAMACPP_DIR", Path.home() / ".cache" / "riftco" / "llamacpp")
    )
    tool = cache / "bin" / "llama-quantize"
    return tool if tool.is_file() and os.access(tool, os.X_OK) else None


@pytest.mark.parity
@pytest.mark.skipif(_llama_quantize() is None, reason="llama-quantize is not built")
@pytest.mark.parametrize("dtype", ["q8_0", "q4_0"])
@pytest.mark.parametrize(("preset", "overrides"), CASES, ids=["gpt2", "llama-gqa"])
def test_a_llama_quantize_file_imports_with_its_own_bytes(
    tmp_path, make_model, tokenizer, dtype, preset, overrides
):
    model = make_model(preset, **SIZES, **overrides)
    source = export_gguf(tmp_path / "f32.gguf", model.config, model_arrays(model), tokenizer)
    made = tmp_path / f"{dtype}.gguf"
    subprocess.run(
        [str(_llama_quantize()), str(source), str(made), dtype.upper()],
        check=True,
        capture_output=True,
        timeout=120,
    )
    runnable = import_gguf_model(made, weights="stored")
    blocks = _blocks(runnable.model)
    assert blocks, "llama-quantize wrote no Q8_0 / Q4_0 linear"
    originals = dict(model.named_modules())
    for name, layer in blocks.items():
        # llama.cpp's bytes equal ours for the same floats.
        want = rt.quantize_block_array(originals[name].weight.value.numpy(), layer.format)
        assert np.array_equal(layer.weight_data.numpy(), want), name
    ids = tokenizer.encode("hello there")
    want, got = _logits(model, ids), _logits(runnable.model, ids)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) <= TOLERANCE[dtype]
