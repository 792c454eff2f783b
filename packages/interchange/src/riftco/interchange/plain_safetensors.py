"""A plain ``.safetensors`` weights file as a conversion source, with its config.

The config is ``config.json`` beside the file unless named. A Hugging Face config
(``model_type`` gpt2 or llama) reads the file under transformers' tensor names; any
other JSON object is a riftco `TransformerConfig` (what ``riftco inspect --json``
shows as ``config``) and the file holds riftco's names (what ``--to safetensors``
writes). The tokenizer is the one named (a ``.rift`` bundle, a ``tokenizer.json`` or
a folder holding one), else ``tokenizer.json`` beside the file, else none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riftco.interchange.errors import ConversionError
from riftco.interchange.hf_gpt2 import arrays_from_gpt2, config_from_gpt2
from riftco.interchange.hf_llama import arrays_from_llama, config_from_llama
from riftco.interchange.hf_tokenizer import read_json, read_tokenizer_files
from riftco.interchange.huggingface import MAX_CONFIG_BYTES, _kind, read_float_tensors
from riftco.interchange.layout import check_shapes
from riftco.nn import ConfigError, TransformerConfig
from riftco.text import Tokenizer


@dataclass(frozen=True)
class PlainSafetensors:
    """A weights file read with its config (and a tokenizer, when one was found)."""

    model_config: TransformerConfig
    arrays: dict[str, np.ndarray] = field(repr=False)
    tokenizer: Tokenizer | None
    source_config: dict[str, Any] = field(repr=False)

    def origin(self, path: Path) -> dict[str, Any]:
        return {"parent_id": None, "metadata": {"source": "safetensors", "file": path.name}}


def import_plain_safetensors(
    path: str | os.PathLike[str],
    config: str | os.PathLike[str] | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
) -> PlainSafetensors:
    """Read ``path`` with ``config`` (default: ``config.json`` beside it)."""
    path = Path(path)
    config_path = Path(config) if config is not None else path.with_name("config.json")
    if not config_path.is_file():
        raise ConversionError(
            f"{path}: a plain safetensors file needs its config: expected {config_path} "
            "(a Hugging Face config.json or a riftco config; pass --config)"
        )
    document = read_json(config_path, MAX_CONFIG_BYTES)
    if not isinstance(document, dict):
        raise ConversionError(f"{config_path}: expected a JSON object")
    tensors = read_float_tensors(path)
    try:
        if "model_type" in document or "architectures" in document:
            if _kind(document) == "gpt2":
                model_config = config_from_gpt2(document)
                arrays = arrays_from_gpt2(model_config, tensors)
            else:
                model_config = config_from_llama(document)
                arrays = arrays_from_llama(model_config, tensors)
        else:
            model_config = TransformerConfig.from_dict(document)
            arrays = tensors
        check_shapes(model_config, {name: tuple(a.shape) for name, a in arrays.items()})
    except (ConfigError, ValueError, TypeError) as exc:
        raise ConversionError(f"{path} with {config_path.name}: {exc}") from None
    except ConversionError as exc:
        raise ConversionError(f"{path} with {config_path.name}: {exc}") from None
    return PlainSafetensors(model_config, arrays, _tokenizer(path, tokenizer), document)


def _tokenizer(path: Path, named: str | os.PathLike[str] | None) -> Tokenizer | None:
    if named is None:
        beside = path.with_name("tokenizer.json")
        return read_tokenizer_files(path.parent) if beside.is_file() else None
    source = Path(named)
    if source.is_dir():
        return read_tokenizer_files(source)
    if source.name == "tokenizer.json":
        return read_tokenizer_files(source.parent)
    from riftco.interchange.models import load_bundle

    return load_bundle(source).tokenizer


__all__ = ["PlainSafetensors", "import_plain_safetensors"]
