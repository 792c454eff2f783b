"""Bundles and directories as models: save, load, build, export and import.

Loading validates the whole file first (see :func:`read_bundle`), then the
configuration, the tensors against it (:func:`check_shapes`) and the
tokenizer, and only then builds the model. For inference the weights are read
through a read-only memory map and copied once, into the backend; with
``trainable=True`` they are copied out of the file first and the model is put in
training mode.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from riftco.interchange.bundle import Bundle, read_bundle, write_bundle
from riftco.interchange.errors import BundleError, ManifestError
from riftco.interchange.huggingface import export_huggingface, import_huggingface
from riftco.interchange.layout import check_shapes, config_from_dict
from riftco.interchange.runnable import RunnableModel
from riftco.nn import DecoderOnlyTransformer, TransformerConfig, check_exportable
from riftco.tensor import Backend
from riftco.text import Tokenizer, TokenizerError, tokenizer_from_state


def model_arrays(model: DecoderOnlyTransformer) -> dict[str, np.ndarray]:
    """The model's state dict as float32 numpy arrays (copies); refuses unmerged
    adapters and quantized layers, which a plain float32 state cannot hold."""
    check_exportable(model, "export the weights")
    return {
        name: np.array(value.numpy(), dtype=np.float32)
        for name, value in model.state_dict().items()
    }


def save_bundle(
    path: str | os.PathLike[str],
    model: DecoderOnlyTransformer,
    tokenizer: Tokenizer,
    stage: str = "pretraining",
    parent_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``model`` and ``tokenizer`` as a ``.rift`` bundle, atomically; returns the manifest.

    A model with active, unmerged LoRA adapters or NF4 layers is refused."""
    check_exportable(model)
    config = model.config
    _check_tokenizer_fits(tokenizer, config)
    return write_bundle(
        path,
        config.to_dict(),
        model_arrays(model),
        tokenizer.to_state(),
        stage,
        parent_id,
        metadata,
    )


def validate_bundle(bundle: Bundle) -> tuple[TransformerConfig, Tokenizer]:
    """The bundle's configuration and tokenizer, after checking the tensors against the
    configuration and the tokenizer against the vocabulary."""
    where = f"{bundle.path}: " if bundle.path is not None else ""
    try:
        config = config_from_dict(bundle.config)
        check_shapes(config, {name: array.shape for name, array in bundle.tensors.items()})
        try:
            tokenizer = tokenizer_from_state(bundle.tokenizer_state)
        except TokenizerError as exc:
            raise ManifestError(f"tokenizer: {exc}") from None
        _check_tokenizer_fits(tokenizer, config)
    except BundleError as exc:
        raise type(exc)(f"{where}{exc}") from None
    return config, tokenizer


def build_model(
    config: TransformerConfig,
    arrays: Mapping[str, np.ndarray],
    backend: str | Backend | None = None,
    trainable: bool = False,
) -> DecoderOnlyTransformer:
    """A model with ``config`` holding ``arrays`` (checked against the configuration first)."""
    check_shapes(config, {name: tuple(array.shape) for name, array in arrays.items()})
    model = DecoderOnlyTransformer(config, backend=backend)
    model.load_state_dict(arrays, strict=True)
    model.train(trainable)
    return model


def load_bundle(
    path: str | os.PathLike[str], trainable: bool = False, backend: str | Backend | None = None
) -> RunnableModel:
    """Validate a ``.rift`` bundle completely, then build its model and tokenizer.

    The files of the original riftco-transformer (its ``.rift`` v1 bundle, Hugging
    Face-style directory, GGUF file and ONNX export, recognised by content) load too:
    see :func:`load_original`."""
    from riftco.interchange.original_exports import original_kind

    if original_kind(path) is not None:
        return load_original(path, trainable, backend)
    bundle = read_bundle(path, copy=trainable)
    config, tokenizer = validate_bundle(bundle)
    model = build_model(config, bundle.tensors, backend, trainable)
    return RunnableModel(model, tokenizer, bundle.manifest, bundle.path)


def load_original(
    path: str | os.PathLike[str], trainable: bool = False, backend: str | Backend | None = None
) -> RunnableModel:
    """A model the original riftco-transformer wrote (its ``.rift`` v1 bundle,
    Hugging Face-style directory, GGUF file or ONNX export), as a ``riftco_v1`` model.

    ``manifest`` describes the original artifact (its ``artifact_id``, ``parent_id``
    and ``stage``); saving records the original as the parent (``origin``)."""
    from riftco.interchange.original_exports import read_original

    original = read_original(path)
    model = build_model(original.config, original.arrays, backend, trainable)
    manifest = {
        "format": original.kind,
        "artifact_id": original.artifact_id,
        "parent_id": original.parent_artifact_id,
        "stage": original.stage,
        "metadata": original.metadata,
        "config": original.config.to_dict(),
    }
    return RunnableModel(model, original.tokenizer, manifest, Path(path), original.origin())


def export_huggingface_model(
    model: DecoderOnlyTransformer | RunnableModel,
    folder: str | os.PathLike[str],
    tokenizer: Tokenizer | None = None,
) -> Path:
    """Write ``model`` (and its tokenizer) as a ``GPT2LMHeadModel`` or ``LlamaForCausalLM``
    directory; refuses configuration features the target cannot represent."""
    if isinstance(model, RunnableModel):
        tokenizer = tokenizer or model.tokenizer
        model = model.model
    return export_huggingface(folder, model.config, model_arrays(model), tokenizer)


def import_huggingface_model(
    folder: str | os.PathLike[str],
    tokenizer: Tokenizer | None = None,
    backend: str | Backend | None = None,
    trainable: bool = False,
) -> RunnableModel:
    """A GPT-2 or Llama directory as a runnable model (``tokenizer`` overrides its own)."""
    imported = import_huggingface(folder, tokenizer)
    assert imported.tokenizer is not None  # import_huggingface requires one
    _check_tokenizer_fits(imported.tokenizer, imported.model_config)
    model = build_model(imported.model_config, imported.arrays, backend, trainable)
    origin = {
        "stage": "imported",
        "parent_id": None,
        "metadata": huggingface_origin(imported.config),
    }
    return RunnableModel(model, imported.tokenizer, None, Path(folder), origin)


def huggingface_origin(config: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata a bundle made from a Hugging Face directory records."""
    return {"source": "huggingface", "model_type": config.get("model_type")}


def _check_tokenizer_fits(tokenizer: Tokenizer, config: TransformerConfig) -> None:
    if tokenizer.vocab_size > config.vocab_size:
        raise BundleError(
            f"tokenizer: {tokenizer.vocab_size} ids do not fit the model's vocab_size "
            f"{config.vocab_size}"
        )
