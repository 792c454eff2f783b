"""Lineage recorded in exported files: where a model came from.

A model exported from a bundle records the bundle's ``artifact_id``, ``stage`` and
``parent_id``; a model imported back becomes a bundle whose parent is that
``artifact_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from riftco.core import loads_strict
from riftco.interchange.errors import ConversionError

RIFTCO_LINEAGE = "riftco.lineage"


def lineage_of(manifest: Mapping[str, Any] | None) -> dict[str, Any]:
    """The lineage of a model that came from a bundle with ``manifest`` (empty if none)."""
    if not manifest:
        return {}
    return {
        "artifact_id": manifest.get("artifact_id"),
        "stage": manifest.get("stage"),
        "parent_id": manifest.get("parent_id"),
    }


def parse_lineage(raw: Any, where: str) -> dict[str, Any]:
    """A lineage stored as a JSON string (or already parsed); empty when absent."""
    if raw is None:
        return {}
    try:
        value = loads_strict(raw) if isinstance(raw, str) else raw
    except ValueError:
        raise ConversionError(f"{where}: expected a JSON object") from None
    if not isinstance(value, dict):
        raise ConversionError(f"{where}: expected a JSON object; found {type(value).__name__}")
    parent = value.get("artifact_id")
    if parent is not None and not (isinstance(parent, str) and len(parent) == 64):
        raise ConversionError(f"{where}: artifact_id: expected 64 hex digits; found {parent!r}")
    return value
