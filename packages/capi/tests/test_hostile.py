"""riftco-interchange's hostile `.rift` cases through the C ABI: whatever `load_bundle`
refuses, `riftco_model_load` refuses too, with a typed status (never `internal`), in
bounded time; NULL and wrong-handle arguments are errors, not crashes."""

from __future__ import annotations

import ctypes
import json
import os
import struct
import time

import numpy as np
import pytest
from conftest import make_bundle
from riftco_ctypes import CapiError, Model

from riftco.interchange import load_bundle, read_bundle, write_bundle

TYPED = {"format", "checksum", "limit", "io", "unsupported", "invalid_argument"}


def c_refusal(lib, path) -> str | None:
    try:
        Model(lib, path).close()
    except CapiError as exc:
        return exc.status
    return None


def py_refuses(path) -> bool:
    try:
        load_bundle(path)
    except ValueError:  # every InterchangeError is a ValueError
        return True
    return False


@pytest.fixture(scope="module")
def small(tmp_path_factory, tokenizer):
    return make_bundle(tmp_path_factory.mktemp("hostile") / "small.rift", "gpt2", tokenizer)


def test_truncation_at_many_offsets(lib, small, tmp_path):
    raw = small.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    cut = tmp_path / "cut.rift"
    offsets = sorted(set(range(0, 8 + size + 64)) | set(range(0, len(raw), 997)))
    start = time.monotonic()
    for offset in offsets:
        cut.write_bytes(raw[:offset])
        status = c_refusal(lib, cut)
        assert status in TYPED, (offset, status)
    assert time.monotonic() - start < 60


def test_bit_flips_refused_where_riftco_interchange_refuses(lib, small, tmp_path):
    raw = bytearray(small.read_bytes())
    rng = np.random.default_rng(0)
    flipped = tmp_path / "flipped.rift"
    for position in rng.integers(0, len(raw), 200):
        damaged = bytearray(raw)
        damaged[position] ^= 1 << int(rng.integers(0, 8))
        flipped.write_bytes(bytes(damaged))
        status = c_refusal(lib, flipped)
        assert (status is not None) == py_refuses(flipped), position
        assert status is None or status in TYPED, (position, status)


@pytest.mark.parametrize("size", [2**63 - 1, 2**64 - 1, 2**40, 0])
def test_huge_header_sizes(lib, tmp_path, size):
    path = tmp_path / "huge.rift"
    path.write_bytes(struct.pack("<Q", size) + b"{}")
    assert c_refusal(lib, path) in {"limit", "format"}


HEADERS = [
    json.dumps({"x": {"dtype": "F32", "shape": [1], "data_offsets": o}}).encode()
    for o in ([0, 2**62], [-4, 4], [8, 0], [0, "4"])
] + [
    b'{"x": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 4]}}',
    b'{"x": {"dtype": "F32", "shape": ['
    + b",".join([b"9" * 4000] * 3)
    + b'], "data_offsets": [0, 4]}}',
    b'{"x": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}',
    b'{"\\ud800": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a": 1, "a": 2}',
    b'{"x": NaN}',
]


@pytest.mark.parametrize("header", HEADERS, ids=range(len(HEADERS)))
def test_hostile_headers(lib, tmp_path, header):
    path = tmp_path / "claims.rift"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    assert py_refuses(path)
    assert c_refusal(lib, path) in TYPED


def _rewrite(src, dst, **changes):
    stored = read_bundle(src)
    write_bundle(dst, dict(stored.config, **changes), dict(stored.tensors), stored.tokenizer_state)
    return dst


@pytest.mark.parametrize(
    "changes",
    [
        dict(n_layers=10**7),
        dict(context_length=2**40),
        dict(n_heads=3),
        dict(norm="batch"),
        dict(vocab_size=True),
        dict(d_ff=0),
        dict(unknown_field=1),
        dict(kv_heads=3),
    ],
    ids=lambda c: next(iter(c)),
)
def test_configurations_refused_fast(lib, small, tmp_path, changes):
    path = _rewrite(small, tmp_path / "config.rift", **changes)
    assert py_refuses(path)
    start = time.monotonic()
    assert c_refusal(lib, path) in TYPED
    assert time.monotonic() - start < 5


def test_non_regular_files(lib, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link-to-zero"
    link.symlink_to("/dev/zero")
    for path in [fifo, link, "/dev/zero", "/dev/urandom", tmp_path]:
        assert c_refusal(lib, path) == "io", path


def test_a_changed_manifest_is_an_identity_error(lib, small, tmp_path):
    raw = small.read_bytes()
    marker = b'\\"stage\\":\\"pretraining\\"'
    assert marker in raw
    path = tmp_path / "stage.rift"
    path.write_bytes(raw.replace(marker, b'\\"stage\\":\\"pretrainin_\\"'))
    assert py_refuses(path)
    assert c_refusal(lib, path) == "checksum"


def test_null_and_wrong_handles(lib, small):
    model = Model(lib, small)
    session = model.session()
    out = ctypes.c_int32()
    for name, args, status in [
        ("session_step", (None, 1), "null_handle"),
        ("session_step", (model.ptr, 1), "wrong_handle"),
        ("session_prefill", (session.ptr, None, ctypes.c_size_t(3)), "null_handle"),
        ("model_config", (session.ptr, ctypes.byref(out)), "wrong_handle"),
        (
            "sampler_draw",
            (session.ptr, None, ctypes.c_size_t(0), ctypes.byref(out)),
            "wrong_handle",
        ),
        ("session_logits", (session.ptr, None, ctypes.c_size_t(0)), "state"),
    ]:
        with pytest.raises(CapiError) as info:
            lib(name, *args)
        assert info.value.status == status, name
        assert info.value.message
    session.close()
    model.close()
