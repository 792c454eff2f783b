"""ONNX export at opset 18: the checker's full check, ONNX Runtime's logits against ours
over several batch and sequence sizes, the sidecar, and import of our own exports."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from riftco.autograd import no_grad  # noqa: E402
from riftco.interchange import (  # noqa: E402
    export_onnx,
    export_onnx_model,
    import_onnx,
    import_onnx_model,
    load_bundle,
    model_arrays,
    save_bundle,
)
from riftco.interchange.onnx_export import file_sha256, sidecar_path  # noqa: E402

CASES = [
    ("gpt2", {}),
    ("gpt2", {"tie_embeddings": True, "linear_bias": False}),
    ("riftco_v1", {}),
    ("llama", {}),
    ("llama", {"kv_heads": 1, "rope_theta": 500.0}),
    ("llama", {"sliding_window": 5, "tie_embeddings": True, "n_heads": 4, "kv_heads": 2}),
]
IDS = ["gpt2", "gpt2-tied-bias-free", "riftco_v1", "llama", "llama-gqa", "mistral-window"]
SHAPES = [(1, 1), (1, 13), (3, 7), (2, 32)]  # (batch, sequence); the context is 32


def _session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _ours(model, ids):
    with no_grad():
        return np.asarray(model(ids).numpy())


@pytest.mark.parametrize(("preset", "overrides"), CASES, ids=IDS)
def test_onnx_runtime_matches_our_logits(tmp_path, make_model, tokenizer, preset, overrides):
    model = make_model(preset, **overrides)
    path = export_onnx(tmp_path / "m.onnx", model.config, model_arrays(model), tokenizer)
    onnx.checker.check_model(str(path), full_check=True)
    session = _session(path)
    rng = np.random.default_rng(3)
    worst = 0.0
    for batch, length in SHAPES:
        ids = rng.integers(0, model.config.vocab_size, (batch, length), dtype=np.int64)
        (logits,) = session.run(["logits"], {"input_ids": ids})
        assert logits.dtype == np.float32
        assert logits.shape == (batch, length, model.config.vocab_size)
        worst = max(worst, float(np.abs(logits - _ours(model, ids)).max()))
    assert worst <= 1e-4


def test_graph_signature_and_operators(tmp_path, make_model, tokenizer):
    model = make_model("riftco_v1")
    path = export_onnx(tmp_path / "m.onnx", model.config, model_arrays(model), tokenizer)
    proto = onnx.load(str(path))
    assert [(o.domain, o.version) for o in proto.opset_import] == [("", 18)]
    assert proto.producer_name == "riftco"
    (inp,), (out,) = proto.graph.input, proto.graph.output
    assert inp.name == "input_ids" and inp.type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert [d.dim_param for d in inp.type.tensor_type.shape.dim] == ["batch", "sequence"]
    assert out.name == "logits" and out.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    dims = out.type.tensor_type.shape.dim
    assert [dims[0].dim_param, dims[1].dim_param, dims[2].dim_value] == ["batch", "sequence", 320]
    ops = {node.op_type for node in proto.graph.node}
    assert "Gelu" not in ops and "Erf" in ops  # exact GELU, composed
    assert all(node.domain == "" for node in proto.graph.node)
    initializers = {i.name for i in proto.graph.initializer}
    assert set(model_arrays(model)) <= initializers  # riftco's names, riftco's layouts


def test_tanh_gelu_is_composed_from_tanh(tmp_path, make_model, tokenizer):
    model = make_model("gpt2")
    path = export_onnx(tmp_path / "m.onnx", model.config, model_arrays(model), tokenizer)
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert "Tanh" in ops and "Erf" not in ops


def test_sidecar(tmp_path, make_model, tokenizer):
    save_bundle(tmp_path / "a.rift", make_model("llama"), tokenizer, stage="post_training")
    runnable = load_bundle(tmp_path / "a.rift")
    path = export_onnx_model(runnable, tmp_path / "m.onnx")
    sidecar = json.loads(sidecar_path(path).read_text())
    assert sidecar_path(path).name == "m.onnx.json"
    assert sidecar["format"] == "riftco-interchange/onnx" and sidecar["format_version"] == 1
    assert sidecar["onnx"] == {
        "file": "m.onnx",
        "sha256": file_sha256(path),
        "opset": 18,
        "ir_version": 8,
        "external_data": None,
    }
    assert sidecar["config"] == runnable.config.to_dict()
    assert sidecar["tokenizer"] == tokenizer.to_state()
    assert sidecar["lineage"] == {
        "artifact_id": runnable.artifact_id,
        "parent_id": None,
        "stage": "post_training",
    }
    assert sidecar["inputs"]["input_ids"] == {"dtype": "int64", "shape": ["batch", "sequence"]}
    assert sidecar["outputs"]["logits"]["shape"] == ["batch", "sequence", 320]


@pytest.mark.parametrize(("preset", "overrides"), CASES[:4], ids=IDS[:4])
def test_our_exports_import_back(tmp_path, make_model, tokenizer, preset, overrides):
    model = make_model(preset, **overrides)
    arrays = model_arrays(model)
    path = export_onnx(tmp_path / "m.onnx", model.config, arrays, tokenizer)
    back = import_onnx(path)
    assert back.model_config == model.config and back.tokenizer == tokenizer
    assert set(back.arrays) == set(arrays)
    for name, array in arrays.items():
        np.testing.assert_array_equal(back.arrays[name], array, err_msg=name)


def test_runnable_round_trip_and_lineage(tmp_path, make_model, tokenizer):
    save_bundle(tmp_path / "a.rift", make_model("gpt2"), tokenizer)
    runnable = load_bundle(tmp_path / "a.rift")
    export_onnx_model(runnable, tmp_path / "m.onnx")
    back = import_onnx_model(tmp_path / "m.onnx")
    assert back.origin["parent_id"] == runnable.artifact_id
    assert back.origin["metadata"]["source"] == "onnx"
    assert back.generate("hello", max_new_tokens=5) == runnable.generate("hello", max_new_tokens=5)


def test_external_data(tmp_path, make_model, tokenizer):
    model = make_model("llama", kv_heads=1)
    path = export_onnx(
        tmp_path / "m.onnx", model.config, model_arrays(model), tokenizer, external_data=True
    )
    data = tmp_path / "m.onnx.data"
    assert data.stat().st_size > path.stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data", "m.onnx.json"]
    onnx.checker.check_model(str(path), full_check=True)
    ids = np.arange(10, dtype=np.int64)[None] % model.config.vocab_size
    (logits,) = _session(path).run(None, {"input_ids": ids})
    np.testing.assert_allclose(logits, _ours(model, ids), atol=1e-4, rtol=0)
    sidecar = json.loads(sidecar_path(path).read_text())
    assert sidecar["onnx"]["external_data"] == {"file": data.name, "sha256": file_sha256(data)}
    back = import_onnx(path)
    for name, array in model_arrays(model).items():
        np.testing.assert_array_equal(back.arrays[name], array, err_msg=name)


def test_convert_command(tmp_path, make_model, tokenizer, capsys):
    from riftco.interchange.cli import convert_main

    manifest = save_bundle(tmp_path / "a.rift", make_model("riftco_v1"), tokenizer)
    assert convert_main([str(tmp_path / "a.rift"), str(tmp_path / "a.onnx"), "--to", "onnx"]) == 0
    sidecar = json.loads((tmp_path / "a.onnx.json").read_text())
    assert sidecar["lineage"]["artifact_id"] == manifest["artifact_id"]
    assert convert_main([str(tmp_path / "a.onnx"), str(tmp_path / "b.rift"), "--to", "rift"]) == 0
    original, back = load_bundle(tmp_path / "a.rift"), load_bundle(tmp_path / "b.rift")
    assert back.manifest["parent_id"] == manifest["artifact_id"]
    assert back.manifest["weights"]["sha256"] == original.manifest["weights"]["sha256"]
    capsys.readouterr()
    args = [str(tmp_path / "a.rift"), str(tmp_path / "c.onnx"), "--to", "onnx", "--dtype", "f16"]
    assert convert_main(args) == 1
    assert "GGUF only" in capsys.readouterr().err


def test_the_input_guard_catches_what_the_graph_would_misread(tmp_path, make_model, tokenizer):
    from riftco.interchange.onnx_inputs import OnnxInputError, check_onnx_input

    model = make_model("gpt2")
    path = export_onnx(tmp_path / "m.onnx", model.config, model_arrays(model), tokenizer)
    sidecar = json.loads((tmp_path / "m.onnx.json").read_text())
    config, vocab = sidecar["config"], model.config.vocab_size
    session = _session(path)
    # Why the guard exists: -1 silently reads the last row of the embedding.
    (wrapped,) = session.run(["logits"], {"input_ids": np.array([[-1]], dtype=np.int64)})
    (last,) = session.run(["logits"], {"input_ids": np.array([[vocab - 1]], dtype=np.int64)})
    np.testing.assert_array_equal(wrapped, last)
    ok = check_onnx_input([[1, 2, 3]], config)
    assert ok.dtype == np.int64 and ok.shape == (1, 3)
    for bad, match in [
        ([[-1]], "token id -1 is outside"),
        ([[vocab]], f"token id {vocab} is outside"),
        ([[1] * 33], "33 tokens do not fit the context of 32"),
        ([1, 2], r"expected shape \[batch, sequence\]"),
        ([[0.5]], "integer token ids"),
    ]:
        with pytest.raises(OnnxInputError, match=match):
            check_onnx_input(bad, config)
    assert check_onnx_input([[0, vocab - 1]], model.config).tolist() == [[0, vocab - 1]]
