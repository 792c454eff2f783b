"""Honest integrity for GGUF files another tool re-encoded.

``llama-quantize`` copies every key of its input, riftco's ``riftco.*`` keys (and so
the ``riftco.tensors`` checksums) included, but writes the matrices in another type
and sets ``general.file_type``. The checksum over all tensors then no longer applies:
``riftco inspect`` must say ``not verified (...)``, never ``ok``, and a flipped byte in a
tensor that still has a checksum (one the tool left as it was) is a failure."""

from __future__ import annotations

import json

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from riftco.interchange import IntegrityError, export_gguf, import_gguf, model_arrays  # noqa: E402
from riftco.interchange.cli_inspect import main as inspect_main  # noqa: E402

Q = gguf.GGMLQuantizationType


def _as_llama_quantize_writes(source, path, record=None, drop=()):
    """What ``llama-quantize source path Q4_0`` leaves: every key as it was (but
    ``general.file_type``), the matrices Q4_0 (the head Q8_0, its fallback where a row
    is not a multiple of 256), the vectors and the position embedding F32 as they were.
    ``record`` replaces the ``riftco.tensors`` value; the keys in ``drop`` are left out."""
    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(path, reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in drop:
            continue
        value = field.contents()
        if name == "general.file_type":
            value = int(gguf.LlamaFileType.MOSTLY_Q4_0)
        if name == "riftco.tensors" and record is not None:
            value = record
        sub = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(name, value, field.types[0], sub_type=sub)
    for t in reader.tensors:
        values = np.array(t.data)
        if values.ndim == 2 and t.name != "position_embd.weight":
            kind = Q.Q8_0 if t.name == "output.weight" else Q.Q4_0
            writer.add_tensor(t.name, gguf.quants.quantize(values, kind), raw_dtype=kind)
        else:
            writer.add_tensor(t.name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _flip(path, tensor, at=5):
    """Flip one byte ``at`` bytes into ``tensor``'s data."""
    reader = gguf.GGUFReader(path)
    (found,) = [t for t in reader.tensors if t.name == tensor]
    offset = int(found.data_offset) + at
    del reader, found
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x5A
    path.write_bytes(bytes(raw))


@pytest.fixture
def exported(tmp_path, make_model, tokenizer):
    model = make_model("gpt2", d_model=64, n_heads=4, d_ff=96)
    return export_gguf(tmp_path / "f32.gguf", model.config, model_arrays(model), tokenizer)


def test_a_re_encoded_file_is_not_verified_and_never_ok(tmp_path, exported, capsys):
    path = _as_llama_quantize_writes(exported, tmp_path / "q4_0.gguf")
    state = import_gguf(path).verified["tensors"]
    assert state.startswith("not verified: re-encoded by another tool (general.file_type 0 -> 2")
    assert inspect_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "integrity: not verified (tensors: re-encoded by another tool" in out
    assert "integrity: ok" not in out and "the tensors' SHA-256" not in out
    # A flipped byte in a re-encoded tensor: no checksum covers its new bytes, so the
    # report stays "not verified" (it says those tensors cannot be checked).
    _flip(path, "blk.0.ffn_up.weight")
    assert inspect_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "integrity: not verified (" in out and "cannot be checked" in out


def test_a_flipped_byte_where_a_checksum_exists_fails(tmp_path, exported, capsys):
    path = _as_llama_quantize_writes(exported, tmp_path / "q4_0.gguf")
    _flip(path, "blk.0.attn_norm.weight")  # F32, left as exported: its checksum holds
    with pytest.raises(IntegrityError, match=r"'blk\.0\.attn_norm\.weight': SHA-256 differs"):
        import_gguf(path)
    assert inspect_main([str(path)]) == 1
    assert "integrity: FAILED" in capsys.readouterr().out
    # And in riftco's own file, any tensor's byte.
    _flip(exported, "blk.0.ffn_up.weight")
    with pytest.raises(IntegrityError, match=r"changed or corrupted \('blk\.0\.ffn_up\.weight'\)"):
        import_gguf(exported)
    assert inspect_main([str(exported)]) == 1


def test_a_re_encoded_file_of_an_older_export_says_why(tmp_path, exported, capsys):
    """A riftco release's export from before riftco.digest and per-tensor checksums
    (a two-field record): its one checksum over all tensors no longer applies."""
    record = json.loads(gguf.GGUFReader(exported).fields["riftco.tensors"].contents())
    older = json.dumps({"sha256": record["sha256"], "file_type": record["file_type"]})
    path = _as_llama_quantize_writes(
        exported, tmp_path / "older.gguf", record=older, drop=("riftco.digest",)
    )
    state = import_gguf(path).verified["tensors"]
    assert state.startswith("not verified: re-encoded by another tool")
    assert "one checksum over the tensors as exported" in state


def test_a_malformed_per_tensor_record_is_refused(tmp_path, exported):
    from riftco.interchange import ConversionError

    record = json.loads(gguf.GGUFReader(exported).fields["riftco.tensors"].contents())
    record["tensor_sha256"]["blk.0.ffn_up.weight"] = ["Q4_0", "not a digest"]
    path = _as_llama_quantize_writes(exported, tmp_path / "bad.gguf", record=json.dumps(record))
    with pytest.raises(ConversionError, match="tensor_sha256: expected"):
        import_gguf(path)
