"""The dtypes a tensor can have."""

from __future__ import annotations

import builtins
import enum

import ml_dtypes
import numpy as np


class DType(enum.Enum):
    """A tensor element type; ``.numpy`` is the matching numpy dtype."""

    float32 = "float32"
    int64 = "int64"
    bool = "bool"
    uint8 = "uint8"
    #: The upper half of a float32 (8 exponent, 7 mantissa bits), for mixed
    #: precision; its numpy dtype is ``ml_dtypes.bfloat16``.
    bfloat16 = "bfloat16"

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY[self]

    @property
    def is_floating(self) -> builtins.bool:
        return self is DType.float32 or self is DType.bfloat16

    def __repr__(self) -> str:
        return f"riftco.tensor.{self.value}"


_NUMPY: dict[DType, np.dtype] = {
    DType.float32: np.dtype(np.float32),
    DType.int64: np.dtype(np.int64),
    DType.bool: np.dtype(np.bool_),
    DType.uint8: np.dtype(np.uint8),
    DType.bfloat16: np.dtype(ml_dtypes.bfloat16),
}
_FROM_NUMPY = {v: k for k, v in _NUMPY.items()}

float32 = DType.float32
int64 = DType.int64
bool_ = DType.bool
uint8 = DType.uint8
bfloat16 = DType.bfloat16


def as_dtype(value: DType | str | np.dtype | type) -> DType:
    """Accept a DType, its name, or a numpy dtype (float64 and int32 map to float32, int64;
    ``ml_dtypes.bfloat16`` is bfloat16)."""
    from riftco.tensor.errors import DTypeError

    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in DType.__members__:
        return DType[value]
    try:
        np_dtype = np.dtype(value)
    except TypeError:
        raise DTypeError(
            f"expected a dtype (float32, int64, bool, uint8, bfloat16), found {value!r}"
        ) from None
    if np_dtype in _FROM_NUMPY:
        return _FROM_NUMPY[np_dtype]
    if np_dtype.kind == "f":
        return DType.float32
    if np_dtype.kind in "iu" and np_dtype != np.dtype(np.uint8):
        return DType.int64
    raise DTypeError(f"expected a dtype (float32, int64, bool, uint8, bfloat16), found {np_dtype}")
