"""The ``.rift`` manifest: what a bundle is, and the identity that names it.

The manifest is one JSON object stored as a string under the safetensors
metadata key ``riftco.manifest``::

    {
      "format": "riftco-interchange/bundle",
      "format_version": 1,
      "artifact_id": "<64 hex digits>",
      "config": {...},              # TransformerConfig fields
      "tokenizer": {...},           # riftco-text tokenizer state, chat template inside
      "stage": "pretraining",
      "parent_id": null,            # or the artifact_id this one was derived from
      "metadata": {...},            # free JSON object, at most MAX_METADATA_BYTES
      "weights": {"sha256": "<hex>", "tensors": 148, "parameters": 124439808}
    }

``artifact_id`` is the SHA-256 of the canonical JSON (sorted keys, separators
``,`` and ``:``, UTF-8, no NaN) of the manifest without ``artifact_id``. Because
the manifest holds the weights' digest, the identity covers the weights too:
two bundles share an id exactly when their configuration, tokenizer, stage,
lineage, metadata and weights agree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from riftco.core import JSONError, loads_strict
from riftco.interchange.container import canonical_json, content_id
from riftco.interchange.errors import ContainerError, IntegrityError, ManifestError

FORMAT = "riftco-interchange/bundle"
FORMAT_VERSION = 1
MANIFEST_KEY = "riftco.manifest"
MAX_METADATA_BYTES = 1 << 20
STAGES = ("pretraining", "post_training", "imported")
"""The stages riftco writes; any lowercase identifier is accepted."""

_KEYS = {
    "format",
    "format_version",
    "artifact_id",
    "config",
    "tokenizer",
    "stage",
    "parent_id",
    "metadata",
    "weights",
}
_WEIGHT_KEYS = {"sha256", "tensors", "parameters"}
_HEX64 = re.compile(r"[0-9a-f]{64}")
_STAGE = re.compile(r"[a-z][a-z0-9_]{0,63}")


def build_manifest(
    config: Mapping[str, Any],
    tokenizer: Mapping[str, Any],
    weights: Mapping[str, Any],
    stage: str = "pretraining",
    parent_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A complete manifest, ``artifact_id`` computed; raises ManifestError on bad fields."""
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "config": dict(config),
        "tokenizer": dict(tokenizer),
        "stage": stage,
        "parent_id": parent_id,
        "metadata": dict(metadata or {}),
        "weights": dict(weights),
    }
    _check_fields(manifest)
    manifest["artifact_id"] = content_id(manifest)
    return manifest


def parse_manifest(metadata: Mapping[str, str]) -> dict[str, Any]:
    """The manifest stored in safetensors ``metadata``, checked field by field and by identity."""
    text = metadata.get(MANIFEST_KEY)
    if text is None:
        raise ManifestError(
            f"expected a {MANIFEST_KEY!r} metadata entry; found keys {sorted(metadata)} "
            "(a plain safetensors file, not a .rift bundle?)"
        )
    try:
        manifest = loads_strict(text)
    except JSONError as exc:
        raise ManifestError(f"manifest: {exc}") from None
    if not isinstance(manifest, dict):
        raise ManifestError(f"manifest: expected an object; found {type(manifest).__name__}")
    check_format(manifest)
    _check_keys("manifest", manifest, _KEYS)
    _check_fields(manifest)
    found, expected = manifest["artifact_id"], content_id(manifest)
    if not (isinstance(found, str) and _HEX64.fullmatch(found)):
        raise ManifestError(f"artifact_id: expected 64 lowercase hex digits; found {found!r}")
    if found != expected:
        raise IntegrityError(
            f"artifact_id: the manifest hashes to {expected}; the file claims {found} "
            "(the manifest was changed after it was written)"
        )
    return manifest


def manifest_metadata(manifest: Mapping[str, Any]) -> dict[str, str]:
    """The safetensors metadata that stores ``manifest``."""
    return {MANIFEST_KEY: canonical_json(manifest).decode("utf-8")}


def check_format(manifest: Mapping[str, Any]) -> None:
    if manifest.get("format") != FORMAT:
        raise ManifestError(f"format: expected {FORMAT!r}; found {manifest.get('format')!r}")
    version = manifest.get("format_version")
    if not _is_int(version) or not 1 <= version <= FORMAT_VERSION:
        newer = _is_int(version) and version > FORMAT_VERSION
        raise ManifestError(
            f"format_version: expected an integer from 1 to {FORMAT_VERSION}; found {version!r}"
            + (" (written by a newer riftco-interchange)" if newer else "")
        )


def _check_fields(manifest: Mapping[str, Any]) -> None:
    for key in ("config", "tokenizer", "metadata", "weights"):
        if not isinstance(manifest[key], Mapping):
            raise ManifestError(f"{key}: expected an object; found {type(manifest[key]).__name__}")
    stage = manifest["stage"]
    if not (isinstance(stage, str) and _STAGE.fullmatch(stage)):
        raise ManifestError(
            f"stage: expected a lowercase identifier such as {', '.join(STAGES)}; found {stage!r}"
        )
    parent = manifest["parent_id"]
    if parent is not None and not (isinstance(parent, str) and _HEX64.fullmatch(parent)):
        raise ManifestError(
            f"parent_id: expected null or 64 lowercase hex digits; found {parent!r}"
        )
    try:
        size = len(canonical_json(manifest["metadata"]))
        canonical_json(manifest["config"])
    except ContainerError as exc:
        raise ManifestError(f"metadata or config: {exc}") from None
    if size > MAX_METADATA_BYTES:
        raise ManifestError(f"metadata: expected at most {MAX_METADATA_BYTES} bytes; found {size}")
    weights = manifest["weights"]
    _check_keys("weights", weights, _WEIGHT_KEYS)
    if not (isinstance(weights["sha256"], str) and _HEX64.fullmatch(weights["sha256"])):
        raise ManifestError(
            f"weights.sha256: expected 64 lowercase hex digits; found {weights['sha256']!r}"
        )
    for key in ("tensors", "parameters"):
        if not (_is_int(weights[key]) and weights[key] >= 0):
            raise ManifestError(
                f"weights.{key}: expected a non-negative integer; found {weights[key]!r}"
            )


def _check_keys(where: str, found: Mapping[str, Any], expected: set[str]) -> None:
    missing, unexpected = expected - set(found), set(found) - expected
    if missing or unexpected:
        raise ManifestError(
            f"{where}: missing keys {sorted(missing)}, unexpected keys {sorted(map(str, unexpected))}"
        )


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
