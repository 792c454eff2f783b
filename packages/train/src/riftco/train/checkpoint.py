"""``.riftckpt`` training checkpoints: everything an exact resume needs, in one file.

A checkpoint is a safetensors file (written and read with riftco-interchange's
container: atomic writes, bounded reads, no pickle) holding

- tensors ``model.<name>`` (the weights) and ``optimizer.<i>.exp_avg`` /
  ``optimizer.<i>.exp_avg_sq`` (Adam's moments of parameter ``i``), float32, and for a
  model with NF4 layers (QLoRA) their packed payloads ``nf4.<layer>.<part>`` (uint8
  codes and scale bytes, float32 ranges; see ``riftco.train.adapters``);
- under the metadata key ``riftco.checkpoint``, a JSON manifest::

    {"format": "riftco-train/checkpoint", "format_version": 1,
     "checkpoint_id": "<sha256 of the canonical manifest without this key>",
     "stage": "pretraining", "step": 200, "data_fingerprint": "<sha256>",
     "run": {...},      # what rebuilds the run: model config, tokenizer state, options
     "state": {...},    # engine progress, optimizer scalars, batch source position and
                        # generator state, loss moving average, schedule
     "tensors": {"sha256": "<digest of every tensor>", "count": 14, "elements": 123456}}

Reading checks the container, the manifest, the identity and the tensors' digest before
returning anything, so a corrupted or truncated file is refused before any state changes.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riftco.core import JSONError, loads_strict
from riftco.interchange import (
    ContainerError,
    canonical_json,
    content_id,
    read_safetensors,
    tensors_digest,
    write_safetensors,
)
from riftco.train.adapters import PACKED_PREFIX, packed_tensors
from riftco.train.checkpoint_checks import (
    check_config_against_tensors,
    check_manifest_fields,
    check_moment_tensors,
)
from riftco.train.engine import Trainer
from riftco.train.errors import CheckpointError, ResumeMismatch

FORMAT = "riftco-train/checkpoint"
FORMAT_VERSION = 1
METADATA_KEY = "riftco.checkpoint"
SUFFIX = ".riftckpt"
_KEYS = {
    "format",
    "format_version",
    "checkpoint_id",
    "stage",
    "step",
    "data_fingerprint",
    "run",
    "state",
    "tensors",
}
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Checkpoint:
    """A validated checkpoint: its manifest and its tensors (read-only views)."""

    manifest: dict[str, Any]
    tensors: dict[str, np.ndarray] = field(repr=False)
    path: Path | None = None

    @property
    def checkpoint_id(self) -> str:
        return self.manifest["checkpoint_id"]

    @property
    def stage(self) -> str:
        return self.manifest["stage"]

    @property
    def step(self) -> int:
        return self.manifest["step"]

    @property
    def run(self) -> dict[str, Any]:
        """The run's description (model config, tokenizer state, options) as saved."""
        return self.manifest["run"]

    @property
    def data_fingerprint(self) -> str:
        return self.manifest["data_fingerprint"]

    def weights(self) -> dict[str, np.ndarray]:
        return {k[len("model.") :]: v for k, v in self.tensors.items() if k.startswith("model.")}

    def trainer_state(self) -> dict[str, Any]:
        """The trainer's ``state_dict()`` with the optimizer's moments put back."""
        state = copy.deepcopy(self.manifest["state"])
        optimizer = state["optimizer"]
        restored = {}
        for index, entry in optimizer["state"].items():
            i = int(index)
            restored[i] = {
                "step": entry["step"],
                "exp_avg": self.tensors[f"optimizer.{i}.exp_avg"],
                "exp_avg_sq": self.tensors[f"optimizer.{i}.exp_avg_sq"],
            }
        optimizer["state"] = restored
        return state


def save_checkpoint(
    path: str | os.PathLike[str], trainer: Trainer, run: dict[str, Any]
) -> dict[str, Any]:
    """Write ``trainer``'s full state and ``run`` atomically; returns the manifest."""
    state = trainer.state_dict()
    tensors = {f"model.{name}": array for name, array in trainer.weights().items()}
    tensors.update(packed_tensors(trainer.model))
    optimizer = dict(state["optimizer"])
    scalars = {}
    for index, entry in optimizer["state"].items():
        tensors[f"optimizer.{index}.exp_avg"] = np.ascontiguousarray(
            entry["exp_avg"], dtype=np.float32
        )
        tensors[f"optimizer.{index}.exp_avg_sq"] = np.ascontiguousarray(
            entry["exp_avg_sq"], dtype=np.float32
        )
        scalars[str(index)] = {"step": entry["step"]}
    optimizer["state"] = scalars
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "stage": trainer.stage,
        "step": trainer.step,
        "data_fingerprint": trainer.source.fingerprint,
        "run": run,
        "state": {**state, "optimizer": optimizer},
        "tensors": {
            "sha256": tensors_digest(tensors),
            "count": len(tensors),
            "elements": sum(int(a.size) for a in tensors.values()),
        },
    }
    manifest["checkpoint_id"] = content_id(manifest, exclude="checkpoint_id")
    text = canonical_json(manifest).decode("utf-8")
    write_safetensors(path, tensors, {METADATA_KEY: text})
    return manifest


def read_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Open and fully validate a checkpoint; raises ``CheckpointError`` naming the fault."""
    path = Path(path)
    try:
        stored = read_safetensors(path)
    except ContainerError as exc:
        raise CheckpointError(f"{exc} (not a readable {SUFFIX} checkpoint)") from None
    try:
        manifest = _parse_manifest(stored.metadata)
        check_manifest_fields(manifest)
        check_moment_tensors(manifest, set(stored.tensors))
        check_config_against_tensors(
            manifest,
            {name: tuple(info.shape) for name, info in stored.tensors.items()},
            sum(
                info.end - info.begin
                for info in stored.tensors.values()
                if info.name.startswith(PACKED_PREFIX)
            ),
        )
        found = stored.digest()
        expected = manifest["tensors"]
        if len(stored.tensors) != expected["count"] or found != expected["sha256"]:
            raise CheckpointError(
                f"tensors: SHA-256 {found} over {len(stored.tensors)} tensors; the manifest records "
                f"{expected['sha256']} over {expected['count']} (the file was changed or corrupted)"
            )
        for info in stored.tensors.values():
            packed = info.name.startswith(PACKED_PREFIX) and info.dtype == "U8"
            if info.dtype != "F32" and not packed:
                raise CheckpointError(f"{info.name}: expected F32; found {info.dtype}")
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    return Checkpoint(manifest, stored.arrays(), path)


def _parse_manifest(metadata: dict[str, str]) -> dict[str, Any]:
    text = metadata.get(METADATA_KEY)
    if text is None:
        raise CheckpointError(
            f"expected a {METADATA_KEY!r} metadata entry; found keys {sorted(metadata)} "
            "(a .rift bundle or plain safetensors file, not a checkpoint?)"
        )
    try:
        manifest = loads_strict(text)
    except JSONError as exc:
        raise CheckpointError(f"manifest: {exc}") from None
    if not isinstance(manifest, dict):
        raise CheckpointError("manifest: expected a JSON object")
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"format: expected {FORMAT!r}; found {manifest.get('format')!r}")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"format_version: expected {FORMAT_VERSION}; found {manifest.get('format_version')!r}"
        )
    if set(manifest) != _KEYS:
        raise CheckpointError(
            f"manifest: missing keys {sorted(_KEYS - set(manifest))}, "
            f"unexpected keys {sorted(set(manifest) - _KEYS)}"
        )
    claimed, actual = manifest["checkpoint_id"], content_id(manifest, exclude="checkpoint_id")
    if not (isinstance(claimed, str) and _HEX64.fullmatch(claimed)) or claimed != actual:
        raise CheckpointError(
            f"checkpoint_id: the manifest hashes to {actual}; the file claims {claimed!r} "
            "(the manifest was changed after it was written)"
        )
    return manifest


def restore(trainer: Trainer, checkpoint: Checkpoint) -> None:
    """Put ``checkpoint``'s state into ``trainer``; all or nothing.

    Raises ``ResumeMismatch`` (changing nothing) when the checkpoint is of another
    stage, its data fingerprint differs from the trainer's batch source, or its
    weights or optimizer state do not fit.
    """
    if checkpoint.stage != trainer.stage:
        raise ResumeMismatch(
            f"{checkpoint.path}: a {checkpoint.stage} checkpoint; this run is {trainer.stage}"
        )
    if checkpoint.data_fingerprint != trainer.source.fingerprint:
        source = (
            checkpoint.run.get("data", {}).get("source")
            if isinstance(checkpoint.run, dict)
            else None
        )
        trained_on = f" ({source})" if source else ""
        raise ResumeMismatch(
            f"{checkpoint.path}: the checkpoint was written for other data (fingerprint "
            f"{checkpoint.data_fingerprint[:16]}..., this run's data has "
            f"{trainer.source.fingerprint[:16]}...); resume with the data it was trained "
            f"on{trained_on}"
        )
    trainer.load_state_dict(checkpoint.trainer_state(), checkpoint.weights())


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "SUFFIX",
    "Checkpoint",
    "read_checkpoint",
    "restore",
    "save_checkpoint",
]
