"""GGUF v3 export through the ``gguf`` package, in llama.cpp's conventions.

A GPT-family model becomes llama.cpp's ``gpt2`` architecture and a rotary model
its ``llama`` architecture (names and layouts in :mod:`riftco.interchange.gguf_layout`),
with the keys llama.cpp reads for them and a ``gpt2`` (byte-level BPE) tokenizer
section (:mod:`riftco.interchange.gguf_tokenizer`). Tensors are F32, or with
``dtype="f16"`` F16 for the matrices and F32 for the vectors and the position
embedding, as llama.cpp's converter writes them. With ``dtype="q8_0"`` or ``"q4_0"``
the matrices are quantized to that type in llama.cpp's block layout (the bytes its
reference quantizer makes, :mod:`riftco.tensor.ops.blockquant`); a matrix whose rows
do not hold whole blocks of 32 is written F16, as llama.cpp's converter does. The
token embedding and the head follow the same rule unless ``keep_float`` names them
(:mod:`riftco.interchange.quantization`: the rule ``--weights`` applies in process, so
the file is the model riftco runs).

What llama.cpp would compute differently is refused with the reason: exact GELU
(its ``gpt2`` graph computes the tanh form), a head bias, a sliding window,
grouped-query attention in ``gpt2``, biases in ``llama``. Beside llama.cpp's keys
the file holds ``riftco.config``, ``riftco.tokenizer`` and ``riftco.lineage``
(JSON), so that import gives back the same model exactly, and ``riftco.tensors``:
the SHA-256 of the tensors as stored (see :func:`~riftco.interchange.gguf_file.tensors_digest`)
with the ``general.file_type`` and the tensor layout (names, types, shapes) it belongs
to, since GGUF has no checksum of its own, and each tensor's own type and SHA-256
(``tensor_sha256``), which still check the tensors another tool left as they were
after it re-encoded the others. Last comes ``riftco.digest``: the SHA-256
of every other ``riftco.*`` key, its GGUF type and its value
(:func:`~riftco.interchange.gguf_file.key_digest`), so that a key renamed, removed or
changed after export is reported on import rather than quietly ignored
(:mod:`riftco.interchange.gguf_import` says how each case is read).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from riftco.core import staged_files
from riftco.interchange.container import canonical_json
from riftco.interchange.errors import ConversionError
from riftco.interchange.gguf_file import GgufTensorInfo, key_digest, layout_digest, tensor_digests
from riftco.interchange.gguf_layout import GPT2, architecture_of, to_gguf_tensors
from riftco.interchange.gguf_tokenizer import (
    RIFTCO_PARITY,
    RIFTCO_STATE,
    GgufVocabulary,
    gguf_vocabulary,
)
from riftco.interchange.hf_gpt2 import gpt2_config
from riftco.interchange.hf_llama import llama_config
from riftco.interchange.layout import check_shapes
from riftco.interchange.lineage import RIFTCO_LINEAGE, lineage_of
from riftco.interchange.models import model_arrays
from riftco.interchange.optional import require
from riftco.interchange.quantization import check_keep_float, gguf_role, matrix_type
from riftco.interchange.runnable import RunnableModel
from riftco.nn import DecoderOnlyTransformer, TransformerConfig
from riftco.tensor.ops.blockquant import quantize_block_array
from riftco.text import Tokenizer

FORMAT_VERSION = 1
RIFTCO_CONFIG = "riftco.config"
RIFTCO_FORMAT_VERSION = "riftco.format_version"
RIFTCO_TENSORS = "riftco.tensors"
RIFTCO_DIGEST = "riftco.digest"
DTYPES = ("f32", "f16", "q8_0", "q4_0")
_F16_MAX = float(np.finfo(np.float16).max)

Dtype = Literal["f32", "f16", "q8_0", "q4_0"]


def check_gguf_exportable(config: TransformerConfig) -> str:
    """The llama.cpp architecture for ``config``; ConversionError with the reason when
    llama.cpp would compute something else."""
    if config.family == "gpt":
        if config.feed_forward == "gelu" and config.gelu == "exact":
            raise ConversionError(
                "llama.cpp's gpt2 architecture computes the tanh form of GELU, and this model "
                "uses exact GELU (gelu='exact', as in the riftco_v1 preset); export it as ONNX, "
                "a .rift bundle or a Hugging Face directory instead"
            )
        gpt2_config(config, None, None)
    else:
        llama_config(config, None, None)
    return architecture_of(config)


def export_gguf(
    path: str | os.PathLike[str],
    config: TransformerConfig,
    arrays: Mapping[str, np.ndarray],
    tokenizer: Tokenizer,
    dtype: Dtype = "f32",
    lineage: Mapping[str, Any] | None = None,
    allow_tokenizer_mismatch: bool = False,
    name: str | None = None,
    keep_float: Iterable[str] | None = None,
) -> Path:
    """Write a GGUF v3 file that llama.cpp loads as ``gpt2`` or ``llama``, atomically.

    ``lineage`` (the source's ``artifact_id``, ``stage``, ``parent_id``) is recorded
    as ``riftco.lineage``; ``name`` (default: the file's stem) as ``general.name``,
    the model name llama.cpp and its front ends show; ``keep_float`` (``token_embd``,
    ``output``) the matrices a quantized ``dtype`` leaves float32."""
    gguf = require("gguf")
    path = Path(path)
    if dtype not in DTYPES:
        raise ConversionError(f"GGUF export: expected a dtype among {DTYPES}; found {dtype!r}")
    keep = check_keep_float(keep_float)
    check_shapes(config, {name: tuple(a.shape) for name, a in arrays.items()})
    architecture = check_gguf_exportable(config)
    vocabulary = gguf_vocabulary(tokenizer, config.vocab_size, allow_tokenizer_mismatch)
    tensors = {
        name: _stored(name, array, dtype, keep, config.tie_embeddings)
        for name, array in to_gguf_tensors(config, arrays).items()
    }
    with staged_files(path.parent, [path.name]) as stage:
        writer = _writer_class()(stage / path.name, architecture)
        writer.add_name(name if name else path.stem)
        _write_hyperparameters(writer, config, architecture, dtype, gguf)
        _write_vocabulary(writer, vocabulary, gguf)
        keys = riftco_keys(config, tokenizer, vocabulary, lineage, tensors, _file_type(dtype, gguf))
        for key, (kind, value) in keys.items():
            if kind == "UINT32":
                writer.add_uint32(key, value)
            else:
                writer.add_string(key, value)
        writer.add_string(RIFTCO_DIGEST, metadata_digest(keys))
        for name, (array, type_name, _) in tensors.items():
            raw = gguf.GGMLQuantizationType[type_name] if array.dtype == np.uint8 else None
            writer.add_tensor(name, array, raw_dtype=raw)
        try:
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()
    return path


def riftco_keys(
    config: TransformerConfig,
    tokenizer: Tokenizer,
    vocabulary: GgufVocabulary,
    lineage: Mapping[str, Any] | None,
    tensors: Mapping[str, tuple[np.ndarray, str, tuple[int, ...]]],
    file_type: int,
) -> dict[str, tuple[str, Any]]:
    """The ``riftco.*`` keys of an export, each as ``(GGUF value type, value)``; the
    ``riftco.digest`` over them is :func:`metadata_digest`."""
    digest, each = tensor_digests((n, t, shape, a) for n, (a, t, shape) in tensors.items())
    layout = layout_digest(
        GgufTensorInfo(n, t, shape, 0, 0) for n, (_, t, shape) in tensors.items()
    )
    integrity = {
        "sha256": digest,
        "file_type": file_type,
        "layout_sha256": layout,
        "metadata_digest": RIFTCO_DIGEST,
        "tensor_sha256": {n: [tensors[n][1], each[n]] for n in sorted(each)},
    }

    def text(document: Any) -> tuple[str, str]:
        return "STRING", canonical_json(document).decode("utf-8")

    return {
        RIFTCO_FORMAT_VERSION: ("UINT32", FORMAT_VERSION),
        RIFTCO_CONFIG: text(config.to_dict()),
        RIFTCO_STATE: text(tokenizer.to_state()),
        RIFTCO_PARITY: ("STRING", vocabulary.parity),
        RIFTCO_LINEAGE: text(dict(lineage or {})),
        RIFTCO_TENSORS: text(integrity),
    }


def metadata_digest(keys: Mapping[str, tuple[str, Any]]) -> str:
    """The value of ``riftco.digest``: the canonical JSON ``{"sha256": {key: digest}}``
    with each key's :func:`~riftco.interchange.gguf_file.key_digest`."""
    digests = {key: key_digest(key, kind, value) for key, (kind, value) in keys.items()}
    return canonical_json({"sha256": digests}).decode("utf-8")


def _stored(
    name: str, array: np.ndarray, dtype: str, keep: frozenset[str], tied: bool
) -> tuple[np.ndarray, str, tuple[int, ...]]:
    """The array as written (uint8 bytes ``[rows, row_bytes]`` for a block type), its
    ggml type name (:func:`~riftco.interchange.quantization.matrix_type`), and its
    shape in elements."""
    shape = tuple(array.shape)
    kind = "F32" if array.ndim < 2 else matrix_type(dtype, gguf_role(name, tied), shape[1], keep)
    if kind == "F32":
        return np.ascontiguousarray(array, dtype=np.float32), "F32", shape
    if kind in ("Q8_0", "Q4_0"):
        data = quantize_block_array(array, kind.lower())
        return data.reshape(shape[0], -1), kind, shape
    largest = float(np.max(np.abs(array))) if array.size else 0.0
    if largest > _F16_MAX:
        raise ConversionError(
            f"{name}: a value of magnitude {largest:g} does not fit float16 "
            f"(largest {_F16_MAX:g}); export with dtype 'f32'"
        )
    return np.ascontiguousarray(array, dtype=np.float16), "F16", shape


_FILE_TYPES = {"f32": "ALL_F32", "f16": "MOSTLY_F16", "q8_0": "MOSTLY_Q8_0", "q4_0": "MOSTLY_Q4_0"}


def _file_type(dtype: str, gguf: Any) -> int:
    return int(gguf.LlamaFileType[_FILE_TYPES[dtype]])


def _write_hyperparameters(
    writer: Any, c: TransformerConfig, architecture: str, dtype: str, gguf: Any
) -> None:
    writer.add_file_type(_file_type(dtype, gguf))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_vocab_size(c.vocab_size)
    writer.add_context_length(c.context_length)
    writer.add_embedding_length(c.d_model)
    writer.add_block_count(c.n_layers)
    writer.add_feed_forward_length(c.d_ff)
    writer.add_head_count(c.n_heads)
    if architecture == GPT2:
        writer.add_layer_norm_eps(c.norm_eps)
        return
    writer.add_head_count_kv(c.n_kv_heads)
    writer.add_layer_norm_rms_eps(c.norm_eps)
    writer.add_rope_dimension_count(c.head_dim)
    writer.add_rope_freq_base(c.rope_theta)


def _write_vocabulary(writer: Any, vocabulary: GgufVocabulary, gguf: Any) -> None:
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocabulary.pre)
    writer.add_token_list(vocabulary.tokens)
    writer.add_token_types(vocabulary.token_types)
    # llama.cpp needs the merges key even when there are none (a byte vocabulary).
    writer.add_key_value(
        gguf.Keys.Tokenizer.MERGES,
        vocabulary.merges,
        gguf.GGUFValueType.ARRAY,
        sub_type=gguf.GGUFValueType.STRING,
    )
    if vocabulary.eos_id is not None:
        writer.add_bos_token_id(vocabulary.eos_id)
        writer.add_eos_token_id(vocabulary.eos_id)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    if vocabulary.chat_template is not None:
        writer.add_chat_template(vocabulary.chat_template)


@cache
def _writer_class() -> type:
    import gguf

    class Writer(gguf.GGUFWriter):
        """``gguf.GGUFWriter`` that also writes empty arrays, which GGUF allows and
        llama.cpp reads, when their item type is given."""

        def _pack_val(self, val: Any, vtype: Any, add_vtype: bool, sub_type: Any = None) -> bytes:
            if vtype == gguf.GGUFValueType.ARRAY and sub_type is not None and len(val) == 0:
                prefix = self._pack("I", vtype) if add_vtype else b""
                return prefix + self._pack("I", sub_type) + self._pack("Q", 0)
            return super()._pack_val(val, vtype, add_vtype, sub_type)

    return Writer


def export_gguf_model(
    model: DecoderOnlyTransformer | RunnableModel,
    path: str | os.PathLike[str],
    tokenizer: Tokenizer | None = None,
    dtype: Dtype = "f32",
    allow_tokenizer_mismatch: bool = False,
    keep_float: Iterable[str] | None = None,
) -> Path:
    """Write ``model`` (and its tokenizer; a runnable model's lineage too) as GGUF."""
    manifest = None
    if isinstance(model, RunnableModel):
        tokenizer = tokenizer or model.tokenizer
        manifest = model.manifest
        model = model.model
    if tokenizer is None:
        raise ConversionError("GGUF export needs a tokenizer (llama.cpp reads it from the file)")
    return export_gguf(
        path,
        model.config,
        model_arrays(model),
        tokenizer,
        dtype,
        lineage_of(manifest),
        allow_tokenizer_mismatch,
        keep_float=keep_float,
    )
