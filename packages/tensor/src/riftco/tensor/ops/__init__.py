"""Every tensor op, defined once: shape and dtype checks, output shape, dispatch."""

from ._common import broadcast_shapes, check_same_backend
from .elementwise import (
    abs, add, div, eq, exp, ge, gelu, gt, le, log, logical_and, logical_not, logical_or, lt,
    maximum, minimum, mul, ne, neg, pow, relu, rsqrt, sigmoid, silu, sqrt, sub, tanh, where,
)
from .indexing import embedding, gather, index_add, index_select, scatter_add
from .layout import (
    astype, broadcast_to, concatenate, copy, flatten, getitem, narrow, permute, reshape,
    squeeze, stack, sum_to_shape, transpose, unsqueeze,
)
from .linalg import matmul
from .reduction import argmax, log_softmax, max, mean, min, softmax, sum, sum_squares

__all__ = [
    "abs", "add", "argmax", "astype", "broadcast_shapes", "broadcast_to", "check_same_backend",
    "concatenate", "copy", "div", "embedding", "eq", "exp", "flatten", "gather", "ge", "gelu",
    "getitem", "gt", "index_add", "index_select", "le", "log", "log_softmax", "logical_and",
    "logical_not", "logical_or", "lt", "matmul", "max", "maximum", "mean", "min", "minimum",
    "mul", "narrow", "ne", "neg", "permute", "pow", "relu", "reshape", "rsqrt", "scatter_add",
    "sigmoid", "silu", "softmax", "sqrt", "squeeze", "stack", "sub", "sum", "sum_squares",
    "sum_to_shape", "tanh", "transpose", "unsqueeze", "where",
]
