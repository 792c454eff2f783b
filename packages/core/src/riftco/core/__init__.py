"""riftco.core: the plumbing every riftco package shares, standard library only.

- :class:`RiftcoError`, the root of every typed riftco error, and :class:`JSONError`;
- atomic, durable writes: :func:`atomic_write`, :func:`write_bytes_atomic`,
  :func:`staged_files`, :func:`fsync_folder`, :func:`remove_stale_temporaries`;
- strict JSON reading: :func:`loads_strict` (duplicate keys, NaN and infinity refused;
  nesting depth and integer digits bounded);
- bounded reading: :func:`read_bounded`, :func:`require_regular_file` (FIFOs and
  devices refused before a byte is read);
- canonical JSON and identities: :func:`canonical_json`, :func:`canonical_hash`,
  :func:`content_id`, :func:`records_digest`.
"""

from __future__ import annotations

from riftco.core.atomic import (
    atomic_write,
    fsync_folder,
    remove_stale_temporaries,
    staged_files,
    write_bytes_atomic,
)
from riftco.core.errors import JSONError, RiftcoError
from riftco.core.files import read_bounded, require_regular_file
from riftco.core.hashing import canonical_hash, canonical_json, content_id, records_digest
from riftco.core.strict_json import MAX_DEPTH, MAX_INT_DIGITS
from riftco.core.strict_json import loads as loads_strict

__version__ = "0.1.0"

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "JSONError",
    "RiftcoError",
    "atomic_write",
    "canonical_hash",
    "canonical_json",
    "content_id",
    "fsync_folder",
    "loads_strict",
    "read_bounded",
    "records_digest",
    "remove_stale_temporaries",
    "require_regular_file",
    "staged_files",
    "write_bytes_atomic",
]
