"""``riftco.digest``: a GGUF key riftco wrote that is renamed, removed or changed is
reported, never ignored; files without riftco keys (llama.cpp's) and files from riftco
releases before the digest keep importing, the latter said to be ``not verified``."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from riftco.interchange import (  # noqa: E402
    ConversionError,
    IntegrityError,
    InterchangeError,
    export_gguf,
    import_gguf,
    model_arrays,
)
from riftco.interchange.cli_inspect import describe  # noqa: E402
from riftco.interchange.cli_inspect import main as inspect_main  # noqa: E402
from riftco.interchange.gguf_import import OLDER_KEYS  # noqa: E402

T = gguf.GGUFValueType
KEYS = sorted(OLDER_KEYS | {"riftco.digest"})


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tokenizer):
    from riftco.nn import DecoderOnlyTransformer, TransformerConfig

    sizes = dict(vocab_size=320, context_length=32, d_model=16, n_layers=1, n_heads=2, d_ff=48)
    model = DecoderOnlyTransformer(TransformerConfig.preset("gpt2", **sizes), seed=0)
    path = tmp_path_factory.mktemp("digest") / "m.gguf"
    export_gguf(path, model.config, model_arrays(model), tokenizer, lineage=None)
    return path


def _fields(path):
    """Every key of a GGUF file as ``{name: (value, type, item type)}`` and its tensors."""
    reader = gguf.GGUFReader(path)
    keys = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = field.types[1] if len(field.types) > 1 else None
        keys[name] = (field.contents(), field.types[0], sub)
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    return keys, tensors


def _rewrite(path, keys, tensors, arch="gpt2"):
    writer = gguf.GGUFWriter(path, arch)
    for key, (value, kind, sub) in keys.items():
        writer.add_key_value(key, value, kind, sub_type=sub)
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _record(raw: bytes, key: str) -> int:
    """Where the key/value record of ``key`` starts (its u64 name length)."""
    needle = struct.pack("<Q", len(key)) + key.encode()
    assert raw.count(needle) == 1
    return raw.index(needle)


def _record_span(path, key: str) -> tuple[int, int]:
    """The byte range of ``key``'s record: name length, name, type, value."""
    raw = path.read_bytes()
    start = _record(raw, key)
    pos = start + 8 + len(key)
    (kind,) = struct.unpack_from("<I", raw, pos)
    pos += 4
    if kind == T.STRING:
        (length,) = struct.unpack_from("<Q", raw, pos)
        pos += 8 + length
    else:
        assert kind == T.UINT32
        pos += 4
    return start, pos


def _renamed(path, out, key: str, index: int, replacement: bytes):
    raw = bytearray(path.read_bytes())
    at = _record(bytes(raw), key) + 8 + index
    raw[at : at + 1] = replacement
    out.write_bytes(bytes(raw))
    return out


def test_an_export_is_verified_whole(exported, capsys):
    keys, _ = _fields(exported)
    assert sorted(k for k in keys if k.startswith("riftco.")) == KEYS
    digests = json.loads(keys["riftco.digest"][0])["sha256"]
    assert sorted(digests) == sorted(OLDER_KEYS)
    record = json.loads(keys["riftco.tensors"][0])
    assert record["metadata_digest"] == "riftco.digest" and len(record["layout_sha256"]) == 64
    imported = import_gguf(exported)
    assert imported.verified == {"tensors": "ok", "metadata": "ok"}
    assert inspect_main([str(exported)]) == 0
    out = capsys.readouterr().out
    assert "integrity: ok" in out and "import: ok" in out
    assert "riftco.* key's type and value against riftco.digest" in out


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("where", ["last", "namespace"])
def test_a_key_renamed_by_one_byte_is_reported(tmp_path, exported, key, where, capsys):
    # "last": riftco.tensors -> riftco.tensort (still riftco.*); "namespace": riftcp.tensors
    index, replacement = (len(key) - 1, b"_") if where == "last" else (5, b"p")
    path = _renamed(exported, tmp_path / "renamed.gguf", key, index, replacement)
    with pytest.raises(IntegrityError) as info:
        import_gguf(path)
    message = str(info.value)
    assert key in message and ("missing" in message or "records that the file has one" in message)
    assert inspect_main([str(path)]) == 1
    assert "integrity: FAILED" in capsys.readouterr().out


def test_every_byte_of_every_riftco_record_is_covered(tmp_path, exported):
    """Each one-byte change in the name, type or value of a riftco.* key is refused."""
    raw = exported.read_bytes()
    path = tmp_path / "flipped.gguf"
    checked = 0
    for key in KEYS:
        start, end = _record_span(exported, key)
        # Every byte of the name length, name, type and value length; a stride through
        # the long JSON values (their every byte is covered by the same digest).
        head = range(start, min(end, start + 8 + len(key) + 12))
        positions = sorted({*head, *range(start, end, max(1, (end - start) // 40)), end - 1})
        for position in positions:
            damaged = bytearray(raw)
            damaged[position] ^= 0x01
            path.write_bytes(bytes(damaged))
            with pytest.raises(InterchangeError):
                import_gguf(path)
            checked += 1
    assert checked > 300


def test_a_value_changed_consistently_is_named(tmp_path, exported, capsys):
    keys, tensors = _fields(exported)
    other = {"artifact_id": "ab" * 32, "stage": "pretraining", "parent_id": None}
    keys["riftco.lineage"] = (json.dumps(other), T.STRING, None)
    path = _rewrite(tmp_path / "lineage.gguf", keys, tensors)
    with pytest.raises(IntegrityError, match="'riftco.lineage': the type or value differs"):
        import_gguf(path)
    assert inspect_main([str(path)]) == 1
    # The same value under another GGUF type is a change too.
    keys, tensors = _fields(exported)
    keys["riftco.format_version"] = (1, T.INT32, None)
    path = _rewrite(tmp_path / "typed.gguf", keys, tensors)
    with pytest.raises(IntegrityError, match="riftco.format_version"):
        import_gguf(path)


def test_keys_not_covered_and_a_damaged_digest_are_refused(tmp_path, exported):
    keys, tensors = _fields(exported)
    keys["riftco.extra"] = ("x", T.STRING, None)
    path = _rewrite(tmp_path / "extra.gguf", keys, tensors)
    with pytest.raises(IntegrityError, match="'riftco.extra' not expected"):
        import_gguf(path)
    for bad in ("[]", '{"sha256": {"riftco.config": "00"}}', '{"sha256": {}, "x": 1}', "{"):
        keys, tensors = _fields(exported)
        keys["riftco.digest"] = (bad, T.STRING, None)
        with pytest.raises(IntegrityError, match="riftco.digest: expected"):
            import_gguf(_rewrite(tmp_path / "digest.gguf", keys, tensors))
    keys, tensors = _fields(exported)
    keys["riftco.digest"] = (7, T.UINT32, None)
    with pytest.raises(IntegrityError, match="riftco.digest: expected the JSON string"):
        import_gguf(_rewrite(tmp_path / "digest.gguf", keys, tensors))


def _as_older_release(exported, tmp_path, name="older.gguf"):
    """The file an earlier riftco wrote: the six keys, a two-field riftco.tensors record."""
    keys, tensors = _fields(exported)
    del keys["riftco.digest"]
    record = json.loads(keys["riftco.tensors"][0])
    older = {"sha256": record["sha256"], "file_type": record["file_type"]}
    keys["riftco.tensors"] = (json.dumps(older), T.STRING, None)
    return _rewrite(tmp_path / name, keys, tensors), keys, tensors


def test_a_file_from_an_older_release_imports_as_not_verified(tmp_path, exported, capsys):
    path, keys, tensors = _as_older_release(exported, tmp_path)
    imported = import_gguf(path)
    np.testing.assert_array_equal(
        imported.arrays["token_embedding.weight"],
        import_gguf(exported).arrays["token_embedding.weight"],
    )
    assert imported.verified["tensors"] == "ok"
    assert imported.verified["metadata"].startswith("not verified: written by riftco before")
    assert inspect_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "integrity: not verified (metadata: " in out and "before riftco.digest" in out
    # Its tensor checksum still holds.
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match="SHA-256"):
        import_gguf(path)
    # A renamed, removed or unknown key is refused there too.
    for change in ("rename", "remove", "add"):
        edited = dict(keys)
        if change == "rename":
            edited["riftco.tokenizes"] = edited.pop("riftco.tokenizer")
        elif change == "remove":
            del edited["riftco.tensors"]
        else:
            edited["riftco.chat"] = ("x", T.STRING, None)
        with pytest.raises(IntegrityError, match="riftco.* keys without riftco.digest"):
            import_gguf(_rewrite(tmp_path / "edited.gguf", edited, tensors))


def test_a_digest_renamed_out_of_the_namespace_is_not_taken_for_an_older_file(tmp_path, exported):
    path = _renamed(exported, tmp_path / "hidden.gguf", "riftco.digest", 0, b"R")
    with pytest.raises(IntegrityError, match="riftco.digest: missing, and riftco.tensors records"):
        import_gguf(path)
    keys, tensors = _fields(exported)
    record = json.loads(keys["riftco.tensors"][0])
    for fields in ({**record, "extra": 1}, {"sha256": record["sha256"]}):
        keys["riftco.tensors"] = (json.dumps(fields), T.STRING, None)
        with pytest.raises(ConversionError, match="riftco.tensors: expected JSON with the fields"):
            import_gguf(_rewrite(tmp_path / "record.gguf", keys, tensors))


def test_a_file_without_riftco_keys_imports_as_llamacpps(tmp_path, exported, capsys):
    keys, tensors = _fields(exported)
    plain = {k: v for k, v in keys.items() if not k.startswith("riftco.")}
    path = _rewrite(tmp_path / "plain.gguf", plain, tensors)
    imported = import_gguf(path)
    assert imported.verified["tensors"] == "not verified: this GGUF file records no checksum"
    assert imported.verified["metadata"].startswith("not verified")
    assert imported.tokenizer is not None
    assert inspect_main([str(path)]) == 0
    assert "integrity: not verified" in capsys.readouterr().out


def test_general_file_type_alone_does_not_turn_the_checksum_off(tmp_path, exported):
    keys, tensors = _fields(exported)
    keys["general.file_type"] = (1, T.UINT32, None)  # says MOSTLY_F16; the tensors are F32
    path = _rewrite(tmp_path / "file_type.gguf", keys, tensors)
    assert import_gguf(path).verified["tensors"] == "ok"
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match="SHA-256"):
        import_gguf(path)


def test_tensors_re_encoded_by_another_tool_are_said_to_be_unverified(tmp_path, exported, capsys):
    keys, tensors = _fields(exported)
    keys["general.file_type"] = (1, T.UINT32, None)
    half = {n: a.astype(np.float16) if a.ndim == 2 else a for n, a in tensors.items()}
    path = _rewrite(tmp_path / "f16.gguf", keys, half)
    imported = import_gguf(path)
    assert imported.verified["tensors"].startswith("not verified: re-encoded by another tool")
    assert "7 of 17 tensors are in another type" in imported.verified["tensors"]
    assert imported.verified["metadata"] == "ok"
    assert inspect_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "integrity: not verified (tensors: re-encoded by another tool" in out
    assert "the tensors' SHA-256" not in out
    # Types changed but general.file_type kept: the checksum applies, and fails.
    keys["general.file_type"] = (0, T.UINT32, None)
    with pytest.raises(IntegrityError, match="SHA-256"):
        import_gguf(_rewrite(tmp_path / "f16-kept.gguf", keys, half))


def test_describe_reports_what_was_verified(exported):
    report = describe(exported)
    assert report["integrity"] == "ok" and report["import"] == "ok"
    assert "riftco.tensors" in report["verified"] and "riftco.digest" in report["verified"]


def test_inspect_refuses_a_gguf_whose_tokenizer_import_refuses(tmp_path, exported, capsys):
    from riftco.interchange import import_gguf_model

    keys, tensors = _fields(exported)
    keys["tokenizer.ggml.model"] = ("llama", T.STRING, None)  # a SentencePiece vocabulary
    path = _rewrite(tmp_path / "spm.gguf", keys, tensors)
    with pytest.raises(ConversionError, match="SentencePiece"):
        import_gguf_model(path)
    assert inspect_main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "import: refused: " in out and "SentencePiece" in out
    assert describe(path)["integrity"] == "ok"  # the file is sound; its tokenizer is not riftco's
