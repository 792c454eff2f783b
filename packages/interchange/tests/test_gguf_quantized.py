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
    assert sorted(blocks) == sorted(linear_sources(model.config))
    originals = dict(model.named_modules())
    for name, layer in blocks.items():
        assert layer.format == dtype
        # Rows split (gpt2's fused qkv) and reordered (llama's rotary pairs) as bytes:
        # each layer holds exactly the blocks of its own float32 weight.
        want = rt.quantize_block_array(originals[name].weight.value.numpy(), dtype)
        assert np.array_equal(layer.weight_data.numpy(), want), name
    ids = tokenizer.encode("the quick brown fox")
    want, got = _logits(model, ids), _logits(runnable.model, ids)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) <= TOLERANCE[dtype]
    plain = import_gguf_model(path)
    assert not _blocks(plain.model)


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
