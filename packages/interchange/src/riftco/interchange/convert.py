"""Conversions between .rift bundles, SafeTensors, Hugging Face directories, GGUF and ONNX.

A source is a ``.rift`` bundle, a Hugging Face model directory, a GGUF file
(recognised by its magic number), an ONNX file riftco exported (``.onnx`` with
its sidecar) or a plain ``.safetensors`` file with its config
(`riftco.interchange.plain_safetensors`); every source is fully validated before anything is written.
Converting a bundle to a bundle keeps its manifest, so the copy has the same
``artifact_id``; any other source becomes a bundle with stage ``imported``
(unless told otherwise), its origin in the metadata and, when the file records
the bundle it came from, that bundle as its parent. GGUF and ONNX exports record
the source bundle's lineage.

Files the original riftco-transformer wrote (its ``.rift`` v1 bundle, Hugging
Face-style directory, GGUF file and ONNX export, recognised by content) convert
too: the bundle keeps the original's stage, has the original artifact as its
parent, and records the original lineage under ``metadata["riftco_transformer"]``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from riftco.interchange.bundle import _check_finite, read_bundle, write_bundle
from riftco.interchange.container import read_safetensors
from riftco.interchange.errors import BundleError, ConversionError, InterchangeError
from riftco.interchange.gguf_export import export_gguf
from riftco.interchange.gguf_file import is_gguf
from riftco.interchange.gguf_import import import_gguf
from riftco.interchange.huggingface import export_huggingface, import_huggingface
from riftco.interchange.layout import check_shapes
from riftco.interchange.lineage import lineage_of
from riftco.interchange.manifest import MANIFEST_KEY
from riftco.interchange.models import _check_tokenizer_fits, huggingface_origin, validate_bundle
from riftco.interchange.onnx_export import export_onnx
from riftco.interchange.onnx_import import import_onnx
from riftco.interchange.original_exports import original_kind, read_original
from riftco.interchange.plain_safetensors import import_plain_safetensors
from riftco.interchange.quantization import check_keep_float
from riftco.interchange.runnable_files import (
    OriginalCheckpointError,
    how_to_continue,
    original_checkpoint_summary,
)
from riftco.interchange.safetensors_io import save_safetensors
from riftco.nn import TransformerConfig
from riftco.text import Tokenizer

Target = Literal["rift", "safetensors", "huggingface", "gguf", "onnx"]
TARGETS = ("rift", "safetensors", "huggingface", "gguf", "onnx")


def is_bundle_file(path: Path) -> bool:
    """Whether ``path`` (a safetensors file) carries a riftco manifest."""
    return MANIFEST_KEY in read_safetensors(path).metadata


@dataclass
class _Source:
    """What a conversion reads: the model's configuration and arrays, its tokenizer,
    the bundle fields a ``.rift`` target gets and the lineage an export records."""

    config: TransformerConfig
    arrays: Mapping[str, Any]
    tokenizer: Tokenizer | None
    fields: dict[str, Any]
    lineage: dict[str, Any] = field(default_factory=dict)


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    to: Target,
    stage: str | None = None,
    dtype: Literal["f32", "f16", "q8_0", "q4_0"] = "f32",
    allow_tokenizer_mismatch: bool = False,
    config_source: str | os.PathLike[str] | None = None,
    tokenizer_source: str | os.PathLike[str] | None = None,
    keep_float: Iterable[str] | None = None,
) -> Path:
    """Convert ``src`` to format ``to`` at ``dst``; returns ``dst``.

    ``dtype`` (``f32``, ``f16``, ``q8_0`` or ``q4_0``), ``keep_float`` (the matrices a
    quantized ``dtype`` leaves float32: ``token_embd``, ``output``; see
    riftco.interchange.quantization) and ``allow_tokenizer_mismatch`` apply to GGUF;
    ``config_source`` and ``tokenizer_source`` to a plain ``.safetensors`` source."""
    src, dst = Path(src), Path(dst)
    if to not in TARGETS:
        raise ConversionError(f"expected --to {', '.join(TARGETS)}; found {to!r}")
    if dtype != "f32" and to != "gguf":
        raise ConversionError(f"dtype {dtype!r} applies to GGUF only; found --to {to}")
    keep = check_keep_float(keep_float)
    if keep and dtype == "f32":
        raise ConversionError(
            f"keep_float applies to a quantized GGUF dtype (f16, q8_0, q4_0); found {dtype!r}"
        )
    try:
        source = _read_source(src, to, stage, config_source, tokenizer_source)
        check_fits(src, source.config, source.arrays, source.tokenizer)
    except InterchangeError as exc:
        raise type(exc)(f"{exc}; nothing was written") from None
    _write(dst, to, source, dtype, allow_tokenizer_mismatch, keep)
    return dst


def _read_source(
    src: Path,
    to: Target,
    stage: str | None,
    config_source: str | os.PathLike[str] | None,
    tokenizer_source: str | os.PathLike[str] | None,
) -> _Source:
    """``src`` read by the importer its content calls for."""
    if original_checkpoint_summary(src) is not None:
        raise OriginalCheckpointError(how_to_continue(src))
    original = original_kind(src)
    if original is not None:
        imported_original = read_original(src, original)
        fields = imported_original.origin()
        if stage:
            fields["stage"] = stage
        lineage = {
            "artifact_id": imported_original.artifact_id,
            "stage": imported_original.stage,
            "parent_id": imported_original.parent_artifact_id,
        }
        return _Source(
            imported_original.config,
            imported_original.arrays,
            imported_original.tokenizer,
            fields,
            lineage,
        )
    if src.is_file() and (is_gguf(src) or src.suffix == ".onnx"):
        imported = import_gguf(src) if is_gguf(src) else import_onnx(src)
        if imported.tokenizer is None:
            raise ConversionError(f"{src}: holds no tokenizer")
        fields = dict(imported.origin(), stage=stage or "imported")
        return _Source(
            imported.model_config, imported.arrays, imported.tokenizer, fields, imported.lineage
        )
    if src.is_file() and src.suffix == ".safetensors" and not is_bundle_file(src):
        plain = import_plain_safetensors(src, config_source, tokenizer_source)
        if plain.tokenizer is None and to != "safetensors":
            raise ConversionError(
                f"{src}: --to {to} needs a tokenizer: put tokenizer.json beside the file "
                "or name one (a .rift bundle, a tokenizer.json or its folder)"
            )
        fields = dict(plain.origin(src), stage=stage or "imported")
        return _Source(plain.model_config, plain.arrays, plain.tokenizer, fields)
    if src.is_dir():
        hf = import_huggingface(src)
        assert hf.tokenizer is not None  # import_huggingface requires one by default
        fields = {
            "stage": stage or "imported",
            "parent_id": None,
            "metadata": huggingface_origin(hf.config),
        }
        return _Source(hf.model_config, hf.arrays, hf.tokenizer, fields)
    bundle = read_bundle(src)
    config, tokenizer = validate_bundle(bundle)
    fields = {
        "stage": stage or bundle.stage,
        "parent_id": bundle.parent_id,
        "metadata": bundle.metadata,
    }
    return _Source(config, bundle.tensors, tokenizer, fields, lineage_of(bundle.manifest))


def check_fits(
    src: Path,
    config: TransformerConfig,
    arrays: Mapping[str, Any],
    tokenizer: Tokenizer | None,
) -> None:
    """What a target's own loader would refuse, refused before a byte is written: the
    tensors against the configuration, the tokenizer against the vocabulary, every
    float tensor finite. ``riftco inspect`` makes the same checks."""
    try:
        check_shapes(config, {name: tuple(a.shape) for name, a in arrays.items()})
        if tokenizer is not None:
            _check_tokenizer_fits(tokenizer, config)
        for name, array in arrays.items():
            _check_finite(name, array)
    except BundleError as exc:
        raise ConversionError(f"{src}: {exc}") from None


def _write(
    dst: Path,
    to: Target,
    source: _Source,
    dtype: Literal["f32", "f16", "q8_0", "q4_0"],
    allow_tokenizer_mismatch: bool,
    keep: frozenset[str] = frozenset(),
) -> None:
    config, arrays, tokenizer, lineage = (
        source.config,
        source.arrays,
        source.tokenizer,
        source.lineage,
    )
    if to == "safetensors":
        save_safetensors(dst, arrays)
        return
    assert tokenizer is not None
    if to == "rift":
        write_bundle(dst, config.to_dict(), arrays, tokenizer.to_state(), **source.fields)
    elif to == "huggingface":
        export_huggingface(dst, config, arrays, tokenizer)
    elif to == "gguf":
        export_gguf(
            dst,
            config,
            arrays,
            tokenizer,
            dtype,
            lineage,
            allow_tokenizer_mismatch,
            keep_float=keep,
        )
    else:
        export_onnx(dst, config, arrays, tokenizer, lineage)
