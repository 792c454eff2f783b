"""The .rift file as data: manifest, identity, checksums, and every way a file is refused."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import safetensors.numpy

from riftco.interchange import (
    FORMAT,
    MANIFEST_KEY,
    ContainerError,
    IntegrityError,
    ManifestError,
    WeightsError,
    canonical_json,
    content_id,
    read_bundle,
    read_manifest,
    write_bundle,
)
from riftco.text import tokenizer_from_state

CONFIG = {"preset": "test", "vocab_size": 8, "d_model": 4}


@pytest.fixture
def bundle_path(tmp_path, arrays, tokenizer):
    path = tmp_path / "model.rift"
    write_bundle(path, CONFIG, arrays, tokenizer.to_state(), metadata={"note": "é"})
    return path


def test_round_trip(bundle_path, arrays, tokenizer):
    bundle = read_bundle(bundle_path)
    assert bundle.config == CONFIG
    assert bundle.stage == "pretraining" and bundle.parent_id is None
    assert bundle.metadata == {"note": "é"}
    assert bundle.parameter_count == sum(a.size for a in arrays.values())
    assert tokenizer_from_state(bundle.tokenizer_state).to_state() == tokenizer.to_state()
    for name, array in arrays.items():
        np.testing.assert_array_equal(bundle.tensors[name], array)
        assert not bundle.tensors[name].flags.writeable
    copied = read_bundle(bundle_path, copy=True)
    assert all(a.flags.writeable for a in copied.tensors.values())


def test_the_standard_library_reads_the_weights(bundle_path, arrays):
    loaded = safetensors.numpy.load_file(bundle_path)
    assert set(loaded) == set(arrays)
    for name, array in arrays.items():
        np.testing.assert_array_equal(loaded[name], array)


def test_identity_is_the_hash_of_the_canonical_manifest(bundle_path):
    manifest = read_manifest(bundle_path)
    without = {k: v for k, v in manifest.items() if k != "artifact_id"}
    import hashlib

    expected = hashlib.sha256(
        json.dumps(without, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()
    assert manifest["artifact_id"] == expected == content_id(manifest)
    assert manifest["format"] == FORMAT and manifest["format_version"] == 1


def test_identity_is_deterministic_and_covers_content(tmp_path, arrays, tokenizer):
    state = tokenizer.to_state()
    first = write_bundle(tmp_path / "a.rift", CONFIG, arrays, state)
    again = write_bundle(tmp_path / "b.rift", CONFIG, dict(reversed(arrays.items())), state)
    assert first["artifact_id"] == again["artifact_id"]
    assert (tmp_path / "a.rift").read_bytes() == (tmp_path / "b.rift").read_bytes()
    changed = dict(arrays, **{"final_norm.bias": np.full(4, 0.5, np.float32)})
    other = write_bundle(tmp_path / "c.rift", CONFIG, changed, state)
    assert other["artifact_id"] != first["artifact_id"]
    child = write_bundle(
        tmp_path / "d.rift", CONFIG, arrays, state, "post_training", first["artifact_id"]
    )
    assert child["parent_id"] == first["artifact_id"] != child["artifact_id"]


def test_write_refuses_bad_fields(tmp_path, arrays, tokenizer):
    state = tokenizer.to_state()
    with pytest.raises(ManifestError, match="stage"):
        write_bundle(tmp_path / "x.rift", CONFIG, arrays, state, stage="Bad Stage")
    with pytest.raises(ManifestError, match="parent_id"):
        write_bundle(tmp_path / "x.rift", CONFIG, arrays, state, parent_id="abc")
    with pytest.raises(ManifestError, match="metadata: expected at most"):
        write_bundle(tmp_path / "x.rift", CONFIG, arrays, state, metadata={"x": "y" * (1 << 20)})
    with pytest.raises(WeightsError, match="float32"):
        write_bundle(tmp_path / "x.rift", CONFIG, {"w": np.zeros(2)}, state)
    with pytest.raises(WeightsError, match="finite"):
        write_bundle(tmp_path / "x.rift", CONFIG, {"w": np.array([1, np.nan], np.float32)}, state)
    assert not os.listdir(tmp_path)


# -- hostile and damaged files -------------------------------------------------------------


def rewrite(path, split_file, join_file, change_manifest=None, change_header=None, data=None):
    header, buffer = split_file(path)
    if change_manifest is not None:
        manifest = json.loads(header["__metadata__"][MANIFEST_KEY])
        change_manifest(manifest)
        header["__metadata__"][MANIFEST_KEY] = canonical_json(manifest).decode()
    if change_header is not None:
        change_header(header)
    join_file(path, header, buffer if data is None else data(buffer))


def test_rejects_a_truncated_bundle(bundle_path):
    bundle_path.write_bytes(bundle_path.read_bytes()[:-10])
    with pytest.raises(ContainerError, match="truncated"):
        read_bundle(bundle_path)


def test_rejects_an_oversized_header(bundle_path):
    raw = bundle_path.read_bytes()
    bundle_path.write_bytes((17 << 20).to_bytes(8, "little") + raw[8:])
    with pytest.raises(ContainerError, match="header: expected at most 16777216 bytes"):
        read_bundle(bundle_path)


def test_rejects_flipped_weight_bytes(bundle_path, split_file, join_file):
    def flip(buffer):
        return buffer[:5] + bytes([buffer[5] ^ 1]) + buffer[6:]

    rewrite(bundle_path, split_file, join_file, data=flip)
    with pytest.raises(IntegrityError, match="SHA-256 is .* the manifest records"):
        read_bundle(bundle_path)
    read_manifest(bundle_path)  # the manifest itself is intact


def test_rejects_an_edited_manifest(bundle_path, split_file, join_file):
    rewrite(bundle_path, split_file, join_file, lambda m: m.update(stage="post_training"))
    with pytest.raises(IntegrityError, match="artifact_id: the manifest hashes to"):
        read_bundle(bundle_path)


def test_rejects_nan_weights_even_with_matching_checksums(bundle_path, split_file, join_file):
    header, buffer = split_file(bundle_path)
    begin = header["final_norm.bias"]["data_offsets"][0]
    buffer = buffer[:begin] + np.float32(np.nan).tobytes() + buffer[begin + 4 :]
    manifest = json.loads(header["__metadata__"][MANIFEST_KEY])
    arrays = {
        n: np.frombuffer(buffer[e["data_offsets"][0] : e["data_offsets"][1]], "<f4").reshape(
            e["shape"]
        )
        for n, e in header.items()
        if n != "__metadata__"
    }
    from riftco.interchange import tensors_digest

    manifest["weights"]["sha256"] = tensors_digest(arrays)
    manifest["artifact_id"] = content_id(manifest)
    header["__metadata__"][MANIFEST_KEY] = canonical_json(manifest).decode()
    join_file(bundle_path, header, buffer)
    with pytest.raises(
        WeightsError, match=r"final_norm.bias: expected finite values; found nan at index \(0,\)"
    ):
        read_bundle(bundle_path)


def test_rejects_mistyped_weights(bundle_path, split_file, join_file):
    def as_int32(header):
        header["final_norm.bias"]["dtype"] = "I32"

    rewrite(bundle_path, split_file, join_file, change_header=as_int32)
    with pytest.raises(WeightsError, match="final_norm.bias: expected F32 weights; found I32"):
        read_bundle(bundle_path)


def test_rejects_a_missing_tensor(bundle_path, split_file, join_file):
    header, buffer = split_file(bundle_path)
    begin, end = header.pop("final_norm.bias")["data_offsets"]
    for entry in header.values():
        if "data_offsets" in entry and entry["data_offsets"][0] >= end:
            entry["data_offsets"] = [o - (end - begin) for o in entry["data_offsets"]]
    join_file(bundle_path, header, buffer[:begin] + buffer[end:])
    with pytest.raises(IntegrityError, match="lists 3 tensors .* holds 2"):
        read_bundle(bundle_path)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda m: m.update(format="something-else"), ManifestError, "format: expected"),
        (lambda m: m.update(format_version=2), ManifestError, "newer riftco-interchange"),
        (lambda m: m.update(format_version="1"), ManifestError, "format_version"),
        (lambda m: m.pop("stage"), ManifestError, r"missing keys \['stage'\]"),
        (lambda m: m.update(surprise=1), ManifestError, r"unexpected keys \['surprise'\]"),
        (lambda m: m.update(config=[1]), ManifestError, "config: expected an object"),
        (lambda m: m["weights"].update(tensors=-1), ManifestError, "weights.tensors"),
        (lambda m: m.update(artifact_id="x"), ManifestError, "artifact_id: expected 64"),
    ],
)
def test_rejects_bad_manifests(bundle_path, split_file, join_file, change, error, match):
    def fix_identity(manifest):
        change(manifest)
        if "artifact_id" in manifest and manifest["artifact_id"] != "x":
            manifest["artifact_id"] = content_id(manifest)

    rewrite(bundle_path, split_file, join_file, fix_identity)
    with pytest.raises(error, match=match) as info:
        read_bundle(bundle_path)
    assert str(bundle_path) in str(info.value)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not json", "expected JSON"),
        ('{"format": NaN}', "standard JSON"),
        ('{"a": 1, "a": 1}', "duplicate key"),
        ("[]", "expected an object"),
    ],
)
def test_rejects_unparsable_manifests(bundle_path, split_file, join_file, text, match):
    def replace(header):
        header["__metadata__"][MANIFEST_KEY] = text

    rewrite(bundle_path, split_file, join_file, change_header=replace)
    with pytest.raises(ManifestError, match=match):
        read_bundle(bundle_path)


def test_rejects_a_plain_safetensors_file(tmp_path, arrays):
    path = tmp_path / "plain.safetensors"
    safetensors.numpy.save_file(arrays, path)
    with pytest.raises(ManifestError, match="not a .rift bundle"):
        read_bundle(path)


def test_a_failed_save_keeps_the_previous_bundle(bundle_path, arrays, tokenizer):
    before = bundle_path.read_bytes()
    with pytest.raises(WeightsError):
        write_bundle(
            bundle_path, CONFIG, {"w": np.full(2, np.inf, np.float32)}, tokenizer.to_state()
        )
    assert bundle_path.read_bytes() == before
    assert os.listdir(bundle_path.parent) == [bundle_path.name]
