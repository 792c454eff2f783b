"""``--weights`` and ``convert --dtype`` make the same model: riftco's in-process
quantization (``quantize_model``) holds exactly the tensors the converted GGUF file
holds, embedding and head included, under the one ``keep_float`` option; and the
files ``riftco generate`` takes (a GGUF runs; an original training checkpoint is told
apart and refused with what to do)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from riftco.autograd import no_grad  # noqa: E402
from riftco.interchange import (  # noqa: E402
    ConversionError,
    export_gguf,
    import_gguf_model,
    model_arrays,
    save_bundle,
)
from riftco.interchange.cli import convert_main, generate_main  # noqa: E402
from riftco.interchange.cli_inspect import main as inspect_main  # noqa: E402
from riftco.interchange.gguf_layout import linear_sources  # noqa: E402
from riftco.interchange.quantization import BlockHead, matrix_type, quantize_model  # noqa: E402
from riftco.interchange.runnable_files import OriginalCheckpointError, open_runnable  # noqa: E402
from riftco.nn import BlockLinear, LanguageModelHead  # noqa: E402

SIZES = dict(d_model=64, n_heads=4, d_ff=96)
CASES = [
    ("gpt2", {}, ()),
    ("gpt2", {}, ("output",)),
    ("llama", {"kv_heads": 2}, ("token_embd",)),
    ("llama", {"tie_embeddings": True}, ()),
    ("llama", {"tie_embeddings": True}, ("output",)),
]
IDS = ["gpt2", "gpt2-float-head", "llama-float-embedding", "llama-tied", "llama-tied-kept"]
CHECKPOINT = (
    Path(__file__).parents[2] / "train" / "tests" / "original" / "fixtures" / "lora.riftckpt"
)


def _file_tensors(path):
    reader = gguf.GGUFReader(path)
    return {t.name: (t.tensor_type.name, np.array(t.data)) for t in reader.tensors}


def _logits(model, ids):
    with no_grad():
        return np.asarray(model(np.asarray([ids])).numpy())[0]


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0", "f16"])
@pytest.mark.parametrize(("preset", "overrides", "keep"), CASES, ids=IDS)
def test_in_process_weights_equal_the_converted_files(
    tmp_path, make_model, tokenizer, dtype, preset, overrides, keep
):
    source = make_model(preset, **SIZES, **overrides)
    path = export_gguf(
        tmp_path / "m.gguf", source.config, model_arrays(source), tokenizer, dtype, keep_float=keep
    )
    stored = _file_tensors(path)
    model = make_model(preset, **SIZES, **overrides)  # the same weights, quantized in process
    types = quantize_model(model, dtype, keep)
    modules = dict(model.named_modules())
    for name, (tensor, take_rows) in linear_sources(model.config).items():
        kind, data = stored[tensor]
        assert types[name] == kind == dtype.upper(), name
        layer = modules[name]
        assert isinstance(layer, BlockLinear)
        want = np.ascontiguousarray(take_rows(data)).view(np.uint8).reshape(-1)
        assert np.array_equal(layer.weight_data.numpy(), want), name
    tied = model.config.tie_embeddings
    kind, data = stored["token_embd.weight"]
    assert types["token_embedding"] == kind
    values = (
        data if kind == "F32" else gguf.quants.dequantize(data, gguf.GGMLQuantizationType[kind])
    )
    assert np.array_equal(model.token_embedding.weight.value.numpy(), values)
    head = model.language_model_head
    kind, data = stored["token_embd.weight" if tied else "output.weight"]
    assert types["language_model_head"] == kind
    if kind == "F32":
        assert type(head) is LanguageModelHead and head.tied == tied
        if not tied:
            assert np.array_equal(head.weight.value.numpy(), data)
    else:
        assert isinstance(head, BlockHead) and head.format == kind.lower()
        assert np.array_equal(head.weight_data.numpy(), data.view(np.uint8).reshape(-1))
    # The rule: kept matrices float32, the rest in the type.
    expect = {
        "token_embedding": matrix_type(dtype, "tied" if tied else "token_embd", 64, set(keep)),
        "language_model_head": matrix_type(dtype, "tied" if tied else "output", 64, set(keep)),
    }
    assert {k: types[k] for k in expect} == expect
    # So the two run to the same bits.
    ids = tokenizer.encode("the quick brown fox")
    runnable = import_gguf_model(path, weights="stored")
    assert np.array_equal(_logits(model, ids), _logits(runnable.model, ids))


def test_quantize_model_refuses_what_it_cannot_do(make_model):
    model = make_model("gpt2", **SIZES)
    with pytest.raises(ConversionError, match="keep_float: expected names among"):
        quantize_model(model, "q8_0", ["lm_head"])
    with pytest.raises(ConversionError, match="a collection of names"):
        quantize_model(model, "q8_0", "output")
    with pytest.raises(ConversionError, match="weights: expected one of"):
        quantize_model(model, "q5_0")
    quantize_model(model, "q8_0")
    with pytest.raises(ConversionError, match="quantized already"):
        quantize_model(model, "q4_0")


def test_convert_keep_float_writes_those_matrices_float32(tmp_path, make_model, tokenizer):
    bundle = tmp_path / "m.rift"
    save_bundle(bundle, make_model("gpt2", **SIZES), tokenizer)
    out = tmp_path / "m.gguf"
    args = [str(bundle), str(out), "--dtype", "q4_0", "--keep-float", "output"]
    assert convert_main(args) == 0
    kinds = {n: k for n, (k, _) in _file_tensors(out).items()}
    assert kinds["output.weight"] == "F32" and kinds["token_embd.weight"] == "Q4_0"
    assert kinds["blk.0.ffn_up.weight"] == "Q4_0"
    assert convert_main([str(bundle), str(out), "--dtype", "q4_0"]) == 0
    assert {k for n, (k, _) in _file_tensors(out).items() if n.endswith("embd.weight")} == {
        "Q4_0",
        "F32",  # the position embedding stays F32, as llama.cpp's tools keep it
    }
    with pytest.raises(SystemExit):
        convert_main([str(bundle), str(out), "--dtype", "q4_0", "--keep-float", "lm_head"])
    assert convert_main([str(bundle), str(out), "--keep-float", "output"]) == 1


def test_generate_runs_a_gguf_file_on_its_own_blocks(tmp_path, make_model, tokenizer, capsys):
    model = make_model("llama", **SIZES)
    path = export_gguf(tmp_path / "m.gguf", model.config, model_arrays(model), tokenizer, "q4_0")
    args = [str(path), "--prompt", "the quick", "--max-new-tokens", "6"]
    assert generate_main(args) == 0
    want = import_gguf_model(path, weights="stored").generate("the quick", max_new_tokens=6)
    assert capsys.readouterr().out == want + "\n"
    runnable = open_runnable(path)
    assert isinstance(runnable.model.language_model_head, BlockHead)
    floats = open_runnable(path, weights="float32")
    assert not any(isinstance(m, BlockLinear) for m in floats.model.modules())
    with pytest.raises(ConversionError, match="not a GGUF file"):
        bundle = tmp_path / "m.rift"
        save_bundle(bundle, model, tokenizer)
        open_runnable(bundle, weights="stored")
    with pytest.raises(ConversionError, match="keep_float applies to in-process"):
        open_runnable(path, keep_float=["output"])


@pytest.mark.skipif(not CHECKPOINT.is_file(), reason="riftco-train's fixtures are not here")
def test_an_original_training_checkpoint_is_told_apart(tmp_path, capsys):
    assert inspect_main([str(CHECKPOINT)]) == 1
    out = capsys.readouterr().out
    assert "kind: riftco-transformer 0.6.1 training checkpoint (.riftckpt)" in out
    assert "global_step: 2" in out and "integrity: not verified (a training checkpoint" in out
    assert "import: refused:" in out and "continue_original" in out
    assert "expected the members" not in out
    assert generate_main([str(CHECKPOINT), "--prompt", "x"]) == 1
    err = capsys.readouterr().err
    assert "training checkpoint of the original riftco-transformer 0.6.1" in err
    assert convert_main([str(CHECKPOINT), str(tmp_path / "x.rift")]) == 1
    assert "not a model file" in capsys.readouterr().err
    with pytest.raises(OriginalCheckpointError):
        open_runnable(CHECKPOINT)


def test_generate_reads_a_broken_gguf_as_gguf(tmp_path, capsys):
    """A damaged GGUF gets the GGUF reader's typed error, not a bundle's header-size one."""
    junk = tmp_path / "x.gguf"
    junk.write_bytes(b"GGUF" + b"\0" * 40)
    assert generate_main([str(junk), "--prompt", "x"]) == 1
    err = capsys.readouterr().err
    assert "expected GGUF version 2 or 3" in err and "header: expected at most" not in err
