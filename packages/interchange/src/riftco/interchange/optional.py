"""The optional libraries behind GGUF and ONNX, imported on first use with a clear error."""

from __future__ import annotations

import importlib
from types import ModuleType

from riftco.interchange.errors import ConversionError

_EXTRAS = {"gguf": "gguf", "onnx": "onnx", "onnxruntime": "onnx"}


def require(name: str) -> ModuleType:
    """Import ``name`` (``gguf`` or ``onnx``), or say which extra installs it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        extra = _EXTRAS.get(name, name)
        raise ConversionError(
            f"this conversion needs the {name!r} package ({exc}); install it with "
            f"pip install 'riftco-interchange[{extra}]'"
        ) from None
