"""SafeTensors import and export of a state dict.

A state dict maps dotted parameter names to numpy arrays, ``riftco.tensor.Tensor``
values or anything else with a ``numpy()`` method (autograd variables and
parameters). Export writes them under the same names; import gives numpy arrays,
which ``Module.load_state_dict`` accepts. The header is validated with the
bounded reader of :mod:`riftco.interchange.container` before any data is touched.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from riftco.interchange.container import read_safetensors, write_safetensors
from riftco.interchange.errors import ContainerError


def to_numpy(name: str, value: Any) -> np.ndarray:
    """``value`` as a numpy array: arrays pass through, tensors and variables are read."""
    if isinstance(value, np.ndarray):
        return value
    reader = getattr(value, "numpy", None)
    if callable(reader):
        array = reader()
        if isinstance(array, np.ndarray):
            return array
    raise ContainerError(
        f"{name}: expected a numpy array, Tensor or Variable; found {type(value).__name__}"
    )


def state_dict_arrays(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Every value of ``state_dict`` as a numpy array, names unchanged."""
    return {name: to_numpy(name, value) for name, value in state_dict.items()}


def save_safetensors(
    path: str | os.PathLike[str],
    state_dict: Mapping[str, Any],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``state_dict`` (e.g. ``model.state_dict()``) to ``path`` atomically."""
    write_safetensors(path, state_dict_arrays(state_dict), metadata)


def load_safetensors(path: str | os.PathLike[str], copy: bool = True) -> dict[str, np.ndarray]:
    """Read every tensor of ``path``; ``copy=False`` gives read-only views of a mapping."""
    return read_safetensors(path).arrays(copy=copy)


def read_safetensors_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The ``__metadata__`` of ``path`` (validated like the rest of the header)."""
    return dict(read_safetensors(path).metadata)
