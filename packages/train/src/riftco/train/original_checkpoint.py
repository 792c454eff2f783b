"""Continue training from a ``.riftckpt`` the original Riftco Transformer wrote.

The original (``riftco-transformer`` 0.6.1) saves a zip of ``manifest.json`` and
little-endian float32 members: the model's values, the LoRA adapters' values, Adam's
first and second moments and, for QLoRA, its packed NF4 base (``model-nf4.rtnf4``).
:func:`read_original_checkpoint` checks the archive (stored members only, each
within the file and its recorded size and SHA-256, the manifest at most 1 MiB and
strict JSON, the ``checkpoint_id``), then every layout; :func:`continue_original`
builds the ``riftco_v1`` model (float32, LoRA, or NF4 linears plus LoRA) and an
``Adam`` over exactly the parameters the original optimized, with its
hyperparameters, step count and moments, so the next step is the original's next step.

What does not carry over exactly: the arithmetic (the original updates in float64
and rounds to float32; riftco's kernels compute in float32, so values agree to
rounding, not bit for bit), the original's data position and Python random state
(the batches come from this stack's sources), and a QLoRA head: the original packs
the language-model head in NF4 too, riftco keeps heads in float32, so the head holds
the exact dequantized values, frozen (same logits, more memory).
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riftco.interchange import canonical_json, strict_json
from riftco.interchange.original import (
    arrays_from_flat,
    config_from_original,
    our_name,
    parameter_layout,
)
from riftco.interchange.original_exports import original_parameters
from riftco.nn import (
    DecoderOnlyTransformer,
    LanguageModelHead,
    Linear,
    LoraConfig,
    QuantizedLinear,
    attach_lora,
)
from riftco.optim import Adam
from riftco.tensor import NF4Weight
from riftco.tensor.ops.quantized import NF4_BLOCK_SIZES, NF4_CODEBOOK
from riftco.train.errors import CheckpointError

FORMAT = "riftco-transformer-training-checkpoint"
VERSIONS = (1, 2)
MANIFEST_NAME = "manifest.json"
PACKED_MAGIC = b"RTNF4S1\0"
MAX_MANIFEST_BYTES = 1 << 20
_HEADER = struct.Struct(
    "<7QfI"
)  # rank, block, codes, scales, scale codes, seconds, group; offset, flags


@dataclass
class OriginalCheckpoint:
    """A checked original checkpoint, under this stack's parameter names."""

    path: Path
    checkpoint_id: str
    global_step: int
    config: Any
    original_config: dict[str, Any]
    method: str  # full, lora or qlora
    weights: dict[str, np.ndarray] = field(repr=False)
    packed: dict[str, NF4Weight] = field(repr=False)
    lora: dict[str, Any] | None
    adapters: dict[str, np.ndarray] = field(repr=False)
    optimizer: dict[str, Any]
    moments: dict[str, tuple[np.ndarray, np.ndarray]] = field(repr=False)
    metadata: dict[str, Any]


@dataclass
class Continuation:
    """A model and an ``Adam`` that carry on where the original stopped."""

    model: DecoderOnlyTransformer
    optimizer: Adam
    parameters: list[str]
    step: int


def read_original_checkpoint(path: str | os.PathLike[str]) -> OriginalCheckpoint:
    """Read and check an original ``.riftckpt`` (format versions 1 and 2)."""
    path = Path(path)
    try:
        members, manifest = _read_archive(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, OSError) as exc:
        raise CheckpointError(f"{path}: expected an original .riftckpt (a zip); {exc}") from None
    return _parse(path, manifest, members)


def continue_original(checkpoint: OriginalCheckpoint, backend: Any = None) -> Continuation:
    """The model and optimizer of ``checkpoint``, ready for its next step."""
    model = DecoderOnlyTransformer(checkpoint.config, backend=backend)
    arrays = dict(checkpoint.weights)
    for name, weight in checkpoint.packed.items():
        arrays[f"{name}.weight"] = np.asarray(weight.dequantize().numpy(), dtype=np.float32)
    model.load_state_dict(arrays, strict=True)
    for name, weight in checkpoint.packed.items():
        module = dict(model.named_modules())[name]
        assert isinstance(module, (Linear, LanguageModelHead))  # the layers NF4 packs
        if name == "language_model_head":
            module.weight.requires_grad = False  # dequantized exactly; riftco keeps heads float32
            continue
        layer = QuantizedLinear(weight.to(module.weight.value.backend), module.bias)
        model.replace_child(name, layer)
    if checkpoint.lora is not None:
        attach_lora(model, LoraConfig(**checkpoint.lora))
        from riftco.nn.lora import load_lora_state_dict

        load_lora_state_dict(model, checkpoint.adapters)
    named = dict(model.named_parameters())
    order = list(checkpoint.moments)
    missing = [n for n in order if n not in named]
    if missing:
        raise CheckpointError(
            f"{checkpoint.path}: optimized parameters not in the model: {missing[:4]}"
        )
    options = checkpoint.optimizer
    optimizer = Adam(
        [named[n] for n in order],
        lr=options["learning_rate"],
        betas=(options["beta1"], options["beta2"]),
        eps=options["epsilon"],
        max_grad_norm=options["maximum_gradient_norm"],
        paged=options["state_storage"] == "paged",
        page_size=options["page_size"],
    )
    state = optimizer.state_dict()
    step = options["step_count"]
    state["step"] = step
    state["state"] = {
        i: {"step": step, "exp_avg": m, "exp_avg_sq": v}
        for i, (m, v) in enumerate(checkpoint.moments[n] for n in order)
    }
    if step:
        optimizer.load_state_dict(state)
    model.train(True)
    return Continuation(model, optimizer, order, checkpoint.global_step)


# -- the archive ---------------------------------------------------------------------


def _read_archive(path: Path) -> tuple[dict[str, bytes], dict[str, Any]]:
    size = path.stat().st_size
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
        if not infos or infos[0].filename != MANIFEST_NAME or len(infos) > 8:
            raise CheckpointError(f"{path}: expected manifest.json first and at most 8 members")
        for info in infos:
            if info.compress_type != zipfile.ZIP_STORED:
                raise CheckpointError(f"{path}: {info.filename}: expected a stored member")
            if info.header_offset + info.file_size > size:
                raise CheckpointError(
                    f"{path}: truncated: {info.filename} runs past the file's end"
                )
        if infos[0].file_size > MAX_MANIFEST_BYTES:
            raise CheckpointError(
                f"{path}: manifest.json: expected at most {MAX_MANIFEST_BYTES} bytes"
            )
        manifest = strict_json(archive.read(infos[0]), f"{path}: manifest.json", CheckpointError)
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise CheckpointError(f"{path}: expected format {FORMAT!r}")
        if manifest.get("format_version") not in VERSIONS:
            raise CheckpointError(
                f"{path}: expected format_version 1 or 2; found {manifest.get('format_version')!r}"
            )
        recorded = manifest.get("members")
        names = [info.filename for info in infos[1:]]
        if not isinstance(recorded, dict) or sorted(recorded) != sorted(names):
            raise CheckpointError(f"{path}: the members {names} differ from the manifest's")
        members = {}
        for info in infos[1:]:
            entry = recorded[info.filename]
            if not isinstance(entry, dict) or entry.get("size") != info.file_size:
                raise CheckpointError(f"{path}: {info.filename}: size differs from the manifest's")
            payload = archive.read(info)
            digest = hashlib.sha256(payload).hexdigest()
            if digest != entry.get("sha256"):
                raise CheckpointError(
                    f"{path}: {info.filename}: SHA-256 is {digest}; the manifest records "
                    f"{entry.get('sha256')!r}"
                )
            members[info.filename] = payload
    body = {k: v for k, v in manifest.items() if k != "checkpoint_id"}
    identity = hashlib.sha256(canonical_json(body)).hexdigest()
    if identity != manifest.get("checkpoint_id"):
        raise CheckpointError(
            f"{path}: checkpoint_id: the manifest hashes to {identity}; the file claims "
            f"{manifest.get('checkpoint_id')!r}"
        )
    return members, manifest


def _parse(path: Path, manifest: dict[str, Any], members: dict[str, bytes]) -> OriginalCheckpoint:
    where = f"{path}: manifest.json"
    try:
        model, optimizer = manifest["model"], manifest["optimizer"]
        config, original_config = config_from_original(model["config"], f"{where}.model.config")
        layout = parameter_layout(model["parameters"], f"{where}.model.parameters")
        weights = _flat(members, model["values_file"], layout, str(path))
        packed: dict[str, NF4Weight] = {}
        packed_file = model.get("packed_state_file") or (
            "model-nf4.rtnf4" if model["quantized"] else None
        )
        if bool(model["quantized"]) != (packed_file is not None):
            raise CheckpointError(f"{where}: model.quantized disagrees with packed_state_file")
        expected = {our_name(n): s for n, s in original_parameters(config)}
        if packed_file is not None:
            absent = [n for n in expected if n not in weights]
            packed = _packed(members.get(packed_file), absent, expected, f"{path}: {packed_file}")
        elif set(weights) != set(expected):
            raise CheckpointError(f"{where}: the model's parameters are not those of its config")
        lora = model["lora"]
        adapters: dict[str, np.ndarray] = {}
        if lora is not None:
            lora = {
                "rank": int(lora["rank"]),
                "alpha": float(lora["alpha"]),
                "targets": tuple(lora["targets"]),
            }
            adapter_layout = parameter_layout(
                model["adapter_parameters"], f"{where}.adapter_parameters"
            )
            adapters = _flat(members, model["adapter_values_file"], adapter_layout, str(path))
        else:
            adapter_layout = []
        scope = optimizer["scope"]
        if optimizer["type"] != "adam" or scope not in ("model", "adapter"):
            raise CheckpointError(f"{where}: expected an adam optimizer over the model or adapters")
        scoped = layout if scope == "model" else adapter_layout
        first = _flat(members, optimizer["first_moments_file"], scoped, str(path))
        second = _flat(members, optimizer["second_moments_file"], scoped, str(path))
        options = dict(optimizer["options"])
        for key in ("learning_rate", "beta1", "beta2", "epsilon", "maximum_gradient_norm"):
            value = options[key]
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise CheckpointError(f"{where}: optimizer.options.{key}: expected a finite number")
        page = options["page_size"]
        if (
            options["state_storage"] not in ("contiguous", "paged")
            or not isinstance(page, int)
            or page < 1
        ):
            raise CheckpointError(f"{where}: optimizer.options: unknown state storage or page size")
        step = optimizer["step_count"]
        if not isinstance(step, int) or step < 0 or not isinstance(manifest["global_step"], int):
            raise CheckpointError(f"{where}: step counts must be non-negative integers")
        options["step_count"] = step
        method = "full" if lora is None else ("qlora" if packed else "lora")
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"{where}: {type(exc).__name__}: {exc}") from None
    return OriginalCheckpoint(
        path=path,
        checkpoint_id=manifest["checkpoint_id"],
        global_step=manifest["global_step"],
        config=config,
        original_config=original_config,
        method=method,
        weights=weights,
        packed=packed,
        lora=lora,
        adapters=adapters,
        optimizer=options,
        moments={name: (first[name], second[name]) for name in first},
        metadata=manifest.get("metadata") or {},
    )


def _flat(members: dict[str, bytes], name: Any, layout: list, where: str) -> dict[str, np.ndarray]:
    payload = members.get(name) if isinstance(name, str) else None
    count = sum(n for _, _, _, n in layout)
    if payload is None or len(payload) != 4 * count:
        found = "missing" if payload is None else f"{len(payload)} bytes"
        raise CheckpointError(f"{where}: {name}: expected {4 * count} bytes; found {found}")
    return arrays_from_flat(layout, np.frombuffer(payload, "<f4"), where)


# -- the packed NF4 base ---------------------------------------------------------------


def _packed(
    payload: bytes | None, names: list[str], shapes: dict[str, tuple[int, ...]], where: str
) -> dict[str, NF4Weight]:
    """The original's packed NF4 state (magic ``RTNF4S1\\0``, a weight count, then per
    weight a fixed header, its dimensions, codes, float32 scales or uint8 scale codes
    and float32 second-level scales), one weight per quantized parameter in order."""
    if payload is None or payload[:8] != PACKED_MAGIC or len(payload) < 16:
        raise CheckpointError(f"{where}: expected the packed NF4 state (magic RTNF4S1)")
    (count,) = struct.unpack_from("<Q", payload, 8)
    if count != len(names):
        raise CheckpointError(f"{where}: expected {len(names)} packed weights; found {count}")
    offset, out = 16, {}
    for name in names:
        if offset + _HEADER.size > len(payload):
            raise CheckpointError(f"{where}: truncated at the header of {name}")
        rank, block, n_codes, n_scales, n_scale_codes, n_seconds, group, base, flags = (
            _HEADER.unpack_from(payload, offset)
        )
        offset += _HEADER.size
        need = 8 * rank + n_codes + 4 * n_scales + n_scale_codes + 4 * n_seconds
        if rank != 2 or flags > 1 or offset + need > len(payload):
            raise CheckpointError(f"{where}: {name}: malformed or truncated packed weight")
        shape = struct.unpack_from("<2Q", payload, offset)
        offset += 16
        n = math.prod(shape)
        blocks = -(-n // block) if block else 0
        if (
            tuple(shape) != tuple(shapes[name])
            or block not in NF4_BLOCK_SIZES
            or n_codes != -(-n // 2)
        ):
            raise CheckpointError(
                f"{where}: {name}: shape {shape} block {block} does not fit {shapes[name]}"
            )
        codes = np.frombuffer(payload, np.uint8, n_codes, offset)
        offset += n_codes
        if flags == 0:
            if n_scales != blocks or n_scale_codes or n_seconds or group:
                raise CheckpointError(f"{where}: {name}: inconsistent NF4 scales")
            scales = np.frombuffer(payload, "<f4", n_scales, offset).astype(np.float32)
            offset += 4 * n_scales
        else:
            if n_scales or n_scale_codes != blocks or not group or n_seconds != -(-blocks // group):
                raise CheckpointError(f"{where}: {name}: inconsistent double-quantized NF4 scales")
            scale_codes = np.frombuffer(payload, np.uint8, n_scale_codes, offset)
            offset += n_scale_codes
            seconds = np.frombuffer(payload, "<f4", n_seconds, offset).astype(np.float32)
            offset += 4 * n_seconds
            scales = _block_scales(scale_codes, seconds, group, np.float32(base))
        if not np.isfinite(scales).all() or (scales < 0).any():
            raise CheckpointError(f"{where}: {name}: NF4 scales must be finite and non-negative")
        weight = NF4Weight.from_arrays(
            {"codes": codes.copy(), "absmax": scales}, tuple(shape), block
        )
        out[name[: -len(".weight")]] = weight
    if offset != len(payload):
        raise CheckpointError(f"{where}: {len(payload) - offset} trailing bytes")
    assert len(NF4_CODEBOOK) == 16
    return out


def _block_scales(
    codes: np.ndarray, seconds: np.ndarray, group: int, base: np.float32
) -> np.ndarray:
    """Block scales as the original decodes them, in float32 in its order:
    ``clamp(offset + second[b // group] * ((code - 128) / 127), 0, FLT_MAX)``."""
    factor = (codes.astype(np.int32) - 128).astype(np.float32) / np.float32(127.0)
    delta = seconds[np.arange(codes.size) // group] * factor
    with np.errstate(over="ignore"):
        scale = base + delta
    return np.clip(np.nan_to_num(scale, posinf=float(np.finfo(np.float32).max)), 0, None).astype(
        np.float32
    )
