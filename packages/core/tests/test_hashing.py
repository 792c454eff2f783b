"""Canonical JSON and the identities built on it."""

import hashlib

import pytest

from riftco.core import JSONError, canonical_hash, canonical_json, content_id, records_digest


def test_canonical_json_is_sorted_compact_utf8():
    assert canonical_json({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'.encode()
    assert canonical_json({"a": {"d": 1, "c": 2}}) == b'{"a":{"c":2,"d":1}}'


@pytest.mark.parametrize("value", [float("nan"), float("inf"), object(), b"bytes"])
def test_canonical_json_refuses_what_json_cannot_hold(value):
    with pytest.raises(JSONError, match="JSON-ready"):
        canonical_json({"x": value})


def test_canonical_hash_ignores_key_order():
    assert canonical_hash({"a": 1, "b": [2]}) == canonical_hash({"b": [2], "a": 1})
    assert canonical_hash({"a": 1}) == hashlib.sha256(b'{"a":1}').hexdigest()
    assert canonical_hash({"a": 1}) != canonical_hash({"a": 2})


def test_content_id_ignores_only_the_excluded_key():
    document = {"a": 1, "id": "anything"}
    assert content_id(document, "id") == content_id({"a": 1}, "id") == canonical_hash({"a": 1})
    assert content_id(document, "a") != content_id(document, "id")


def test_records_digest_hashes_headers_then_data_in_order():
    records = [(["w", "F32", [2]], b"\x00" * 8), (["b", "F32", [0]], memoryview(b""))]
    expected = hashlib.sha256(b'["w","F32",[2]]' + b"\x00" * 8 + b'["b","F32",[0]]')
    assert records_digest(records) == expected.hexdigest()
    assert records_digest(records[::-1]) != records_digest(records)
    assert records_digest([]) == hashlib.sha256().hexdigest()


def test_canonical_json_refuses_a_lone_surrogate():
    with pytest.raises(JSONError, match="lone surrogate"):
        canonical_json({"name\udc80": 1})
