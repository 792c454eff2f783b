"""Canonical JSON and the SHA-256 identities built on it.

Canonical JSON is the one byte form of a JSON document: keys sorted, separators
``,`` and ``:`` without spaces, UTF-8 (no ``\\u`` escapes for non-ASCII), and no
NaN or infinity. Two documents that are equal as JSON values have the same
canonical bytes, so their hashes are identities:

- :func:`canonical_hash`: the SHA-256 (hex) of a document's canonical JSON;
- :func:`content_id`: the same, for a mapping without the key that will hold it;
- :func:`records_digest`: the SHA-256 (hex) of a sequence of records, each the
  canonical JSON of a small header followed by raw bytes (named tensors: header
  ``[name, dtype, shape]``, then the data).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from riftco.core.errors import JSONError


def canonical_json(document: Any) -> bytes:
    """``document`` as canonical JSON: sorted keys, compact separators, UTF-8, no NaN."""
    try:
        text = json.dumps(
            document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise JSONError("expected text that UTF-8 can hold; found a lone surrogate") from None
    except (TypeError, ValueError) as exc:
        raise JSONError(f"expected a JSON-ready document; {exc}") from None


def canonical_hash(document: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of ``document``."""
    return hashlib.sha256(canonical_json(document)).hexdigest()


def content_id(document: Mapping[str, Any], exclude: str) -> str:
    """SHA-256 (hex) of the canonical JSON of ``document`` without the key ``exclude``."""
    return canonical_hash({k: v for k, v in document.items() if k != exclude})


def records_digest(records: Iterable[tuple[Any, Any]]) -> str:
    """SHA-256 (hex) of ``(header, data)`` records, in the order given: for each, the
    canonical JSON of ``header`` followed by ``data`` (any bytes-like object)."""
    digest = hashlib.sha256()
    for header, data in records:
        digest.update(canonical_json(header))
        digest.update(data)
    return digest.hexdigest()


__all__ = ["canonical_hash", "canonical_json", "content_id", "records_digest"]
