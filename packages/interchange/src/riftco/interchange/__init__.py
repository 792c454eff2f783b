"""riftco.interchange: .rift bundles, SafeTensors, and Hugging Face directories.

See the package README for the interface, the manifest format and its
canonical form, and the ``riftco generate``/``convert``/``inspect`` commands.
"""

from __future__ import annotations

from riftco.core import atomic_write
from riftco.interchange.bundle import SUFFIX, Bundle, read_bundle, read_manifest, write_bundle
from riftco.interchange.container import (
    MAX_HEADER_BYTES,
    SafetensorsFile,
    TensorInfo,
    canonical_json,
    content_id,
    read_safetensors,
    strict_json,
    tensors_digest,
    write_safetensors,
)
from riftco.interchange.convert import convert
from riftco.interchange.errors import (
    BundleError,
    ContainerError,
    ConversionError,
    IntegrityError,
    InterchangeError,
    ManifestError,
    WeightsError,
)
from riftco.interchange.gguf_export import export_gguf, export_gguf_model
from riftco.interchange.gguf_import import GgufModel, import_gguf, import_gguf_model
from riftco.interchange.huggingface import export_huggingface, import_huggingface
from riftco.interchange.layout import check_shapes, expected_shapes
from riftco.interchange.manifest import FORMAT, FORMAT_VERSION, MANIFEST_KEY
from riftco.interchange.models import (
    build_model,
    export_huggingface_model,
    import_huggingface_model,
    load_bundle,
    load_original,
    model_arrays,
    save_bundle,
    validate_bundle,
)
from riftco.interchange.onnx_export import export_onnx, export_onnx_model
from riftco.interchange.onnx_import import OnnxModel, import_onnx, import_onnx_model
from riftco.interchange.original import OriginalModel
from riftco.interchange.original_exports import original_kind, read_original
from riftco.interchange.runnable import RunnableModel
from riftco.interchange.safetensors_io import load_safetensors, save_safetensors

__version__ = "0.1.0"

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_KEY",
    "MAX_HEADER_BYTES",
    "SUFFIX",
    "Bundle",
    "BundleError",
    "ContainerError",
    "ConversionError",
    "GgufModel",
    "IntegrityError",
    "InterchangeError",
    "ManifestError",
    "OnnxModel",
    "OriginalModel",
    "RunnableModel",
    "SafetensorsFile",
    "TensorInfo",
    "WeightsError",
    "atomic_write",
    "build_model",
    "canonical_json",
    "check_shapes",
    "content_id",
    "convert",
    "expected_shapes",
    "export_gguf",
    "export_gguf_model",
    "export_huggingface",
    "export_huggingface_model",
    "export_onnx",
    "export_onnx_model",
    "import_gguf",
    "import_gguf_model",
    "import_huggingface",
    "import_huggingface_model",
    "import_onnx",
    "import_onnx_model",
    "load_bundle",
    "load_original",
    "load_safetensors",
    "model_arrays",
    "original_kind",
    "read_bundle",
    "read_manifest",
    "read_original",
    "read_safetensors",
    "save_bundle",
    "save_safetensors",
    "strict_json",
    "tensors_digest",
    "validate_bundle",
    "write_bundle",
    "write_safetensors",
]
