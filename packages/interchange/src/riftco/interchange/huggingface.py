"""Hugging Face model directories: GPT-2 and Llama, written and read.

An exported directory holds ``config.json``, ``model.safetensors`` (float32,
metadata ``format: pt``), ``tokenizer.json``, ``tokenizer_config.json`` and
``generation_config.json``; ``transformers`` loads it as ``GPT2LMHeadModel`` or
``LlamaForCausalLM``. Import reads such a directory, including ones written by
``save_pretrained`` (weights in one ``model.safetensors`` or in shards listed by
``model.safetensors.index.json``; float16 and bfloat16 widened to float32).
Pickled checkpoints (``pytorch_model.bin``) are never loaded.

These functions work on a ``TransformerConfig`` and numpy arrays under riftco's
parameter names; :mod:`riftco.interchange.models` connects them to models.
"""

from __future__ import annotations

import os
import unicodedata
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riftco.interchange.bundle import _check_finite  # the check a .rift bundle makes
from riftco.interchange.container import read_safetensors, write_safetensors
from riftco.interchange.errors import ConversionError, WeightsError
from riftco.interchange.hf_gpt2 import (
    arrays_from_gpt2,
    config_from_gpt2,
    gpt2_config,
    gpt2_tensors,
)
from riftco.interchange.hf_llama import (
    arrays_from_llama,
    config_from_llama,
    llama_config,
    llama_tensors,
)
from riftco.interchange.hf_tokenizer import (
    read_json,
    read_tokenizer_files,
    write_json,
    write_tokenizer_files,
)
from riftco.interchange.layout import check_shapes
from riftco.nn import ConfigError, TransformerConfig
from riftco.text import BpeTokenizer, SpecialTokenError, Tokenizer

MAX_CONFIG_BYTES = 1 << 20
MAX_INDEX_BYTES = 16 << 20
MAX_SHARDS = 4096
_FLOAT_CODES = {"F32", "F16", "BF16", "F64"}


@dataclass
class HuggingFaceModel:
    """What an imported directory holds, under riftco's names."""

    model_config: TransformerConfig
    arrays: dict[str, np.ndarray] = field(repr=False)
    tokenizer: Tokenizer | None
    config: dict[str, Any] = field(repr=False)
    #: Why the directory's own tokenizer could not be read (``require_tokenizer=False``
    #: and no ``tokenizer.json``), or None.
    tokenizer_error: str | None = None


def export_huggingface(
    folder: str | os.PathLike[str],
    model_config: TransformerConfig,
    arrays: Mapping[str, np.ndarray],
    tokenizer: Tokenizer | None,
) -> Path:
    """Write a directory that ``transformers`` loads; refuses what the target cannot represent."""
    folder = Path(folder)
    check_shapes(model_config, {name: tuple(a.shape) for name, a in arrays.items()})
    eos = _eos_id(tokenizer)
    if model_config.family == "gpt":
        config = gpt2_config(model_config, eos, eos)
        tensors = gpt2_tensors(model_config, arrays)
    else:
        config = llama_config(model_config, eos, eos)
        tensors = llama_tensors(model_config, arrays)
    if tokenizer is not None and tokenizer.vocab_size > model_config.vocab_size:
        raise ConversionError(
            f"tokenizer: {tokenizer.vocab_size} ids do not fit the model's vocab_size "
            f"{model_config.vocab_size}"
        )
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / "model.safetensors", tensors, {"format": "pt"})
    write_json(folder / "config.json", config)
    generation = {"bos_token_id": eos, "eos_token_id": _generation_stops(tokenizer, eos)}
    write_json(folder / "generation_config.json", generation)
    if tokenizer is not None:
        _warn_on_split_differences(tokenizer)
        write_tokenizer_files(tokenizer, folder, model_config.context_length)
    return folder


class TokenizerParityWarning(UserWarning):
    """The exported tokenizer.json gives other ids than ours for some text."""


def _warn_on_split_differences(tokenizer: Tokenizer) -> None:
    """Warn when ``tokenizers`` would encode some text to other ids: riftco's GPT-2
    pre-tokenizer groups numeric characters that are not decimal digits (Unicode Nl
    and No: ``²``, ``½``, ``Ⅻ``) with letters, the GPT-2 regex treats them as numbers,
    so a merge that joins such a character to a letter is unreachable there."""
    if not isinstance(tokenizer, BpeTokenizer) or tokenizer.pretokenize != "gpt2":
        return
    mixed = []
    for token_id in range(tokenizer.base_vocab_size):
        text = tokenizer.token_bytes(token_id).decode("utf-8", errors="ignore")
        numeric = [c for c in text if unicodedata.category(c) in ("Nl", "No")]
        if numeric and any(unicodedata.category(c).startswith("L") for c in text):
            mixed.append(text)
    if mixed:
        shown = ", ".join(repr(t) for t in mixed[:5])
        warnings.warn(
            f"tokenizer: {len(mixed)} token(s) join letters with numeric characters that are "
            f"not decimal digits ({shown}); the GPT-2 pattern in tokenizers splits those "
            "apart, so transformers encodes text holding them to other ids than riftco",
            TokenizerParityWarning,
            stacklevel=3,
        )


def import_huggingface(
    folder: str | os.PathLike[str],
    tokenizer: Tokenizer | None = None,
    require_tokenizer: bool = True,
) -> HuggingFaceModel:
    """Read a GPT-2 or Llama directory; ``tokenizer`` overrides the directory's own.

    Everything a model built from it would refuse is refused here, with
    ``ConversionError`` or ``WeightsError``: the configuration, the tensors' names and
    shapes, a NaN or infinity in any weight (as a ``.rift`` bundle refuses it), the
    tokenizer and whether its ids fit the vocabulary. Without ``require_tokenizer`` a
    directory with no ``tokenizer.json`` gives ``tokenizer`` None and says why in
    ``tokenizer_error``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConversionError(f"{folder}: expected a Hugging Face model directory")
    config = read_json(folder / "config.json", MAX_CONFIG_BYTES)
    kind = _kind(config)
    try:
        if kind == "gpt2":
            model_config = config_from_gpt2(config)
            arrays = arrays_from_gpt2(model_config, read_weights(folder))
        else:
            model_config = config_from_llama(config)
            arrays = arrays_from_llama(model_config, read_weights(folder))
        check_shapes(model_config, {name: tuple(a.shape) for name, a in arrays.items()})
        for name, array in arrays.items():
            _check_finite(name, array)
    except WeightsError as exc:
        raise WeightsError(f"{folder}: {exc}") from None
    except ConversionError as exc:
        raise ConversionError(f"{folder}: {exc}") from None
    except (ConfigError, ValueError) as exc:  # sizes the configuration or weights reject
        raise ConversionError(f"{folder}: {exc}") from None
    problem = None
    if tokenizer is None:
        if require_tokenizer or (folder / "tokenizer.json").exists():
            tokenizer = read_tokenizer_files(folder)
        else:
            problem = f"{folder}: no tokenizer.json"
    if tokenizer is not None and tokenizer.vocab_size > model_config.vocab_size:
        raise ConversionError(
            f"{folder}: tokenizer: {tokenizer.vocab_size} ids do not fit the model's "
            f"vocab_size {model_config.vocab_size}"
        )
    return HuggingFaceModel(model_config, arrays, tokenizer, config, problem)


def read_weights(folder: Path) -> dict[str, np.ndarray]:
    """Every tensor of the directory's safetensors weights, as float32 copies."""
    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.exists():
        files = [single]
    elif index.exists():
        files = _shards(folder, read_json(index, MAX_INDEX_BYTES))
    else:
        pickled = [p.name for p in folder.glob("*.bin")]
        hint = (
            f" (found {', '.join(pickled)}: pickled checkpoints are never loaded)"
            if pickled
            else ""
        )
        raise ConversionError(f"expected model.safetensors or model.safetensors.index.json{hint}")
    tensors: dict[str, np.ndarray] = {}
    for path in files:
        for name, array in read_float_tensors(path).items():
            if name in tensors:
                raise ConversionError(f"{path.name}: {name} appears in more than one shard")
            tensors[name] = array
    return tensors


def read_float_tensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of one safetensors file as a float32 copy. Float16, bfloat16 and
    float64 tensors are converted to float32 (riftco computes in float32), and a
    `SafetensorsWidened` warning says how many of each; any other dtype (integers,
    bool, float8) is refused naming the tensor."""
    stored = read_safetensors(path)
    tensors: dict[str, np.ndarray] = {}
    widened: dict[str, int] = {}
    for name, info in stored.tensors.items():
        if info.dtype not in _FLOAT_CODES:
            raise ConversionError(
                f"{path.name}: {name}: expected floating-point weights (F16, BF16, F32 or "
                f"F64); found {info.dtype}"
            )
        if info.dtype != "F32":
            widened[info.dtype] = widened.get(info.dtype, 0) + 1
        tensors[name] = np.asarray(stored.array(name), dtype=np.float32).copy()
    if widened:
        counts = ", ".join(f"{n} {dtype}" for dtype, n in sorted(widened.items()))
        warnings.warn(
            f"{path.name}: converted {counts} tensor(s) to float32", SafetensorsWidened, 2
        )
    return tensors


class SafetensorsWidened(UserWarning):
    """Some tensors of a safetensors file were stored in another float type and
    converted to float32 on import."""


def _shards(folder: Path, index: Mapping[str, Any]) -> list[Path]:
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, Mapping):
        raise ConversionError("model.safetensors.index.json: expected a weight_map object")
    names = sorted({str(v) for v in weight_map.values()})
    if len(names) > MAX_SHARDS:
        raise ConversionError(f"model.safetensors.index.json: expected at most {MAX_SHARDS} shards")
    paths = []
    for name in names:
        if Path(name).name != name or not name.endswith(".safetensors"):
            raise ConversionError(
                f"model.safetensors.index.json: expected shard file names; found {name!r}"
            )
        paths.append(folder / name)
    return paths


def _kind(config: Mapping[str, Any]) -> str:
    model_type = config.get("model_type")
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise ConversionError(
            f"config.json: expected architectures as a list of names; found {architectures!r}"[:300]
        )
    if model_type == "gpt2" or "GPT2LMHeadModel" in architectures:
        return "gpt2"
    if model_type == "llama" or "LlamaForCausalLM" in architectures:
        return "llama"
    raise ConversionError(
        f"config.json: expected model_type 'gpt2' or 'llama'; found {model_type!r} "
        f"(architectures {architectures})"
    )


def _generation_stops(tokenizer: Tokenizer | None, eos: int | None) -> int | list[int] | None:
    """``generation_config.json``'s ``eos_token_id``: every id that ends a reply (the
    end-of-turn marker and the role markers of a chat template, end-of-text), so
    ``generate()`` in transformers stops where ours does; one id stays a plain int."""
    stops = list(tokenizer.stop_ids(chat=True)) if tokenizer is not None else []
    if len(stops) > 1:
        return stops
    return stops[0] if stops else eos


def _eos_id(tokenizer: Tokenizer | None) -> int | None:
    if tokenizer is None:
        return None
    try:
        return tokenizer.eos_id
    except SpecialTokenError:
        return None
