"""The generic container: atomic writes, canonical identity, the bounded safetensors reader."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
import safetensors.numpy
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from riftco.interchange import (
    ContainerError,
    InterchangeError,
    atomic_write,
    canonical_json,
    content_id,
    read_safetensors,
    tensors_digest,
    write_safetensors,
)
from riftco.tensor import RiftcoError


def test_canonical_json_is_sorted_compact_utf8():
    assert canonical_json({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'.encode()
    with pytest.raises(ContainerError, match="JSON-ready"):
        canonical_json({"x": float("nan")})


def test_content_id_ignores_only_the_excluded_key():
    document = {"a": 1, "artifact_id": "anything"}
    assert content_id(document) == content_id({"a": 1})
    assert content_id(document) != content_id({"a": 2})
    assert len(content_id(document)) == 64


def test_errors_are_riftco_and_value_errors():
    assert issubclass(ContainerError, InterchangeError)
    assert issubclass(ContainerError, RiftcoError)
    assert issubclass(ContainerError, ValueError)


def test_round_trip_with_the_standard_library(tmp_path):
    arrays = {
        "w": np.arange(6, dtype=np.float32).reshape(2, 3),
        "ids": np.array([1, -2], np.int64),
        "empty": np.zeros((0, 4), np.float16),
        "flag": np.array(True),
        "big_endian": np.arange(3, dtype=">f4"),
    }
    ours = tmp_path / "ours.safetensors"
    write_safetensors(ours, arrays, {"note": "hi"})
    theirs = safetensors.numpy.load_file(ours)
    for name, array in arrays.items():
        np.testing.assert_array_equal(theirs[name], array)
    stored = read_safetensors(ours)
    assert stored.metadata == {"note": "hi"}
    assert stored.digest() == tensors_digest(arrays)
    assert stored.data_start % 8 == 0

    other = tmp_path / "theirs.safetensors"
    safetensors.numpy.save_file(arrays, other, metadata={"note": "hi"})
    read = read_safetensors(other)
    assert read.digest() == tensors_digest(arrays)  # independent of the file's order
    for name, array in arrays.items():
        np.testing.assert_array_equal(read.array(name), array)


def test_views_are_read_only_and_copies_writable(tmp_path):
    path = tmp_path / "a.safetensors"
    write_safetensors(path, {"w": np.ones(3, np.float32)})
    stored = read_safetensors(path)
    assert not stored.array("w").flags.writeable
    copy = stored.array("w", copy=True)
    copy[0] = 5
    assert stored.array("w")[0] == 1


def test_bfloat16_is_widened_to_float32(tmp_path, join_file):
    path = tmp_path / "bf16.safetensors"
    values = np.array([1.0, -2.5, 3.140625], np.float32)
    bits = (values.view(np.uint32) >> 16).astype("<u2")
    header = {"x": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}
    join_file(path, header, bits.tobytes())
    np.testing.assert_array_equal(read_safetensors(path).array("x"), values)


@settings(max_examples=25, deadline=None)
@given(
    hnp.arrays(
        st.sampled_from([np.float32, np.float64, np.int64, np.uint8, np.bool_]),
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
    )
)
def test_any_array_round_trips(tmp_path_factory, array):
    path = tmp_path_factory.mktemp("rt") / "x.safetensors"
    write_safetensors(path, {"x": array})
    back = read_safetensors(path).array("x")
    assert back.shape == array.shape and back.dtype == array.dtype
    np.testing.assert_array_equal(back, array)


# -- atomic writes ------------------------------------------------------------------------


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_write(path) as handle:
        handle.write(b"half of the new")
        raise RuntimeError("crash")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f.bin"]


def test_a_failed_array_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "f.safetensors"
    write_safetensors(path, {"w": np.ones(2, np.float32)})
    before = path.read_bytes()
    with pytest.raises(ContainerError, match="numpy array"):
        write_safetensors(path, {"w": np.ones(2, np.float32), "z": [1, 2]})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["f.safetensors"]


# -- hostile files ---------------------------------------------------------------------


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good.safetensors"
    write_safetensors(path, {"a": np.ones((2, 2), np.float32), "b": np.zeros(3, np.float32)})
    return path


def reject(path, match):
    with pytest.raises(ContainerError, match=match) as info:
        read_safetensors(path)
    assert str(path) in str(info.value)


def test_rejects_a_file_shorter_than_the_prefix(tmp_path):
    path = tmp_path / "short"
    path.write_bytes(b"\x01\x02")
    reject(path, "truncated: expected at least 8 bytes")


def test_rejects_an_oversized_header_before_reading_it(tmp_path):
    path = tmp_path / "huge"
    path.write_bytes(struct.pack("<Q", 1 << 62) + b"{}")
    reject(path, "header: expected at most")


def test_rejects_a_header_longer_than_the_file(tmp_path):
    path = tmp_path / "cut"
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    reject(path, "truncated: the header needs 1000 bytes")


def test_rejects_truncated_data(good):
    good.write_bytes(good.read_bytes()[:-4])
    reject(good, "truncated: tensors need 28 bytes of data; the file holds 24")


def test_rejects_trailing_bytes(good):
    good.write_bytes(good.read_bytes() + b"junk")
    reject(good, "trailing bytes")


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda h: h["a"].update(dtype="F128"), "expected a dtype among"),
        (lambda h: h["a"].update(dtype=7), "expected a dtype among"),
        (lambda h: h["a"].update(shape=[2, -2]), "non-negative integers"),
        (lambda h: h["a"].update(shape=[1] * 9), "at most 8"),
        (lambda h: h["a"].update(shape=[2, 3]), "expected 24 bytes for F32"),
        (lambda h: h["a"].update(shape=[True, 4]), "non-negative integers"),
        (lambda h: h["a"].update(data_offsets=[0]), "data_offsets"),
        (lambda h: h["a"].update(extra=1), "expected an object with keys"),
        (lambda h: h["b"].update(data_offsets=[8, 20]), "overlaps"),
        (lambda h: h.update(__metadata__={"k": 1}), "object of strings"),
        (lambda h: h.update(**{"": h.pop("a")}), "non-empty tensor name"),
    ],
)
def test_rejects_malformed_entries(good, mutate, match, split_file, join_file):
    header, data = split_file(good)
    mutate(header)
    join_file(good, header, data)
    reject(good, match)


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"[1, 2]", "expected a JSON object"),
        (b"{not json", "expected JSON"),
        (b'{"a": NaN}', "standard JSON"),
        (b'{"a": 1, "a": 2}', "duplicate key"),
        (b"\xff\xfe{}", "expected UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply|expected a JSON object"),
    ],
)
def test_rejects_malformed_headers(tmp_path, raw, match, join_file):
    path = tmp_path / "bad"
    join_file(path, raw, b"")
    reject(path, match)


def test_caps_the_tensor_count_when_writing(tmp_path):
    arrays = {f"t{i}": np.zeros(0, np.float32) for i in range(70_000)}
    with pytest.raises(ContainerError, match="at most 65536 tensors"):
        write_safetensors(tmp_path / "many", arrays)


def test_header_size_limit_is_adjustable(good):
    with pytest.raises(ContainerError, match="at most 16 bytes"):
        read_safetensors(good, max_header_bytes=16)


def test_missing_file_is_a_container_error(tmp_path):
    reject(tmp_path / "nope", "cannot read")


def test_writer_output_parses_as_plain_json(good, split_file):
    header, _ = split_file(good)
    assert header["a"] == {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}
    assert json.loads(json.dumps(header)) == header


def test_a_huge_declared_tensor_is_refused_without_allocating(tmp_path, join_file):
    path = tmp_path / "huge"
    size = (1 << 40) * (1 << 20) * 4
    join_file(
        path, {"x": {"dtype": "F32", "shape": [1 << 40, 1 << 20], "data_offsets": [0, size]}}, b""
    )
    reject(path, f"truncated: tensors need {size} bytes of data; the file holds 0")
