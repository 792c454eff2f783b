"""ONNX exports that are changed, truncated, corrupted or incomplete: each is refused with
an InterchangeError that says what and where, never a crash."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from riftco.interchange import (  # noqa: E402
    ConversionError,
    IntegrityError,
    InterchangeError,
    ManifestError,
    export_onnx,
    import_onnx,
    model_arrays,
)
from riftco.interchange.onnx_export import file_sha256, sidecar_path  # noqa: E402


@pytest.fixture
def exported(tmp_path, make_model, tokenizer):
    model = make_model("llama", kv_heads=1)
    return export_onnx(tmp_path / "m.onnx", model.config, model_arrays(model), tokenizer)


def _reseal(path):
    """Record the file's current SHA-256 in the sidecar, as a forger would."""
    side = sidecar_path(path)
    sidecar = json.loads(side.read_text())
    sidecar["onnx"]["sha256"] = file_sha256(path)
    side.write_text(json.dumps(sidecar))


def test_a_changed_byte_fails_the_sidecar_digest(exported):
    raw = bytearray(exported.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    exported.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match="SHA-256"):
        import_onnx(exported)


def test_without_a_sidecar_the_file_is_not_ours(exported):
    sidecar_path(exported).unlink()
    with pytest.raises(ConversionError, match=r"sidecar m\.onnx\.json"):
        import_onnx(exported)


def test_sidecar_checks(exported, monkeypatch):
    side = sidecar_path(exported)
    original = side.read_text()
    side.write_text("{not json")
    with pytest.raises(ConversionError, match="JSON"):
        import_onnx(exported)
    sidecar = json.loads(original)
    side.write_text(json.dumps(dict(sidecar, format_version=2)))
    with pytest.raises(ManifestError, match="version 2"):
        import_onnx(exported)
    side.write_text(json.dumps(dict(sidecar, config={"d_model": "wide"})))
    with pytest.raises(ManifestError, match="config"):
        import_onnx(exported)
    side.write_text(original)
    import riftco.interchange.onnx_import as onnx_import

    monkeypatch.setattr(onnx_import, "MAX_SIDECAR_BYTES", 100)
    with pytest.raises(ConversionError, match="at most 100 bytes"):
        import_onnx(exported)


def test_a_sidecar_changed_alone_is_refused(exported):
    side = sidecar_path(exported)
    original = json.loads(side.read_text())
    changed = json.loads(side.read_text())
    changed["config"]["d_ff"] = 64
    side.write_text(json.dumps(changed))
    with pytest.raises(IntegrityError, match="config"):
        import_onnx(exported)
    changed = json.loads(json.dumps(original))
    changed["tokenizer"]["eos_token"] = None
    side.write_text(json.dumps(changed))
    with pytest.raises(IntegrityError, match="tokenizer"):
        import_onnx(exported)


def test_initializers_that_disagree_with_the_config(exported):
    proto = onnx.load(str(exported))
    weight = next(
        i for i in proto.graph.initializer if i.name == "blocks.0.feed_forward.gate.weight"
    )
    weight.name = "renamed"
    exported.write_bytes(proto.SerializeToString())
    _reseal(exported)
    with pytest.raises(InterchangeError, match=r"missing the initializer blocks\.0\.feed_forward"):
        import_onnx(exported)


def test_truncated_files_are_refused(exported):
    raw = exported.read_bytes()
    for length in [0, 1, 10, 100, *range(1000, len(raw), max(1, len(raw) // 40)), len(raw) - 1]:
        exported.write_bytes(raw[:length])
        _reseal(exported)
        with pytest.raises(InterchangeError):
            import_onnx(exported)


def test_random_corruption_never_escapes_as_another_error(exported):
    raw = exported.read_bytes()
    rng = np.random.default_rng(11)
    refused = 0
    for _ in range(60):
        damaged = bytearray(raw)
        for position in rng.integers(0, len(raw), size=3):
            damaged[position] = int(rng.integers(0, 256))
        exported.write_bytes(bytes(damaged))
        _reseal(exported)
        try:
            import_onnx(exported)
        except InterchangeError:
            refused += 1
    assert refused > 0


def test_foreign_producers_and_external_locations_are_refused(exported, tmp_path):
    proto = onnx.load(str(exported))
    proto.producer_name = "someone-else"
    exported.write_bytes(proto.SerializeToString())
    _reseal(exported)
    with pytest.raises(ConversionError, match="producer 'someone-else'"):
        import_onnx(exported)
    proto.producer_name = "riftco"
    weight = next(i for i in proto.graph.initializer if i.name == "final_norm.weight")
    weight.data_location = onnx.TensorProto.EXTERNAL
    entry = weight.external_data.add()
    entry.key, entry.value = "location", "../elsewhere.bin"
    exported.write_bytes(proto.SerializeToString())
    _reseal(exported)
    with pytest.raises(ConversionError, match="elsewhere"):
        import_onnx(exported)


def test_missing_external_data(tmp_path, make_model, tokenizer):
    model = make_model("gpt2")
    path = export_onnx(
        tmp_path / "m.onnx", model.config, model_arrays(model), tokenizer, external_data=True
    )
    (tmp_path / "m.onnx.data").unlink()
    with pytest.raises(ConversionError, match="missing"):
        import_onnx(path)
