"""The ``.rift`` bundle as data: a manifest and named float32 arrays in one safetensors file.

:func:`write_bundle` and :func:`read_bundle` work on plain values (a config
dict, a tokenizer state dict, numpy arrays), so they need no model. Building a
runnable model from a bundle is :func:`riftco.interchange.load_bundle`.

Reading checks, in order, before returning anything: the container (sizes,
offsets, header bounds), the manifest (format, version, keys, fields), the
identity, the tensor dtypes and counts, the weights' SHA-256, and that every
value is finite. Each failure raises a typed :class:`InterchangeError`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riftco.interchange.container import (
    SafetensorsFile,
    read_safetensors,
    tensors_digest,
    write_safetensors,
)
from riftco.interchange.errors import IntegrityError, ManifestError, WeightsError
from riftco.interchange.manifest import build_manifest, manifest_metadata, parse_manifest

SUFFIX = ".rift"


@dataclass(frozen=True)
class Bundle:
    """A validated bundle: its manifest and its weights (read-only views unless copied)."""

    manifest: dict[str, Any]
    tensors: dict[str, np.ndarray] = field(repr=False)
    path: Path | None = None

    @property
    def artifact_id(self) -> str:
        return self.manifest["artifact_id"]

    @property
    def config(self) -> dict[str, Any]:
        return self.manifest["config"]

    @property
    def tokenizer_state(self) -> dict[str, Any]:
        return self.manifest["tokenizer"]

    @property
    def stage(self) -> str:
        return self.manifest["stage"]

    @property
    def parent_id(self) -> str | None:
        return self.manifest["parent_id"]

    @property
    def metadata(self) -> dict[str, Any]:
        return self.manifest["metadata"]

    @property
    def parameter_count(self) -> int:
        return self.manifest["weights"]["parameters"]


def write_bundle(
    path: str | os.PathLike[str],
    config: Mapping[str, Any],
    tensors: Mapping[str, np.ndarray],
    tokenizer_state: Mapping[str, Any],
    stage: str = "pretraining",
    parent_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write a bundle atomically; returns its manifest (``artifact_id`` included)."""
    arrays = {}
    for name, array in tensors.items():
        if not isinstance(array, np.ndarray) or array.dtype != np.float32:
            found = array.dtype if isinstance(array, np.ndarray) else type(array).__name__
            raise WeightsError(f"{name}: expected a float32 numpy array; found {found}")
        _check_finite(name, array)
        arrays[name] = array
    weights = {
        "sha256": tensors_digest(arrays),
        "tensors": len(arrays),
        "parameters": sum(int(a.size) for a in arrays.values()),
    }
    manifest = build_manifest(config, tokenizer_state, weights, stage, parent_id, metadata)
    write_safetensors(path, arrays, manifest_metadata(manifest))
    return manifest


def read_bundle(path: str | os.PathLike[str], copy: bool = False) -> Bundle:
    """Open and fully validate a bundle; ``copy=True`` gives writable weights (for training)."""
    stored = read_safetensors(path)
    try:
        manifest = parse_manifest(stored.metadata)
        _check_weights(stored, manifest["weights"])
    except (ManifestError, WeightsError, IntegrityError) as exc:
        raise type(exc)(f"{stored.path}: {exc}") from None
    return Bundle(manifest, stored.arrays(copy=copy), stored.path)


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The validated manifest of a bundle, without reading or checking its weights."""
    stored = read_safetensors(path)
    try:
        return parse_manifest(stored.metadata)
    except (ManifestError, IntegrityError) as exc:
        raise type(exc)(f"{stored.path}: {exc}") from None


def _check_weights(stored: SafetensorsFile, weights: Mapping[str, Any]) -> None:
    for info in stored.tensors.values():
        if info.dtype != "F32":
            raise WeightsError(f"{info.name}: expected F32 weights; found {info.dtype}")
    count = len(stored.tensors)
    parameters = sum(info.size for info in stored.tensors.values())
    if (count, parameters) != (weights["tensors"], weights["parameters"]):
        raise IntegrityError(
            f"weights: the manifest lists {weights['tensors']} tensors and "
            f"{weights['parameters']} parameters; the file holds {count} and {parameters}"
        )
    digest = stored.digest()
    if digest != weights["sha256"]:
        raise IntegrityError(
            f"weights: SHA-256 is {digest}; the manifest records {weights['sha256']} "
            "(the weights were changed or corrupted)"
        )
    for name in stored.tensors:
        _check_finite(name, stored.array(name))


def _check_finite(name: str, array: np.ndarray) -> None:
    finite = np.isfinite(array)
    if not finite.all():
        where = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise WeightsError(f"{name}: expected finite values; found {array[where]} at index {where}")
