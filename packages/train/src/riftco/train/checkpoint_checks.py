"""What a checkpoint's manifest must hold, checked before anything is built from it.

A manifest's identity is a hash anyone can recompute, so a re-hashed manifest with
wrong field types, a step of 10**12, or a configuration far larger than its
tensors passes the identity check; these checks turn each into a
``CheckpointError`` naming the field, before a model is allocated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from riftco.interchange import ManifestError, WeightsError
from riftco.interchange.layout import check_tensor_count, config_from_dict, expected_shapes
from riftco.train.errors import CheckpointError

#: Largest optimizer step a checkpoint may record (far past any real run).
MAX_STEP = 10**10


def _int_field(where: str, value: Any, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
        shown = value if isinstance(value, (int, float)) else type(value).__name__
        raise CheckpointError(f"{where}: expected an integer in [0, {high}]; found {shown}")
    return value


def _object(where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CheckpointError(f"{where}: expected an object; found {type(value).__name__}")
    return value


def check_manifest_fields(manifest: Mapping[str, Any]) -> None:
    """The types and ranges of the manifest's fields (its keys are already checked)."""
    for name in ("stage", "data_fingerprint"):
        if not isinstance(manifest[name], str):
            raise CheckpointError(
                f"{name}: expected a string; found {type(manifest[name]).__name__}"
            )
    _int_field("step", manifest["step"], MAX_STEP)
    _object("run", manifest["run"])
    state = _object("state", manifest["state"])
    tensors = _object("tensors", manifest["tensors"])
    if set(tensors) != {"sha256", "count", "elements"} or not isinstance(tensors["sha256"], str):
        raise CheckpointError("tensors: expected {sha256 (a string), count, elements}")
    _int_field("tensors.count", tensors["count"], 1 << 20)
    _int_field("tensors.elements", tensors["elements"], 1 << 40)
    optimizer = _object("state.optimizer", state.get("optimizer"))
    entries = _object("state.optimizer.state", optimizer.get("state"))
    for index, entry in entries.items():
        if not (isinstance(index, str) and index.isascii() and index.isdigit() and len(index) < 8):
            raise CheckpointError(f"state.optimizer.state: expected integer keys; found {index!r}")
        _int_field(
            f"state.optimizer.state.{index}.step",
            _object(f"state.optimizer.state.{index}", entry).get("step"),
            MAX_STEP,
        )


def check_config_against_tensors(
    manifest: Mapping[str, Any],
    shapes: Mapping[str, tuple[int, ...]],
    packed_bytes: int = 0,
) -> None:
    """The run's model configuration against the checkpoint's ``model.*`` tensors: it may
    not imply far more tensors, or far more values, than are present (``packed_bytes``
    of NF4 payload count two values each), and each tensor it names that is present
    must have the shape it implies (adapters aside)."""
    config_data = manifest["run"].get("config")
    if config_data is None:
        return
    try:
        config = config_from_dict(config_data)
        check_tensor_count(config, len(shapes))
    except (ManifestError, WeightsError) as exc:
        raise CheckpointError(f"run.{exc}") from None
    weights = {k[len("model.") :]: v for k, v in shapes.items() if k.startswith("model.")}
    expected = expected_shapes(config)
    implied = sum(math.prod(shape) for shape in expected.values())
    present = sum(math.prod(shape) for shape in weights.values()) + 2 * packed_bytes
    if implied > present + 1024:
        raise CheckpointError(
            f"run.config implies {implied} parameter values; the checkpoint holds {present}"
        )
    for name, shape in expected.items():
        found = weights.get(name)
        if found is not None and tuple(found) != shape:
            raise CheckpointError(
                f"model.{name}: the run's configuration implies {list(shape)}; "
                f"the checkpoint holds {list(found)}"
            )


__all__ = ["MAX_STEP", "check_config_against_tensors", "check_manifest_fields"]
