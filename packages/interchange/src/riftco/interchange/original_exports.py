"""The original Riftco Transformer's exports: its Hugging Face-style directory, its
GGUF file (architecture ``riftco``) and its ONNX export with its sidecar.

Each export holds one original bundle's content: its configuration, tokenizer,
weights (under its own names), stage, parent and metadata. The original identity
(``artifact_id``) is the SHA-256 of that bundle's canonical manifest, so
:func:`original_artifact_id` recomputes it from the content; where the export
records the identity (``source_artifact_id`` in ``config.json`` and the ONNX
sidecar), the two must agree, else :class:`IntegrityError`.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from riftco.interchange.container import canonical_json, read_safetensors, strict_json
from riftco.interchange.errors import ContainerError, IntegrityError, ManifestError
from riftco.interchange.original import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    WEIGHTS_NAME,
    OriginalModel,
    arrays_from_flat,
    check_expected,
    check_lineage,
    config_from_original,
    tokenizer_from_original,
)
from riftco.nn import TransformerConfig

HF_MODEL_TYPE = "riftco_decoder"
ARCHITECTURE_ID = "riftco_decoder_v1"
GGUF_ARCHITECTURE = "riftco"
ONNX_SIDECAR_SUFFIX = ".riftco.json"
ONNX_SIDECAR_FORMAT = "riftco-onnx-sidecar"
MAX_JSON_BYTES = 64 << 20
MAX_ONNX_BYTES = 2 << 30


def original_parameters(config: TransformerConfig) -> list[tuple[str, tuple[int, ...]]]:
    """The original's parameter names and shapes, in its order (the model's registration)."""
    d, f, v, t = config.d_model, config.d_ff, config.vocab_size, config.context_length
    specs: list[tuple[str, tuple[int, ...]]] = [
        ("token_embedding.weight", (v, d)),
        ("position_embedding.weight", (t, d)),
    ]
    for i in range(config.n_layers):
        b = f"blocks.{i}."
        specs += [(b + "attention_norm.scale", (d,)), (b + "attention_norm.bias", (d,))]
        for part in ("query", "key", "value", "output"):
            specs += [
                (b + f"attention.{part}.weight", (d, d)),
                (b + f"attention.{part}.bias", (d,)),
            ]
        specs += [(b + "feed_forward_norm.scale", (d,)), (b + "feed_forward_norm.bias", (d,))]
        specs += [
            (b + "feed_forward.expand.weight", (f, d)),
            (b + "feed_forward.expand.bias", (f,)),
        ]
        specs += [
            (b + "feed_forward.project.weight", (d, f)),
            (b + "feed_forward.project.bias", (d,)),
        ]
    specs += [("final_norm.scale", (d,)), ("final_norm.bias", (d,))]
    specs += [("language_model_head.weight", (v, d)), ("language_model_head.bias", (v,))]
    return specs


def original_artifact_id(
    original_config: Mapping[str, Any],
    tokenizer_entry: Mapping[str, Any],
    config: TransformerConfig,
    tensors: Mapping[str, np.ndarray],
    stage: str,
    parent_artifact_id: str | None,
    metadata: Mapping[str, Any],
) -> str:
    """The ``artifact_id`` the original gives a bundle with this content (``tensors``
    under the original's names)."""
    entries, flat, offset = [], [], 0
    for name, shape in original_parameters(config):
        count = math.prod(shape)
        entries.append({"name": name, "shape": list(shape), "offset": offset, "count": count})
        flat.append(np.ascontiguousarray(tensors[name], dtype="<f4").reshape(-1))
        offset += count
    payload = np.concatenate(flat).tobytes()
    manifest = {
        "format": BUNDLE_FORMAT,
        "format_version": BUNDLE_VERSION,
        "stage": stage,
        "parent_artifact_id": parent_artifact_id,
        "config": dict(original_config),
        "tokenizer": dict(tokenizer_entry),
        "parameters": entries,
        "weights": {
            "file": WEIGHTS_NAME,
            "dtype": "float32",
            "byte_order": "little",
            "count": offset,
            "sha256": hashlib.sha256(payload).hexdigest(),
        },
        "metadata": dict(metadata),
    }
    return hashlib.sha256(canonical_json(manifest)).hexdigest()


def _assemble(
    kind: str,
    path: Path,
    where: str,
    original_config: Any,
    tokenizer_entry: Any,
    tensors: Mapping[str, np.ndarray],
    lineage: Mapping[str, Any],
    recorded_id: str | None,
) -> OriginalModel:
    config, raw_config = config_from_original(original_config, f"{where}: config")
    tokenizer = tokenizer_from_original(tokenizer_entry, f"{where}: tokenizer")
    if tokenizer.vocab_size != config.vocab_size:
        raise ManifestError(
            f"{where}: the tokenizer has {tokenizer.vocab_size} ids; the model's vocabulary "
            f"is {config.vocab_size}"
        )
    check_lineage(lineage, where)
    specs = original_parameters(config)
    expected = {name for name, _ in specs}
    if set(tensors) != expected:
        missing, extra = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        raise ManifestError(f"{where}: tensors: missing {missing[:6]}, unexpected {extra[:6]}")
    layout, offset = [], 0
    for name, shape in specs:
        found = tuple(tensors[name].shape)
        if found != shape or tensors[name].dtype != np.float32:
            raise ManifestError(
                f"{where}: {name}: expected float32 {shape}; found {tensors[name].dtype} {found}"
            )
        layout.append((name, shape, offset, math.prod(shape)))
        offset += math.prod(shape)
    flat = np.concatenate([np.asarray(tensors[n], dtype=np.float32).reshape(-1) for n, _ in specs])
    arrays = arrays_from_flat(layout, flat, where)
    check_expected(config, arrays, where)
    stage, parent, metadata = (
        lineage["stage"],
        lineage.get("parent_artifact_id"),
        lineage["metadata"],
    )
    identity = original_artifact_id(
        raw_config, tokenizer_entry, config, tensors, stage, parent, metadata
    )
    if recorded_id is not None and recorded_id != identity:
        raise IntegrityError(
            f"{where}: the content hashes to the original artifact_id {identity}; the file "
            f"records {recorded_id} (the export was changed after it was written)"
        )
    return OriginalModel(
        kind, path, config, arrays, tokenizer, identity, parent, stage, dict(metadata), raw_config
    )


# -- Hugging Face-style directory ------------------------------------------------------


def is_original_huggingface(folder: Path) -> bool:
    """A directory whose ``config.json`` says ``model_type`` ``riftco_decoder``."""
    config = folder / "config.json"
    if not (folder.is_dir() and config.is_file()):
        return False
    try:
        document = _json_file(config)
    except (ContainerError, ManifestError):
        return False
    return isinstance(document, dict) and document.get("model_type") == HF_MODEL_TYPE


def read_original_huggingface(folder: str | Path) -> OriginalModel:
    """The original's ``RiftcoDecoderForCausalLM`` directory (``config.json``,
    ``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json``)."""
    folder = Path(folder)
    where = str(folder)
    entry = _json_file(folder / "config.json")
    _require(entry, "model_type", HF_MODEL_TYPE, f"{where}/config.json")
    _require(entry, "riftco_architecture", ARCHITECTURE_ID, f"{where}/config.json")
    fixed = {
        "attention_projection": "separate_qkv",
        "hidden_act": "gelu",
        "normalization_type": "layer_norm_with_bias",
        "position_embedding_type": "learned_absolute",
        "tie_word_embeddings": False,
        "use_bias": True,
    }
    for key, value in fixed.items():
        _require(entry, key, value, f"{where}/config.json")
    original_config = {
        "vocabulary_size": entry.get("vocab_size"),
        "maximum_context": entry.get("max_position_embeddings"),
        "model_width": entry.get("hidden_size"),
        "head_count": entry.get("num_attention_heads"),
        "block_count": entry.get("num_hidden_layers"),
        "feed_forward_width": entry.get("intermediate_size"),
        "random_seed": entry.get("initializer_seed"),
        "layer_norm_epsilon": entry.get("layer_norm_eps"),
    }
    tokenizer_doc = _json_file(folder / "tokenizer.json")
    _require(tokenizer_doc, "format", "riftco-tokenizer", f"{where}/tokenizer.json")
    tokenizer_entry = {
        k: v for k, v in tokenizer_doc.items() if k not in ("format", "format_version")
    }
    stored = read_safetensors(folder / "model.safetensors")
    config, _ = config_from_original(original_config, f"{where}/config.json")
    names = {hf: native for native, hf in _hf_names(config).items()}
    unknown = sorted(set(stored.tensors) - set(names))
    if unknown:
        raise ManifestError(f"{where}/model.safetensors: unexpected tensors {unknown[:6]}")
    for hf, info in stored.tensors.items():
        if info.dtype != "F32":
            raise ManifestError(
                f"{where}/model.safetensors: {hf}: expected F32; found {info.dtype}"
            )
    tensors = {names[hf]: stored.array(hf) for hf in stored.tensors}
    artifact = entry.get("riftco_artifact", {})
    if not isinstance(artifact, dict):
        raise ManifestError(f"{where}/config.json: riftco_artifact: expected an object")
    lineage = {
        "stage": artifact.get("stage", "huggingface_import"),
        "parent_artifact_id": artifact.get("parent_artifact_id"),
        "metadata": artifact.get("metadata", {"interchange_source": "huggingface_directory"}),
        "artifact_id": artifact.get("source_artifact_id"),
    }
    return _assemble(
        "huggingface", folder, where, original_config, tokenizer_entry, tensors, lineage,
        artifact.get("source_artifact_id"),
    )  # fmt: skip


def _hf_names(config: TransformerConfig) -> dict[str, str]:
    names = {
        "token_embedding.weight": "transformer.wte.weight",
        "position_embedding.weight": "transformer.wpe.weight",
        "final_norm.scale": "transformer.ln_f.weight",
        "final_norm.bias": "transformer.ln_f.bias",
        "language_model_head.weight": "lm_head.weight",
        "language_model_head.bias": "lm_head.bias",
    }
    parts = {
        "attention_norm.scale": "ln_1.weight",
        "attention_norm.bias": "ln_1.bias",
        "feed_forward_norm.scale": "ln_2.weight",
        "feed_forward_norm.bias": "ln_2.bias",
    }
    for ours, theirs in (
        ("query", "q_proj"),
        ("key", "k_proj"),
        ("value", "v_proj"),
        ("output", "out_proj"),
    ):
        for suffix in ("weight", "bias"):
            parts[f"attention.{ours}.{suffix}"] = f"attn.{theirs}.{suffix}"
    for ours, theirs in (("expand", "fc_in"), ("project", "fc_out")):
        for suffix in ("weight", "bias"):
            parts[f"feed_forward.{ours}.{suffix}"] = f"mlp.{theirs}.{suffix}"
    for i in range(config.n_layers):
        for native, hf in parts.items():
            names[f"blocks.{i}.{native}"] = f"transformer.h.{i}.{hf}"
    return names


# -- GGUF --------------------------------------------------------------------------------


def is_original_gguf_metadata(metadata: Mapping[str, Any]) -> bool:
    return metadata.get("general.architecture") == GGUF_ARCHITECTURE


def read_original_gguf(path: str | Path) -> OriginalModel:
    """The original's GGUF file (``general.architecture`` ``riftco``, F32 tensors under
    its own names); needs the ``gguf`` extra, and is checked by riftco's bounded scanner
    before ``gguf`` reads it."""
    from riftco.interchange.gguf_file import read_gguf

    path = Path(path)
    stored = read_gguf(path)
    meta, where = stored.metadata, str(path)
    if not is_original_gguf_metadata(meta) or meta.get("riftco.architecture_id") != ARCHITECTURE_ID:
        raise ManifestError(
            f"{where}: expected general.architecture 'riftco' and riftco.architecture_id "
            f"{ARCHITECTURE_ID!r}; found {meta.get('general.architecture')!r} and "
            f"{meta.get('riftco.architecture_id')!r}"
        )
    for name, info in stored.tensors.items():
        if info.ggml_type != "F32":
            raise ManifestError(f"{where}: {name}: expected an F32 tensor; found {info.ggml_type}")
    keys = {
        "vocabulary_size": "riftco.vocabulary_size",
        "maximum_context": "riftco.context_length",
        "model_width": "riftco.embedding_length",
        "head_count": "riftco.attention.head_count",
        "block_count": "riftco.block_count",
        "feed_forward_width": "riftco.feed_forward_length",
        "random_seed": "riftco.random_seed",
        "layer_norm_epsilon": "riftco.layer_norm_epsilon",
    }
    original_config = {ours: _plain(meta.get(key)) for ours, key in keys.items()}
    method = meta.get("riftco.tokenizer.method")
    if method == "byte":
        tokenizer_entry: dict[str, Any] = {
            "method": "byte",
            "byte_vocabulary": _plain(meta.get("riftco.tokenizer.byte_vocabulary")),
        }
    else:
        columns = [
            _plain(meta.get(f"riftco.tokenizer.merge_{k}")) for k in ("left", "right", "result")
        ]
        if not all(isinstance(c, list) for c in columns) or len({len(c) for c in columns}) != 1:
            raise ManifestError(f"{where}: riftco.tokenizer.merge_*: expected three equal lists")
        tokenizer_entry = {"method": method, "merge_rules": [list(r) for r in zip(*columns)]}
    parent = (
        meta.get("riftco.parent_artifact_id")
        if meta.get("riftco.parent_artifact_present")
        else None
    )
    metadata_json = meta.get("riftco.metadata_json")
    if not isinstance(metadata_json, str):
        raise ManifestError(f"{where}: riftco.metadata_json: expected a JSON string")
    lineage = {
        "stage": meta.get("riftco.stage"),
        "parent_artifact_id": parent,
        "metadata": strict_json(metadata_json, f"{where}: riftco.metadata_json", ManifestError),
    }
    return _assemble(
        "gguf", path, where, original_config, tokenizer_entry, stored.arrays, lineage, None
    )


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    return value


# -- ONNX ------------------------------------------------------------------------------


def onnx_sidecar(path: Path) -> Path:
    return path.with_name(path.name + ONNX_SIDECAR_SUFFIX)


def is_original_onnx(path: Path) -> bool:
    return path.is_file() and onnx_sidecar(path).is_file()


def read_original_onnx(path: str | Path) -> OriginalModel:
    """The original's ONNX export and its sidecar ``<file>.riftco.json``: the file's
    SHA-256 must match the sidecar before ``onnx`` parses it (``onnx`` extra)."""
    from riftco.interchange.optional import require

    path = Path(path)
    where = str(path)
    sidecar_path = onnx_sidecar(path)
    sidecar = _json_file(sidecar_path)
    _require(sidecar, "format", ONNX_SIDECAR_FORMAT, str(sidecar_path))
    _require(sidecar, "format_version", 1, str(sidecar_path))
    size = path.stat().st_size
    if size > MAX_ONNX_BYTES:
        raise ContainerError(f"{where}: expected at most {MAX_ONNX_BYTES} bytes; found {size}")
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != sidecar.get("onnx_sha256"):
        raise IntegrityError(
            f"{where}: SHA-256 is {digest}; the sidecar records {sidecar.get('onnx_sha256')!r}"
        )
    onnx = require("onnx")
    config, _ = config_from_original(sidecar.get("config"), f"{sidecar_path}: config")
    names = {name for name, _ in original_parameters(config)}
    try:
        model = onnx.load_from_string(raw)
        from onnx import numpy_helper

        wanted = [i for i in model.graph.initializer if i.name in names]
        if len(wanted) != len({i.name for i in wanted}):
            raise ManifestError(f"{where}: an initializer name appears twice")
        for initializer in wanted:
            # the original embeds every weight; a file naming external data is refused
            # rather than letting onnx open paths the file chooses
            if initializer.data_location == onnx.TensorProto.EXTERNAL:
                raise ManifestError(f"{where}: {initializer.name}: expected embedded data")
        tensors = {i.name: numpy_helper.to_array(i) for i in wanted}
    except ManifestError:
        raise
    except Exception as exc:  # onnx raises its own DecodeError and ValueErrors
        raise ContainerError(f"{where}: onnx cannot read the file: {exc}") from None
    lineage = {
        "stage": sidecar.get("stage"),
        "parent_artifact_id": sidecar.get("parent_artifact_id"),
        "metadata": sidecar.get("metadata"),
    }
    return _assemble(
        "onnx", path, where, sidecar.get("config"), sidecar.get("tokenizer"), tensors, lineage,
        sidecar.get("source_artifact_id"),
    )  # fmt: skip


# -- helpers -----------------------------------------------------------------------------


def _json_file(path: Path) -> dict[str, Any]:
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise ContainerError(f"{path}: expected at most {MAX_JSON_BYTES} bytes; found {size}")
        raw = path.read_bytes()
    except OSError as exc:
        raise ContainerError(f"{path}: cannot read: {exc.strerror or exc}") from None
    document = strict_json(raw, str(path), ManifestError)
    if not isinstance(document, dict):
        raise ManifestError(f"{path}: expected a JSON object; found {type(document).__name__}")
    return document


def _require(document: Mapping[str, Any], key: str, expected: Any, where: str) -> None:
    if document.get(key) != expected:
        raise ManifestError(f"{where}: {key}: expected {expected!r}; found {document.get(key)!r}")


# -- detection -------------------------------------------------------------------------

KINDS = {
    "rift-v1": "riftco-transformer .rift v1 bundle",
    "huggingface": "riftco-transformer Hugging Face-style directory",
    "gguf": "riftco-transformer GGUF file",
    "onnx": "riftco-transformer ONNX export",
}


def original_kind(path: str | os.PathLike[str]) -> str | None:
    """Which of the original's formats ``path`` holds, judged by content (a zip whose
    first member is ``manifest.json``, a ``config.json`` of ``model_type``
    ``riftco_decoder``, a GGUF file whose first key says architecture ``riftco``, an
    ONNX file beside its ``.riftco.json`` sidecar), or None."""
    from riftco.interchange.gguf_file import is_gguf
    from riftco.interchange.original import is_original_bundle

    path = Path(path)
    if path.is_dir():
        return "huggingface" if is_original_huggingface(path) else None
    if not path.is_file():
        return None
    if is_original_bundle(path):
        return "rift-v1"
    if is_gguf(path):
        return "gguf" if _gguf_architecture(path) == GGUF_ARCHITECTURE else None
    if is_original_onnx(path):
        try:
            return (
                "onnx"
                if _json_file(onnx_sidecar(path)).get("format") == ONNX_SIDECAR_FORMAT
                else None
            )
        except (ContainerError, ManifestError):
            return None
    return None


def read_original(path: str | os.PathLike[str], kind: str | None = None) -> OriginalModel:
    """Any of the original's model files, fully checked (see :func:`original_kind`)."""
    from riftco.interchange.original import read_original_bundle

    kind = kind or original_kind(path)
    readers = {
        "rift-v1": read_original_bundle,
        "huggingface": read_original_huggingface,
        "gguf": read_original_gguf,
        "onnx": read_original_onnx,
    }
    if kind not in readers:
        raise ManifestError(f"{path}: expected a file the original riftco-transformer wrote")
    return readers[kind](Path(path))


def _gguf_architecture(path: Path) -> str | None:
    """The value of the first key when it is ``general.architecture`` (bounded reads)."""
    import struct

    with open(path, "rb") as handle:
        head = handle.read(24)
        if len(head) < 24:
            return None
        prefix = handle.read(8)
        if len(prefix) < 8:  # a file cut short inside the first key's length
            return None
        (key_length,) = struct.unpack("<Q", prefix)
        if key_length != len("general.architecture"):
            return None
        if handle.read(key_length) != b"general.architecture":
            return None
        kind = handle.read(4)
        if len(kind) < 4 or struct.unpack("<I", kind)[0] != 8:
            return None
        raw = handle.read(8)
        if len(raw) < 8:
            return None
        (length,) = struct.unpack("<Q", raw)
        if length > 256:
            return None
        value = handle.read(length)
    return value.decode("utf-8", "replace")
