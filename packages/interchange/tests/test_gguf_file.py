"""GGUF files that are truncated, corrupted or oversized: each is refused with a
ContainerError (or another InterchangeError) that says what and where, never a crash."""

from __future__ import annotations

import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from riftco.interchange import (  # noqa: E402
    ContainerError,
    IntegrityError,
    InterchangeError,
    export_gguf,
    import_gguf,
)
from riftco.interchange.gguf_file import read_gguf, scan_gguf  # noqa: E402

U32, STRING, ARRAY, U64 = 4, 8, 9, 10


def _string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str | bytes, kind: int, payload: bytes) -> bytes:
    return _string(key) + struct.pack("<I", kind) + payload


def _tensor_info(name: str, ne: list[int], ggml_type: int = 0, offset: int = 0) -> bytes:
    dims = b"".join(struct.pack("<Q", d) for d in ne)
    return _string(name) + struct.pack("<I", len(ne)) + dims + struct.pack("<IQ", ggml_type, offset)


def _file(kvs=(), infos=(), data=b"", version=3, n_tensors=None, n_kv=None, alignment=32) -> bytes:
    counts = (
        len(infos) if n_tensors is None else n_tensors,
        len(kvs) if n_kv is None else n_kv,
    )
    head = b"GGUF" + struct.pack("<IQQ", version, *counts)
    head += b"".join(kvs) + b"".join(infos)
    head += b"\0" * (-len(head) % alignment)
    return head + data


def _valid_parts():
    kvs = [
        _kv("general.architecture", STRING, _string("gpt2")),
        _kv("a.list", ARRAY, struct.pack("<IQ", STRING, 2) + _string("x") + _string("yz")),
    ]
    infos = [_tensor_info("w", [4, 2]), _tensor_info("b", [4], offset=32)]
    data = (
        np.arange(8, dtype=np.float32).tobytes() + bytes(32 - 32) + np.ones(4, np.float32).tobytes()
    )
    return kvs, infos, data


def test_a_handmade_file_reads(tmp_path):
    kvs, infos, data = _valid_parts()
    path = tmp_path / "ok.gguf"
    path.write_bytes(_file(kvs, infos, data))
    stored = read_gguf(path)
    assert stored.metadata["a.list"] == ["x", "yz"]
    np.testing.assert_array_equal(stored.arrays["w"], np.arange(8, dtype=np.float32).reshape(2, 4))
    assert stored.tensors["w"].shape == (2, 4)


def _corrupt_cases():
    kvs, infos, data = _valid_parts()
    name_kv = _kv("k", U32, struct.pack("<I", 1))
    return {
        "bad magic": (b"GGML" + _file(kvs, infos, data)[4:], "magic"),
        "version 1": (_file(kvs, infos, data, version=1), "version"),
        "big-endian": (_file(kvs, infos, data, version=3 << 24), "big-endian"),
        "too many tensors": (_file(kvs, infos, data, n_tensors=1 << 40), "at most"),
        "too many keys": (_file(kvs, infos, data, n_kv=1 << 40), "at most"),
        "key count past the end": (_file(kvs, n_kv=9), "truncated"),
        "string past the end": (
            _file([_kv("k", STRING, struct.pack("<Q", 1 << 20) + b"abc")]),
            "truncated",
        ),
        "huge string": (_file([_kv("k", STRING, struct.pack("<Q", 1 << 62))]), "at most"),
        "huge array": (_file([_kv("k", ARRAY, struct.pack("<IQ", U32, 1 << 40))]), "at most"),
        "nested array": (
            _file([_kv("k", ARRAY, struct.pack("<IQ", ARRAY, 1))]),
            "numbers or strings",
        ),
        "unknown value type": (_file([_kv("k", 13, b"")]), "unknown value type"),
        "key not UTF-8": (_file([_kv(b"\xff\xfe", U32, b"\0\0\0\0")]), "UTF-8"),
        "duplicate key": (_file([name_kv, name_kv]), "twice"),
        "alignment not a power of two": (
            _file([_kv("general.alignment", U32, struct.pack("<I", 24))]),
            "power of two",
        ),
        "alignment of another type": (
            _file([_kv("general.alignment", U64, struct.pack("<Q", 32))]),
            "uint32",
        ),
        "long tensor name": (_file(infos=[_tensor_info("n" * 64, [4])], data=bytes(16)), "name"),
        "no dimensions": (_file(infos=[_tensor_info("t", [])]), "dimensions"),
        "five dimensions": (_file(infos=[_tensor_info("t", [1] * 5)]), "dimensions"),
        "zero dimension": (_file(infos=[_tensor_info("t", [0, 4])]), "positive dimensions"),
        "unknown ggml type": (
            _file(infos=[_tensor_info("t", [4], 99)], data=bytes(16)),
            "ggml type",
        ),
        "misaligned offset": (
            _file(infos=[_tensor_info("t", [4], offset=4)], data=bytes(64)),
            "alignment",
        ),
        "data past the end": (
            _file(infos=[_tensor_info("t", [1 << 40])], data=bytes(16)),
            "do not fit",
        ),
        "block size": (_file(infos=[_tensor_info("t", [31], 8)], data=bytes(64)), "multiple of 32"),
        "overlap": (
            _file(
                infos=[_tensor_info("a", [16]), _tensor_info("b", [8], offset=32)], data=bytes(64)
            ),
            "overlap",
        ),
        "duplicate tensor": (
            _file(
                infos=[_tensor_info("a", [4]), _tensor_info("a", [4], offset=32)], data=bytes(48)
            ),
            "twice",
        ),
        "empty file": (b"", "empty"),
    }


@pytest.mark.parametrize("case", list(_corrupt_cases()))
def test_malformed_headers_are_refused_with_the_reason(tmp_path, case):
    raw, reason = _corrupt_cases()[case]
    path = tmp_path / "bad.gguf"
    path.write_bytes(raw)
    with pytest.raises(ContainerError, match=reason) as info:
        read_gguf(path)
    assert str(path) in str(info.value)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from riftco.interchange.layout import expected_shapes
    from riftco.nn import TransformerConfig
    from riftco.text import BpeTokenizer

    config = TransformerConfig.preset(
        "llama", vocab_size=270, context_length=16, d_model=8, n_layers=1, n_heads=2, d_ff=16
    )
    rng = np.random.default_rng(0)
    arrays = {
        n: rng.standard_normal(s).astype(np.float32) for n, s in expected_shapes(config).items()
    }
    tokenizer = BpeTokenizer.train("aaab abab bbba " * 4, vocab_size=260, pretokenize="gpt2")
    path = tmp_path_factory.mktemp("gguf") / "small.gguf"
    export_gguf(path, config, arrays, tokenizer)
    return path


def test_every_truncation_is_a_container_error(tmp_path, exported):
    raw = exported.read_bytes()
    data_start = scan_gguf(exported).data_offset
    lengths = sorted({*range(0, data_start, 29), *range(data_start, len(raw), 211), len(raw) - 1})
    path = tmp_path / "cut.gguf"
    for length in lengths:
        path.write_bytes(raw[:length])
        with pytest.raises(ContainerError):
            import_gguf(path)


def test_random_corruption_never_escapes_as_another_error(tmp_path, exported):
    raw = exported.read_bytes()
    rng = np.random.default_rng(7)
    path = tmp_path / "flipped.gguf"
    outcomes = {"refused": 0, "read": 0}
    for _ in range(100):
        damaged = bytearray(raw)
        for position in rng.integers(0, len(raw), size=rng.integers(1, 4)):
            damaged[position] = int(rng.integers(0, 256))
        path.write_bytes(bytes(damaged))
        try:
            import_gguf(path)
            outcomes["read"] += 1
        except InterchangeError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0


def test_changed_tensor_data_fails_the_recorded_checksum(tmp_path, exported):
    raw = bytearray(exported.read_bytes())
    layout = scan_gguf(exported)
    info = layout.tensors["blk.0.ffn_up.weight"]
    raw[layout.data_offset + info.offset] ^= 0x01  # a one-bit change of one weight
    path = tmp_path / "changed.gguf"
    path.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match="SHA-256"):
        import_gguf(path)


def test_declared_sizes_are_checked_before_reading(tmp_path, monkeypatch, exported):
    import riftco.interchange.gguf_file as gguf_file

    monkeypatch.setattr(gguf_file, "MAX_ARRAY_ITEMS", 100)  # the token list has 270
    with pytest.raises(ContainerError, match="at most 100 items"):
        read_gguf(exported)
