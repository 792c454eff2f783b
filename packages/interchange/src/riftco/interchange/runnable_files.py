"""The files ``riftco generate`` (and ``riftco inspect``) take, told apart by content.

:func:`open_runnable` loads what runs: a ``.rift`` bundle (or a model file of the
original riftco-transformer, see :func:`~riftco.interchange.models.load_bundle`), or
a GGUF file (llama.cpp's ``gpt2`` or ``llama``), which runs on its own stored
Q8_0 / Q4_0 / F16 blocks unless ``weights`` asks for float32 or another type. A
training checkpoint of the original riftco-transformer 0.6.1 (a ``.riftckpt`` zip
whose ``manifest.json`` says ``riftco-transformer-training-checkpoint``) holds no
tokenizer and is not a model file: :func:`original_checkpoint_summary` reads what it
is, and opening it raises :class:`OriginalCheckpointError` saying how to carry on.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from riftco.interchange.errors import ConversionError
from riftco.interchange.runnable import RunnableModel

#: The ``format`` of the original's training checkpoints.
ORIGINAL_CHECKPOINT_FORMAT = "riftco-transformer-training-checkpoint"
_MAX_MANIFEST_BYTES = 1 << 20
#: The weights ``open_runnable`` takes (None: float32 for a bundle, stored for GGUF).
WEIGHTS = ("float32", "stored", "f16", "q8_0", "q4_0")


class OriginalCheckpointError(ConversionError):
    """A training checkpoint of the original riftco-transformer where a model file was
    expected."""


def original_checkpoint_summary(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What an original ``.riftckpt`` says about itself (format version, step, method,
    identity, model configuration), from its manifest alone; None for any other file.
    The manifest is read only when it is the first member, stored or deflated, at most
    1 MiB, and strict JSON."""
    from riftco.interchange.container import strict_json
    from riftco.interchange.original import is_original_bundle

    path = Path(path)
    if not path.is_file() or not is_original_bundle(path):
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            info = archive.infolist()[0]
            if info.file_size > _MAX_MANIFEST_BYTES:
                return None
            with archive.open(info) as handle:
                raw = handle.read(_MAX_MANIFEST_BYTES + 1)
            members = [i.filename for i in archive.infolist()]
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError):
        return None
    if len(raw) > _MAX_MANIFEST_BYTES:
        return None
    try:
        manifest = strict_json(raw, f"{path}: manifest.json", ConversionError)
    except ConversionError:
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != ORIGINAL_CHECKPOINT_FORMAT:
        return None
    found = manifest.get("model")
    model: dict[str, Any] = found if isinstance(found, dict) else {}
    return {
        "format": f"{ORIGINAL_CHECKPOINT_FORMAT} v{manifest.get('format_version')}",
        "checkpoint_id": manifest.get("checkpoint_id"),
        "global_step": manifest.get("global_step"),
        "members": members,
        "model": {k: v for k, v in model.items() if not isinstance(v, (dict, list))},
    }


def how_to_continue(path: str | os.PathLike[str]) -> str:
    """What to do with an original training checkpoint instead of loading it as a model."""
    return (
        f"{path} is a training checkpoint of the original riftco-transformer 0.6.1 "
        f"(format {ORIGINAL_CHECKPOINT_FORMAT}), not a model file, and it holds no "
        "tokenizer. Continue its run with riftco.train.read_original_checkpoint(path) and "
        "continue_original(...); to convert it, save that model with the tokenizer of the "
        "original .rift bundle the run started from as a bundle "
        "(RunnableModel(continue_original(...).model, load_bundle(original).tokenizer)"
        ".save('model.rift')), which riftco generate, convert and inspect take"
    )


def open_runnable(
    path: str | os.PathLike[str],
    backend: Any = None,
    weights: str | None = None,
    keep_float: Iterable[str] | None = None,
) -> RunnableModel:
    """The model at ``path`` ready to generate, its linear weights as ``weights``:
    ``float32``, ``stored`` (a GGUF file's own blocks; the default for GGUF), or
    ``f16`` / ``q8_0`` / ``q4_0`` quantized in process by
    :func:`~riftco.interchange.quantization.quantize_model` (riftco-nn's
    ``quantize_for_inference``; ``keep_float`` as there)."""
    from riftco.interchange.gguf_file import is_gguf
    from riftco.interchange.gguf_import import import_gguf_model
    from riftco.interchange.models import load_bundle
    from riftco.interchange.quantization import check_keep_float, quantize_model

    if weights is not None and weights not in WEIGHTS:
        raise ConversionError(f"weights: expected one of {WEIGHTS}; found {weights!r}")
    keep = check_keep_float(keep_float)
    gguf = is_gguf(path)
    if weights == "stored" and not gguf:
        raise ConversionError(
            f"{path}: weights 'stored' runs a GGUF file's own blocks; this is not a GGUF file"
        )
    if keep and weights not in ("f16", "q8_0", "q4_0"):
        raise ConversionError(
            "keep_float applies to in-process quantization (weights f16, q8_0 or q4_0); "
            f"found weights {weights!r}"
        )
    if original_checkpoint_summary(path) is not None:
        raise OriginalCheckpointError(how_to_continue(path))
    if gguf:
        stored = "stored" if weights in (None, "stored") else "float32"
        runnable = import_gguf_model(path, backend=backend, weights=stored)
    else:
        runnable = load_bundle(path, backend=backend)
    if weights in ("f16", "q8_0", "q4_0"):
        quantize_model(runnable.model, weights, keep)
    return runnable


__all__ = [
    "ORIGINAL_CHECKPOINT_FORMAT",
    "WEIGHTS",
    "OriginalCheckpointError",
    "how_to_continue",
    "open_runnable",
    "original_checkpoint_summary",
]
