"""riftco.tensor.plugin: the one module a backend plugin imports from riftco-tensor.

A plugin subclasses ``Backend`` and overrides the capabilities it has (each method's
docstring is its contract); riftco.tensor hands it only ``Storage`` handles it made
itself, with ``Shape`` tuples and ``DType`` values it has already checked. Everything
else a plugin needs is here too:

- its declarations: ``ENTRY_POINT_GROUP`` (where its factory registers, as
  ``name = "module:factory"``), ``BACKEND_API_VERSION``, ``CAPABILITIES`` (name -> the API minor
  that introduced it), ``BASE_DTYPES`` (what every storage holds; ``Backend.dtypes``
  may add bfloat16), ``overridden_capabilities``;
- the errors it raises (all ``RiftcoError``): ``BackendUnavailable`` from its entry
  point when there is no device, ``KernelError`` when a kernel refuses or fails,
  ``DTypeError`` / ``ShapeError`` for operands it does not take, ``CapabilityMissing``
  (raised for it by the base class, with the text of ``Backend.missing_hint`` appended:
  override that hook, returning what the user can do instead);
- the op vocabularies, name -> numpy reference formula (``UNARY``, ``BINARY``,
  ``COMPARISONS``, ``REDUCTIONS``, ``ACTIVATION_GRADIENTS``, which dtypes take which
  ops, and ``check_kernel_table``): a kernel is looked up by the op's name, never by
  its position in a list;
- stride helpers for kernels that read views: ``contiguous_strides``,
  ``broadcast_strides`` (an operand broadcast into an output shape) and ``coalesce``
  (fewer axes for the same view).

Tests of a plugin use ``riftco.testing``: ``run_backend_suite`` (riftco-tensor's op
suite on the backend) and ``check_model_against_cpu`` (a tiny model trained a step).
"""

from __future__ import annotations

from riftco.tensor.backend import (
    BACKEND_API_VERSION,
    BASE_DTYPES,
    CAPABILITIES,
    Backend,
    Shape,
    Storage,
    overridden_capabilities,
)
from riftco.tensor.dtypes import DType, as_dtype
from riftco.tensor.errors import (
    BackendUnavailable,
    CapabilityMissing,
    DTypeError,
    IndexOutOfRange,
    KernelError,
    RiftcoError,
    ShapeError,
)
from riftco.tensor.ops.decode import undecodable
from riftco.tensor.ops.vocabulary import (
    ACTIVATION_GRADIENTS,
    BINARY,
    BOOL_COMPARISONS,
    BOOL_UNARY,
    COMPARISONS,
    FLOAT_UNARY,
    INTEGER_BINARY,
    INTEGER_REDUCTIONS,
    INTEGER_UNARY,
    ORDERINGS,
    REDUCTIONS,
    UNARY,
    VOCABULARIES,
    Formula,
    check_kernel_table,
)
from riftco.tensor.registry import GROUP as ENTRY_POINT_GROUP
from riftco.tensor.strides import broadcast_strides, coalesce, contiguous_strides

__all__ = [
    "ACTIVATION_GRADIENTS",
    "BACKEND_API_VERSION",
    "BASE_DTYPES",
    "BINARY",
    "BOOL_COMPARISONS",
    "BOOL_UNARY",
    "CAPABILITIES",
    "COMPARISONS",
    "ENTRY_POINT_GROUP",
    "FLOAT_UNARY",
    "INTEGER_BINARY",
    "INTEGER_REDUCTIONS",
    "INTEGER_UNARY",
    "ORDERINGS",
    "REDUCTIONS",
    "UNARY",
    "VOCABULARIES",
    "Backend",
    "BackendUnavailable",
    "CapabilityMissing",
    "DType",
    "DTypeError",
    "Formula",
    "IndexOutOfRange",
    "KernelError",
    "RiftcoError",
    "Shape",
    "ShapeError",
    "Storage",
    "as_dtype",
    "broadcast_strides",
    "check_kernel_table",
    "coalesce",
    "contiguous_strides",
    "overridden_capabilities",
    "undecodable",
]
