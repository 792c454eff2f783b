"""ONNX import of riftco's own exports: sidecar first, then the parameters by name.

An ONNX graph says how to compute, not which architecture it is, so only files
that riftco wrote are read back: the sidecar ``model.onnx.json`` must be there,
name the file, and match the SHA-256 of the ``.onnx`` (and of its external data)
before ``onnx`` parses anything. The configuration and tokenizer come from the
sidecar, and must be the ones the ``.onnx`` file's metadata records; each
parameter is the float32 initializer of the same name, checked against the
shapes the configuration implies.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riftco.core import canonical_hash
from riftco.interchange.container import canonical_json
from riftco.interchange.errors import (
    ConversionError,
    IntegrityError,
    ManifestError,
    WeightsError,
)
from riftco.interchange.hf_tokenizer import read_json
from riftco.interchange.layout import (
    check_shapes,
    check_tensor_count,
    config_from_dict,
    expected_shapes,
)
from riftco.interchange.lineage import parse_lineage
from riftco.interchange.models import build_model
from riftco.interchange.onnx_export import (
    PRODUCER,
    SIDECAR_FORMAT,
    SIDECAR_VERSION,
    file_sha256,
    sidecar_path,
)
from riftco.interchange.optional import require
from riftco.interchange.runnable import RunnableModel
from riftco.nn import TransformerConfig
from riftco.tensor import Backend
from riftco.text import Tokenizer, TokenizerError, tokenizer_from_state

MAX_SIDECAR_BYTES = 64 << 20


@dataclass
class OnnxModel:
    """What an imported ONNX export holds, under riftco's names."""

    model_config: TransformerConfig
    arrays: dict[str, np.ndarray] = field(repr=False)
    tokenizer: Tokenizer | None
    sidecar: dict[str, Any] = field(repr=False)
    lineage: dict[str, Any] = field(default_factory=dict)

    def origin(self) -> dict[str, Any]:
        """The stage, parent and metadata a bundle made from this export records."""
        return {
            "stage": "imported",
            "parent_id": self.lineage.get("artifact_id"),
            "metadata": {"source": "onnx", "onnx_sha256": self.sidecar["onnx"]["sha256"]},
        }


def import_onnx(path: str | os.PathLike[str], tokenizer: Tokenizer | None = None) -> OnnxModel:
    """Read an ONNX file riftco exported (with its sidecar); ``tokenizer`` overrides its own."""
    onnx = require("onnx")
    from onnx import numpy_helper

    path = Path(path)
    sidecar = _read_sidecar(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf and onnx raise many types for a damaged file
        raise ConversionError(f"{path}: onnx cannot parse the file: {exc}") from None
    _load_external_data(model, path, sidecar, onnx)
    if model.producer_name != PRODUCER:
        raise ConversionError(
            f"{path}: expected a riftco export; found producer {model.producer_name!r}"
        )
    try:
        config = config_from_dict(sidecar.get("config"))
        _check_props(model, config, sidecar.get("tokenizer"))
        initializers = {i.name: i for i in model.graph.initializer}
        check_tensor_count(config, len(initializers))
        arrays = {}
        for name, shape in expected_shapes(config).items():
            if name not in initializers:
                raise WeightsError(f"missing the initializer {name}")
            try:
                array = numpy_helper.to_array(initializers[name])
            except Exception as exc:  # a damaged tensor: wrong sizes, unknown types
                raise WeightsError(f"{name}: onnx cannot read the initializer: {exc}") from None
            if array.dtype != np.float32 or array.shape != shape:
                raise WeightsError(
                    f"{name}: expected float32 {list(shape)}; found {array.dtype} "
                    f"{list(array.shape)}"
                )
            if not np.isfinite(array).all():
                raise WeightsError(f"{name}: expected finite values; found NaN or infinity")
            arrays[name] = np.array(array)
        check_shapes(config, {name: a.shape for name, a in arrays.items()})
        if tokenizer is None and sidecar.get("tokenizer") is not None:
            try:
                tokenizer = tokenizer_from_state(sidecar["tokenizer"])
            except TokenizerError as exc:
                raise ManifestError(f"tokenizer: {exc}") from None
        lineage = parse_lineage(sidecar.get("lineage"), "lineage")
    except (ManifestError, WeightsError, ConversionError, IntegrityError) as exc:
        raise type(exc)(f"{path}: {exc}") from None
    return OnnxModel(config, arrays, tokenizer, sidecar, lineage)


def import_onnx_model(
    path: str | os.PathLike[str],
    tokenizer: Tokenizer | None = None,
    backend: str | Backend | None = None,
    trainable: bool = False,
) -> RunnableModel:
    """An ONNX file riftco exported as a runnable model."""
    imported = import_onnx(path, tokenizer)
    if imported.tokenizer is None:
        raise ConversionError(f"{path}: the sidecar holds no tokenizer; pass one")
    model = build_model(imported.model_config, imported.arrays, backend, trainable)
    return RunnableModel(model, imported.tokenizer, None, Path(path), imported.origin())


def _read_sidecar(path: Path) -> dict[str, Any]:
    side = sidecar_path(path)
    if not path.is_file():
        raise ConversionError(f"{path}: expected an ONNX file")
    if not side.is_file():
        raise ConversionError(
            f"{path}: expected the sidecar {side.name} that riftco writes beside its ONNX "
            "exports (riftco imports only its own exports: an ONNX graph does not say which "
            "architecture it computes)"
        )
    sidecar = read_json(side, MAX_SIDECAR_BYTES)
    where = f"{side}"
    if (sidecar.get("format"), sidecar.get("format_version")) != (SIDECAR_FORMAT, SIDECAR_VERSION):
        raise ManifestError(
            f"{where}: expected format {SIDECAR_FORMAT!r} version {SIDECAR_VERSION}; found "
            f"{sidecar.get('format')!r} version {sidecar.get('format_version')!r}"
        )
    described = sidecar.get("onnx")
    if not isinstance(described, Mapping):
        raise ManifestError(f"{where}: onnx: expected an object")
    _check_digest(path, described.get("sha256"), where)
    external = described.get("external_data")
    if external is not None:
        name = external.get("file") if isinstance(external, Mapping) else None
        if not isinstance(name, str) or Path(name).name != name or not name:
            raise ManifestError(f"{where}: onnx.external_data.file: expected a file name")
        _check_digest(path.with_name(name), external.get("sha256"), where)
    return sidecar


def _check_props(model: Any, config: TransformerConfig, state: Any) -> None:
    """The sidecar's configuration and tokenizer against what the ``.onnx`` file records."""
    props = {p.key: p.value for p in model.metadata_props}
    tokenizer_sha256 = canonical_hash(state)
    if props.get("riftco.config") != canonical_json(config.to_dict()).decode("utf-8"):
        raise IntegrityError("config: the sidecar's differs from the one the .onnx file records")
    if props.get("riftco.tokenizer_sha256") != tokenizer_sha256:
        raise IntegrityError("tokenizer: the sidecar's differs from the one the .onnx file records")


def _load_external_data(model: Any, path: Path, sidecar: Mapping[str, Any], onnx: Any) -> None:
    """Load external data only from the one file the sidecar names and checked."""
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data

    external = sidecar["onnx"].get("external_data")
    allowed = None if external is None else external["file"]
    for tensor in model.graph.initializer:
        if uses_external_data(tensor):
            location = {e.key: e.value for e in tensor.external_data}.get("location")
            if location != allowed:
                raise ConversionError(
                    f"{path}: {tensor.name}: external data in {location!r}; the sidecar "
                    f"allows {allowed!r}"
                )
    if allowed is not None:
        try:
            load_external_data_for_model(model, str(path.parent))
        except Exception as exc:  # offsets or lengths past the end of the data file
            raise ConversionError(f"{path}: cannot read the external data: {exc}") from None


def _check_digest(path: Path, recorded: Any, where: str) -> None:
    if not path.is_file():
        raise ConversionError(f"{path}: missing (the sidecar {where} lists it)")
    digest = file_sha256(path)
    if digest != recorded:
        raise IntegrityError(
            f"{path}: SHA-256 is {digest}; the sidecar records {recorded} "
            "(the file was changed or corrupted)"
        )
