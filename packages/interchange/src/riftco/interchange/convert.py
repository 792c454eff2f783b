"""Conversions between .rift bundles, SafeTensors and Hugging Face directories.

A source is a ``.rift`` bundle or a Hugging Face model directory; every source
is fully validated before anything is written. Converting a bundle to a bundle
keeps its manifest, so the copy has the same ``artifact_id``; a directory
becomes a bundle with stage ``imported`` (unless told otherwise) and its
origin in the metadata.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from riftco.interchange.bundle import read_bundle, write_bundle
from riftco.interchange.errors import ConversionError
from riftco.interchange.huggingface import export_huggingface, import_huggingface
from riftco.interchange.models import huggingface_origin, validate_bundle
from riftco.interchange.safetensors_io import save_safetensors

Target = Literal["rift", "safetensors", "huggingface"]


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    to: Target,
    stage: str | None = None,
) -> Path:
    """Convert ``src`` to format ``to`` at ``dst``; returns ``dst``."""
    src, dst = Path(src), Path(dst)
    if to not in ("rift", "safetensors", "huggingface"):
        raise ConversionError(f"expected --to rift, safetensors or huggingface; found {to!r}")
    if src.is_dir():
        imported = import_huggingface(src)
        config, arrays, tokenizer = imported.model_config, imported.arrays, imported.tokenizer
        assert tokenizer is not None  # import_huggingface requires one by default
        fields = {
            "stage": stage or "imported",
            "parent_id": None,
            "metadata": huggingface_origin(imported.config),
        }
    else:
        bundle = read_bundle(src)
        config, tokenizer = validate_bundle(bundle)
        arrays = bundle.tensors
        fields = {
            "stage": stage or bundle.stage,
            "parent_id": bundle.parent_id,
            "metadata": bundle.metadata,
        }
    if to == "rift":
        write_bundle(dst, config.to_dict(), arrays, tokenizer.to_state(), **fields)
    elif to == "safetensors":
        save_safetensors(dst, arrays)
    else:
        export_huggingface(dst, config, arrays, tokenizer)
    return dst
