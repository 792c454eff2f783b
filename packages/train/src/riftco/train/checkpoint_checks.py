"""What a checkpoint's manifest must hold, checked before anything is built from it.

A manifest's identity is a hash anyone can recompute, so a re-hashed manifest with
wrong field types, a step of 10**12, or a configuration far larger than its
tensors passes the identity check; these checks turn each into a
``CheckpointError`` naming the field, before a model is allocated.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from riftco.core import RiftcoError
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
    check_engine_state(manifest)


def _number(where: str, value: Any, low: float, high: float) -> float:
    """A finite JSON number in ``[low, high]`` (not a boolean, not a string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheckpointError(f"{where}: expected a number; found {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise CheckpointError(f"{where}: expected a finite number; found a huge integer") from None
    if not (math.isfinite(number) and low <= number <= high):
        raise CheckpointError(f"{where}: expected a number in [{low}, {high}]; found {value!r}")
    return number


def check_engine_state(manifest: Mapping[str, Any]) -> None:
    """``state.engine``, what the trainer restores itself from: its counters are integers
    in range and agree with each other (the step is the manifest's, at most the run's
    total, the evaluation and the optimizer no later than it), its moving average and
    dropout counters have their types."""
    state = manifest["state"]
    unexpected = sorted(set(state) - {"engine", "optimizer", "source"})
    if unexpected:
        raise CheckpointError(f"state: expected engine, optimizer, source; found {unexpected}")
    engine = _object("state.engine", state.get("engine"))
    _object("state.source", state.get("source"))
    total = _int_field("state.engine.total_steps", engine.get("total_steps"), MAX_STEP)
    step = _int_field("state.engine.step", engine.get("step"), total)
    if step != manifest["step"]:
        raise CheckpointError(
            f"state.engine.step: expected the manifest's step {manifest['step']}; found {step}"
        )
    _int_field("state.engine.tokens", engine.get("tokens"), 1 << 62)
    _number("state.engine.seconds", engine.get("seconds"), 0.0, 1e12)
    evaluated = engine.get("evaluated_at")
    if evaluated is not None:
        _int_field("state.engine.evaluated_at", evaluated, step)
    average = _object("state.engine.moving_average", engine.get("moving_average"))
    if set(average) != {"decay", "value", "count"}:
        raise CheckpointError(
            "state.engine.moving_average: expected keys count, decay, value; found "
            f"{sorted(average)}"
        )
    if _number("state.engine.moving_average.decay", average["decay"], 0.0, 1.0) == 1.0:
        raise CheckpointError("state.engine.moving_average.decay: expected below 1; found 1")
    _number("state.engine.moving_average.value", average["value"], -1e300, 1e300)
    _int_field("state.engine.moving_average.count", average["count"], step)
    _object("state.engine.schedule", engine.get("schedule"))
    dropout = _object("state.engine.dropout", engine.get("dropout", {}))
    for name, calls in dropout.items():
        _int_field(f"state.engine.dropout.{name}", calls, 1 << 62)
    optimizer = state["optimizer"]
    _int_field("state.optimizer.step", optimizer.get("step"), step)
    for index, entry in optimizer["state"].items():
        _int_field(f"state.optimizer.state.{index}.step", entry["step"], step)


def check_moment_tensors(manifest: Mapping[str, Any], names: set[str]) -> None:
    """Each optimizer entry of the manifest has both of Adam's moments among ``names``,
    and no moment is there without an entry."""
    entries = manifest["state"]["optimizer"]["state"]
    expected = {f"optimizer.{int(i)}.{kind}" for i in entries for kind in ("exp_avg", "exp_avg_sq")}
    found = {name for name in names if name.startswith("optimizer.")}
    if found != expected:
        missing, extra = sorted(expected - found), sorted(found - expected)
        raise CheckpointError(
            f"optimizer moments: expected one exp_avg and one exp_avg_sq per entry of "
            f"state.optimizer.state; missing {missing[:4]}, unexpected {extra[:4]}"
        )


#: The options class each stage's ``run.options`` rebuilds, and the options that take
#: one of a fixed set of values (module, attribute), imported when a resume reads them.
_STAGE_OPTIONS = {
    "pretraining": ("riftco.train.pretraining", "PretrainOptions"),
    "post_training": ("riftco.train.post_training", "PostTrainOptions"),
}
_CHOICES = {
    "pretraining": {"windows": ("riftco.train.pretraining", "WINDOWS")},
    "post_training": {
        "loss_on": ("riftco.train.tokens", "LOSS_ON"),
        "overlong": ("riftco.train.tokens", "OVERLONG"),
    },
}
#: Integers a run's options may hold (sizes, counts and seeds are far below this).
MAX_OPTION_INT = 1 << 53


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check_option(where: str, hint: Any, value: Any) -> None:
    """``value`` (parsed JSON) against a dataclass field's type ``hint``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return
        others = [a for a in args if a is not type(None)]
        if len(others) == 1:
            _check_option(where, others[0], value)
            return
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        _check_options(where, hint, value)
    elif hint is bool:
        if not isinstance(value, bool):
            raise CheckpointError(f"{where}: expected true or false; found {_type_name(value)}")
    elif hint is int:
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_OPTION_INT:
            shown = (
                repr(value) if isinstance(value, int) and abs(value) < 10**20 else _type_name(value)
            )
            raise CheckpointError(
                f"{where}: expected an integer of magnitude at most 2**53; found {shown}"
            )
    elif hint is float:
        _number(where, value, -1e300, 1e300)
    elif hint is str:
        if not isinstance(value, str):
            raise CheckpointError(f"{where}: expected a string; found {_type_name(value)}")
    elif origin is tuple and args[-1:] == (Ellipsis,):
        if not isinstance(value, list) or len(value) > 1024:
            raise CheckpointError(
                f"{where}: expected a list (of at most 1024); found {_type_name(value)}"
            )
        for k, item in enumerate(value):
            _check_option(f"{where}[{k}]", args[0], item)
    else:  # a type this checker does not know: refuse rather than pass it unchecked
        raise CheckpointError(f"{where}: cannot check an option of type {hint!r}")


def _check_options(where: str, cls: type, data: Any) -> None:
    fields = {f.name for f in dataclasses.fields(cls)}
    given = _object(where, data)
    unknown = sorted(k for k in given if k not in fields)
    if unknown:
        raise CheckpointError(
            f"{where}: unknown option(s) {[str(k)[:40] for k in unknown[:5]]}; expected some of "
            f"{sorted(fields)}"
        )
    hints = typing.get_type_hints(cls)
    for name, value in given.items():
        _check_option(f"{where}.{name}", hints[name], value)


def check_run(manifest: Mapping[str, Any]) -> Any:
    """What a resume rebuilds from ``run``, before anything is built: ``run.options`` of
    the stage's options class (known keys, each of its type and within its set of
    values), ``run.config`` and ``run.tokenizer`` objects, and the engine's counters
    against those options (``state.engine.total_steps`` is the options' ``steps``).
    Returns the options."""
    stage = manifest["stage"]
    if stage not in _STAGE_OPTIONS:
        raise CheckpointError(
            f"stage: expected one of {sorted(_STAGE_OPTIONS)} to resume; found {stage[:40]!r}"
        )
    run = manifest["run"]
    for key in ("options", "config", "tokenizer"):
        if key not in run:
            raise CheckpointError(f"run: expected key {key!r}; found keys {sorted(run)[:10]}")
        _object(f"run.{key}", run[key])
    if stage == "post_training" and not (
        run.get("parent_id") is None or isinstance(run.get("parent_id"), str)
    ):
        raise CheckpointError(
            f"run.parent_id: expected a string or null; found {_type_name(run['parent_id'])}"
        )
    module, name = _STAGE_OPTIONS[stage]
    cls = getattr(importlib.import_module(module), name)
    _check_options("run.options", cls, run["options"])
    for key, (where, attribute) in _CHOICES[stage].items():
        allowed = getattr(importlib.import_module(where), attribute)
        value = run["options"].get(key, allowed[0])
        if value not in allowed:
            raise CheckpointError(
                f"run.options.{key}: expected one of {list(allowed)}; found {value!r}"[:300]
            )
    try:
        options = cls.from_dict(run["options"])
    except (ValueError, TypeError, RiftcoError) as exc:
        raise CheckpointError(f"run.options: {exc}"[:400]) from None
    from riftco.nn import TransformerConfig
    from riftco.text import TokenizerError, tokenizer_from_state

    try:
        TransformerConfig.from_dict(run["config"])
    except (ValueError, TypeError, RiftcoError) as exc:
        raise CheckpointError(f"run.config: {exc}"[:400]) from None
    try:
        tokenizer_from_state(run["tokenizer"])
    except (TokenizerError, ValueError, TypeError) as exc:
        raise CheckpointError(f"run.tokenizer: {exc}"[:400]) from None
    engine = manifest["state"]["engine"]
    if engine["total_steps"] != options.training.steps:
        raise CheckpointError(
            f"state.engine.total_steps: expected run.options.training.steps "
            f"({options.training.steps}); found {engine['total_steps']}"
        )
    return options


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


__all__ = [
    "MAX_STEP",
    "check_config_against_tensors",
    "check_engine_state",
    "check_manifest_fields",
    "check_moment_tensors",
    "check_run",
]
