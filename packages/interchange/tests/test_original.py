"""Files the original riftco-transformer 0.6.1 wrote load here with its logits.

The fixtures under ``original/fixtures`` were made by ``original/make_fixtures.py``
with the original package, which also recorded its logits and token ids. The
``seed-parity`` tox env regenerates them with random configurations and points
``RIFTCO_ORIGINAL_FIXTURES`` at the new folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from riftco.interchange import (
    ContainerError,
    IntegrityError,
    InterchangeError,
    ManifestError,
    WeightsError,
    canonical_json,
    convert,
    load_bundle,
    load_original,
    original_kind,
    read_bundle,
)
from riftco.interchange.cli_inspect import describe
from riftco.interchange.cli_inspect import main as inspect_main
from riftco.interchange.original import read_original_bundle

FIXTURES = Path(
    os.environ.get("RIFTCO_ORIGINAL_FIXTURES") or Path(__file__).parent / "original" / "fixtures"
)
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
BUNDLES = sorted(k for k, v in EXPECTED.items() if v["file"].endswith(".rift"))
EXPORTS = sorted(k for k, v in EXPECTED.items() if "same_as" in v)


def _needs(kind: str) -> None:
    if kind == "gguf":
        pytest.importorskip("gguf")
    if kind == "onnx":
        pytest.importorskip("onnx")


def _check_logits(runnable, entry) -> None:
    got = runnable.logits(np.array(entry["inputs"]))
    want = np.array(entry["logits"], dtype=np.float64).reshape(got.shape)
    assert np.abs(got - want).max() <= 1e-5


@pytest.mark.parametrize("name", BUNDLES)
def test_bundle_loads_with_the_original_logits_ids_and_lineage(name: str) -> None:
    entry = EXPECTED[name]
    runnable = load_bundle(FIXTURES / entry["file"])
    assert runnable.config.gelu == "exact" and runnable.config.head_bias
    _check_logits(runnable, entry)
    assert [runnable.tokenizer.encode(t) for t in entry["texts"]] == entry["ids"]
    assert runnable.artifact_id == entry["artifact_id"]
    assert runnable.manifest["parent_id"] == entry["parent_artifact_id"]
    assert runnable.manifest["stage"] == entry["stage"]


def test_children_name_their_base_as_parent() -> None:
    children = [k for k in BUNDLES if "child" in k]
    assert children
    for name in children:
        base = EXPECTED[name.split("-")[0] + "-base"]
        assert EXPECTED[name]["parent_artifact_id"] == base["artifact_id"]


@pytest.mark.parametrize("name", EXPORTS)
def test_exports_load_with_the_logits_and_identity_of_their_bundle(name: str) -> None:
    entry = EXPECTED[name]
    kind = original_kind(FIXTURES / entry["file"])
    _needs(kind)
    source = EXPECTED[entry["same_as"]]
    runnable = load_bundle(FIXTURES / entry["file"])  # load_original, through load_bundle
    _check_logits(runnable, source)
    assert [runnable.tokenizer.encode(t) for t in source["texts"]] == source["ids"]
    assert runnable.artifact_id == source["artifact_id"]
    assert runnable.manifest["parent_id"] == source["parent_artifact_id"]


def test_detection_is_by_content_not_by_name(tmp_path: Path) -> None:
    kinds = {name: original_kind(FIXTURES / EXPECTED[name]["file"]) for name in EXPORTS}
    assert sorted(kinds.values()) == ["gguf", "huggingface", "onnx"]
    renamed = tmp_path / "weights.bin"
    shutil.copy(FIXTURES / "byte-base.rift", renamed)
    assert original_kind(renamed) == "rift-v1"
    assert load_bundle(renamed).artifact_id == EXPECTED["byte-base"]["artifact_id"]


@pytest.mark.parametrize("name", ["byte-full-child", "bpe-lora-child"])
def test_convert_to_a_bundle_keeps_logits_and_lineage(name: str, tmp_path: Path) -> None:
    entry = EXPECTED[name]
    out = convert(FIXTURES / entry["file"], tmp_path / "new.rift", to="rift")
    bundle = read_bundle(out)
    assert bundle.parent_id == entry["artifact_id"]
    assert bundle.stage == entry["stage"]
    recorded = bundle.metadata["riftco_transformer"]
    assert recorded["artifact_id"] == entry["artifact_id"]
    assert recorded["parent_artifact_id"] == entry["parent_artifact_id"]
    runnable = load_bundle(out)
    _check_logits(runnable, entry)
    assert [runnable.tokenizer.encode(t) for t in entry["texts"]] == entry["ids"]
    again = load_bundle(FIXTURES / entry["file"]).save(tmp_path / "saved.rift")
    assert again["artifact_id"] == bundle.artifact_id  # RunnableModel.save records the same


def test_convert_exports_to_bundles_and_onward(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    entry = EXPECTED["byte-full-child"]
    out = convert(FIXTURES / "byte-child.onnx", tmp_path / "from-onnx.rift", to="rift")
    assert read_bundle(out).parent_id == entry["artifact_id"]
    onnx_out = convert(FIXTURES / entry["file"], tmp_path / "ours.onnx", to="onnx")
    assert onnx_out.exists()


def test_inspect_shows_identity_and_parent(capsys: pytest.CaptureFixture[str]) -> None:
    entry = EXPECTED["byte-full-child"]
    assert inspect_main([str(FIXTURES / entry["file"]), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["artifact_id"] == entry["artifact_id"]
    assert report["parent_id"] == entry["parent_artifact_id"]
    assert report["stage"] == "post_training" and report["integrity"] == "ok"
    assert describe(FIXTURES / "byte-child-hf")["artifact_id"] == entry["artifact_id"]


# -- hostile and damaged files -----------------------------------------------------------


def _members(path: Path) -> tuple[dict, bytes]:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("manifest.json")), archive.read("weights.f32le")


def _write(path: Path, manifest: dict | bytes, weights: bytes, **options) -> Path:
    raw = manifest if isinstance(manifest, bytes) else canonical_json(manifest)
    with zipfile.ZipFile(
        path, "w", compression=options.get("compression", zipfile.ZIP_STORED)
    ) as archive:
        archive.writestr("manifest.json", raw)
        archive.writestr("weights.f32le", weights)
        for name, data in options.get("extra", {}).items():
            archive.writestr(name, data)
    return path


def _reseal(manifest: dict, weights: bytes) -> dict:
    """The manifest with a correct weights digest and identity for ``weights``."""
    manifest = dict(
        manifest, weights=dict(manifest["weights"], sha256=hashlib.sha256(weights).hexdigest())
    )
    body = {k: v for k, v in manifest.items() if k != "artifact_id"}
    return dict(manifest, artifact_id=hashlib.sha256(canonical_json(body)).hexdigest())


@pytest.fixture
def parts() -> tuple[dict, bytes]:
    return _members(FIXTURES / "byte-base.rift")


def test_truncated_bundle(tmp_path: Path) -> None:
    raw = (FIXTURES / "byte-base.rift").read_bytes()
    for cut in (40, len(raw) // 2, len(raw) - 30):
        path = tmp_path / f"cut{cut}.rift"
        path.write_bytes(raw[:cut])
        with pytest.raises(InterchangeError):
            read_original_bundle(path)


def test_changed_weights_and_manifest(tmp_path: Path, parts) -> None:
    manifest, weights = parts
    flipped = bytearray(weights)
    flipped[5] ^= 0x40
    with pytest.raises(IntegrityError, match="SHA-256"):
        read_original_bundle(_write(tmp_path / "w.rift", manifest, bytes(flipped)))
    with pytest.raises(IntegrityError, match="artifact_id"):
        read_original_bundle(_write(tmp_path / "m.rift", dict(manifest, stage="other"), weights))


def test_malformed_manifests(tmp_path: Path, parts) -> None:
    manifest, weights = parts
    text = canonical_json(manifest)
    cases = {
        "duplicate": text[:-1] + b',"stage":"x"}',
        "nan": text.replace(b'"metadata":{}', b'"metadata":NaN'),
        "version": canonical_json(dict(manifest, format_version=2)),
        "count": canonical_json(dict(manifest, weights=dict(manifest["weights"], count=10**12))),
        "deep": b"[" * 100_000 + b"]" * 100_000,
    }
    for name, raw in cases.items():
        with pytest.raises(ManifestError):
            read_original_bundle(_write(tmp_path / f"{name}.rift", raw, weights))
    shape = dict(manifest["parameters"][0], shape=[2**40, 2**40])
    huge = dict(manifest, parameters=[shape, *manifest["parameters"][1:]])
    with pytest.raises(ManifestError):
        read_original_bundle(_write(tmp_path / "huge.rift", huge, weights))


def test_archive_layout_is_checked(tmp_path: Path, parts) -> None:
    manifest, weights = parts
    with pytest.raises(ContainerError, match="stored"):
        read_original_bundle(
            _write(tmp_path / "z.rift", manifest, weights, compression=zipfile.ZIP_DEFLATED)
        )
    with pytest.raises(ContainerError, match="members"):
        read_original_bundle(_write(tmp_path / "x.rift", manifest, weights, extra={"run.py": b"x"}))
    with pytest.raises(ContainerError, match="bytes"):
        read_original_bundle(
            _write(tmp_path / "short.rift", _reseal(manifest, weights[:-4]), weights[:-4])
        )
    big = tmp_path / "big.rift"
    with zipfile.ZipFile(big, "w") as archive:
        archive.writestr("manifest.json", b" " * (2 << 20))
        archive.writestr("weights.f32le", weights)
    with pytest.raises(ContainerError, match="at most"):
        read_original_bundle(big)


def test_non_finite_weights_and_wrong_tokenizer(tmp_path: Path, parts) -> None:
    manifest, weights = parts
    values = np.frombuffer(weights, "<f4").copy()
    values[3] = np.inf
    bad = values.tobytes()
    with pytest.raises(WeightsError, match="finite"):
        read_original_bundle(_write(tmp_path / "inf.rift", _reseal(manifest, bad), bad))
    vocab = manifest["tokenizer"]["byte_vocabulary"]
    shrunk = _reseal(
        dict(manifest, tokenizer={"method": "byte", "byte_vocabulary": vocab[:-1]}), weights
    )
    with pytest.raises(ManifestError, match="vocabulary"):
        read_original_bundle(_write(tmp_path / "tok.rift", shrunk, weights))


def test_tampered_exports(tmp_path: Path) -> None:
    folder = tmp_path / "hf"
    shutil.copytree(FIXTURES / "byte-child-hf", folder)
    config = json.loads((folder / "config.json").read_text())
    config["riftco_artifact"]["stage"] = "renamed"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(IntegrityError):
        load_original(folder)
    pytest.importorskip("onnx")
    for name in ("byte-child.onnx", "byte-child.onnx.riftco.json"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    onnx_file = tmp_path / "byte-child.onnx"
    raw = bytearray(onnx_file.read_bytes())
    raw[-10] ^= 1
    onnx_file.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match="SHA-256"):
        load_original(onnx_file)


def test_truncated_gguf(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    raw = (FIXTURES / "byte-child.gguf").read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(raw[: len(raw) - 100])
    with pytest.raises(ContainerError):
        load_original(path)


def test_convert_command_takes_the_format_from_the_suffix(tmp_path: Path) -> None:
    from riftco.interchange.cli import convert_main

    entry = EXPECTED["bpe-base"]
    new = tmp_path / "NEW.rift"
    assert convert_main([str(FIXTURES / entry["file"]), str(new)]) == 0
    assert read_bundle(new).parent_id == entry["artifact_id"]
    with pytest.raises(SystemExit):
        convert_main([str(FIXTURES / entry["file"]), str(tmp_path / "NEW.unknown")])


def test_our_own_files_are_not_taken_for_the_originals(tmp_path: Path) -> None:
    ours = convert(FIXTURES / "byte-base.rift", tmp_path / "ours.rift", to="rift")
    assert original_kind(ours) is None
    plain = convert(FIXTURES / "byte-base.rift", tmp_path / "ours.safetensors", to="safetensors")
    assert original_kind(plain) is None
    assert original_kind(tmp_path / "missing.rift") is None


def test_exports_that_do_not_fit_their_schema(tmp_path: Path) -> None:
    from riftco.interchange import write_safetensors
    from riftco.interchange.original_exports import read_original_huggingface

    folder = tmp_path / "hf"
    shutil.copytree(FIXTURES / "byte-child-hf", folder)
    from riftco.interchange import read_safetensors

    weights = read_safetensors(folder / "model.safetensors")
    arrays = weights.arrays(copy=True)
    metadata = dict(weights.metadata)
    write_safetensors(
        folder / "model.safetensors", {**arrays, "extra.weight": arrays["lm_head.bias"]}, metadata
    )
    with pytest.raises(ManifestError, match="unexpected"):
        read_original_huggingface(folder)
    config = json.loads((folder / "config.json").read_text())
    config["hidden_act"] = "gelu_new"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ManifestError, match="hidden_act"):
        read_original_huggingface(folder)


def test_onnx_naming_external_data_is_refused(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    model = onnx.load(str(FIXTURES / "byte-child.onnx"))
    weight = model.graph.initializer[0]
    weight.data_location = onnx.TensorProto.EXTERNAL
    entry = weight.external_data.add()
    entry.key, entry.value = "location", "../../etc/passwd"
    path = tmp_path / "byte-child.onnx"
    path.write_bytes(model.SerializeToString())
    sidecar = json.loads((FIXTURES / "byte-child.onnx.riftco.json").read_text())
    sidecar["onnx_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (tmp_path / "byte-child.onnx.riftco.json").write_text(json.dumps(sidecar))
    with pytest.raises(ManifestError, match="embedded"):
        load_original(path)
