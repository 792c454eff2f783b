"""Test support for riftco-tensor and every package built on it (imports pytest).

One import for a package's tests; each name lives in the module of its concept:

- riftco.testing.reference: ``NumpyReferenceBackend`` (a second backend with its own
  storage type, every capability a numpy formula), ``create_reference_backend``,
  ``REFERENCE_ENTRY_POINT``;
- riftco.testing.discovery: ``extra_entry_points`` and ``add_entry_points`` (discovery
  sees patched entry points);
- riftco.testing.fixtures: the ``backend`` fixture (every available backend: use it
  from a conftest.py with ``from riftco.testing.tensor import backend  # noqa: F401``)
  and ``backend_names()``.

Importing this module builds the fixture's parameters from discovery (see
riftco.testing.fixtures).
"""

from __future__ import annotations

from riftco.testing.discovery import add_entry_points, extra_entry_points
from riftco.testing.fixtures import backend, backend_names
from riftco.testing.reference import (
    REFERENCE_ENTRY_POINT,
    NumpyReferenceBackend,
    ReferenceStorage,
    create_reference_backend,
)
from riftco.testing.reference_formulas import attention_mask, causal_mask

__all__ = [
    "REFERENCE_ENTRY_POINT",
    "NumpyReferenceBackend",
    "ReferenceStorage",
    "add_entry_points",
    "attention_mask",
    "backend",
    "backend_names",
    "causal_mask",
    "create_reference_backend",
    "extra_entry_points",
]
