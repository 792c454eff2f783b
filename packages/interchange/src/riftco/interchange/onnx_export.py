"""ONNX export: the graph of :mod:`riftco.interchange.onnx_graph`, checked, and a sidecar.

``model.onnx`` passes ``onnx.checker.check_model(full_check=True)`` before it is
written. Beside it, ``model.onnx.json`` (the sidecar) holds what ONNX has no place
for: the configuration, the exact tokenizer state, the lineage, the input and
output signature, and the SHA-256 of the ``.onnx`` file (and of its external data,
if any). Parameters past ``EXTERNAL_DATA_BYTES`` in all (protobuf files stop at
2 GiB) go to ``model.onnx.data`` as ONNX external data. All files are written
atomically; import (:mod:`riftco.interchange.onnx_import`) checks the digests.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from riftco.core import canonical_hash, staged_files
from riftco.interchange.container import canonical_json
from riftco.interchange.errors import ConversionError
from riftco.interchange.layout import check_shapes
from riftco.interchange.lineage import lineage_of
from riftco.interchange.models import model_arrays
from riftco.interchange.onnx_graph import INPUT, IR_VERSION, OPSET, OUTPUT, build_graph
from riftco.interchange.optional import require
from riftco.interchange.runnable import RunnableModel
from riftco.nn import DecoderOnlyTransformer, TransformerConfig
from riftco.text import Tokenizer

SIDECAR_FORMAT = "riftco-interchange/onnx"
SIDECAR_VERSION = 1
PRODUCER = "riftco"
EXTERNAL_DATA_BYTES = 1536 << 20


def sidecar_path(path: str | os.PathLike[str]) -> Path:
    """``model.onnx`` -> ``model.onnx.json``."""
    path = Path(path)
    return path.with_name(path.name + ".json")


def export_onnx(
    path: str | os.PathLike[str],
    config: TransformerConfig,
    arrays: Mapping[str, np.ndarray],
    tokenizer: Tokenizer | None,
    lineage: Mapping[str, Any] | None = None,
    external_data: bool | None = None,
) -> Path:
    """Write ``path`` (opset 18) and its sidecar; ``external_data`` None decides by size."""
    onnx = require("onnx")
    path = Path(path)
    check_shapes(config, {name: tuple(a.shape) for name, a in arrays.items()})
    if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
        raise ConversionError(
            f"tokenizer: {tokenizer.vocab_size} ids do not fit the model's vocab_size "
            f"{config.vocab_size}"
        )
    model = build_graph(config, arrays)
    model.producer_name = PRODUCER
    model.doc_string = "riftco decoder: input_ids [batch, sequence] -> logits"
    onnx.helper.set_model_props(model, model_props(config, tokenizer, sidecar_path(path).name))
    if external_data is None:
        external_data = sum(int(a.nbytes) for a in arrays.values()) > EXTERNAL_DATA_BYTES
    data_name = f"{path.name}.data" if external_data else None
    names = [path.name, sidecar_path(path).name] + ([data_name] if data_name else [])
    with staged_files(path.parent, names) as stage:
        if data_name is None:
            onnx.checker.check_model(model, full_check=True)
            (stage / path.name).write_bytes(model.SerializeToString())
        else:
            onnx.save_model(
                model,
                str(stage / path.name),
                save_as_external_data=True,
                all_tensors_to_one_file=True,
                location=data_name,
                size_threshold=1024,
            )
            onnx.checker.check_model(str(stage / path.name), full_check=True)
        sidecar = {
            "format": SIDECAR_FORMAT,
            "format_version": SIDECAR_VERSION,
            "onnx": {
                "file": path.name,
                "sha256": file_sha256(stage / path.name),
                "opset": OPSET,
                "ir_version": IR_VERSION,
                "external_data": None
                if data_name is None
                else {"file": data_name, "sha256": file_sha256(stage / data_name)},
            },
            "inputs": {INPUT: {"dtype": "int64", "shape": ["batch", "sequence"]}},
            "outputs": {
                OUTPUT: {"dtype": "float32", "shape": ["batch", "sequence", config.vocab_size]}
            },
            "max_sequence_length": config.context_length,
            "config": config.to_dict(),
            "tokenizer": None if tokenizer is None else tokenizer.to_state(),
            "lineage": dict(lineage or {}),
        }
        text = json.dumps(json.loads(canonical_json(sidecar)), indent=2, ensure_ascii=False)
        (stage / sidecar_path(path).name).write_text(text + "\n", encoding="utf-8")
    return path


def export_onnx_model(
    model: DecoderOnlyTransformer | RunnableModel,
    path: str | os.PathLike[str],
    tokenizer: Tokenizer | None = None,
    external_data: bool | None = None,
) -> Path:
    """Write ``model`` (its tokenizer and, from a bundle, its lineage in the sidecar)."""
    manifest = None
    if isinstance(model, RunnableModel):
        tokenizer = tokenizer or model.tokenizer
        manifest = model.manifest
        model = model.model
    return export_onnx(
        path, model.config, model_arrays(model), tokenizer, lineage_of(manifest), external_data
    )


def model_props(
    config: TransformerConfig, tokenizer: Tokenizer | None, sidecar_name: str
) -> dict[str, str]:
    """The ``metadata_props`` of an export: they tie the sidecar's configuration and
    tokenizer to the ``.onnx`` file, whose SHA-256 the sidecar records."""
    state = None if tokenizer is None else tokenizer.to_state()
    return {
        "riftco.format": SIDECAR_FORMAT,
        "riftco.sidecar": sidecar_name,
        "riftco.config": canonical_json(config.to_dict()).decode("utf-8"),
        "riftco.tokenizer_sha256": canonical_hash(state),
    }


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 (hex) of a file, read in 1 MiB pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while piece := handle.read(1 << 20):
            digest.update(piece)
    return digest.hexdigest()
