"""Every differentiable operation, as a function over Variables, Tensors and scalars.

Names mirror riftco.tensor's ops. Tensors and scalars are constants; the result is
a Variable that records its operation when grad mode is on and some operand
requires gradients. Comparisons, logical ops and argmax return Variables that need
no gradient.
"""

from riftco.autograd.functional.binary import (
    add,
    div,
    eq,
    ge,
    gt,
    le,
    logical_and,
    logical_not,
    logical_or,
    lt,
    maximum,
    minimum,
    mul,
    ne,
    pow,
    sub,
    where,
)
from riftco.autograd.functional.indexing import (
    embedding,
    gather,
    index_add,
    index_select,
    scatter_add,
)
from riftco.autograd.functional.layout import (
    astype,
    broadcast_to,
    concatenate,
    copy,
    flatten,
    getitem,
    narrow,
    permute,
    reshape,
    squeeze,
    stack,
    sum_to_shape,
    to,
    transpose,
    unsqueeze,
)
from riftco.autograd.functional.linalg import matmul
from riftco.autograd.functional.reduction import (
    argmax,
    log_softmax,
    max,
    mean,
    min,
    softmax,
    sum,
    sum_squares,
)
from riftco.autograd.functional.unary import (
    abs,
    exp,
    gelu,
    log,
    neg,
    relu,
    rsqrt,
    sigmoid,
    silu,
    sqrt,
    tanh,
)

__all__ = [
    "abs",
    "add",
    "argmax",
    "astype",
    "broadcast_to",
    "concatenate",
    "copy",
    "div",
    "embedding",
    "eq",
    "exp",
    "flatten",
    "gather",
    "ge",
    "gelu",
    "getitem",
    "gt",
    "index_add",
    "index_select",
    "le",
    "log",
    "log_softmax",
    "logical_and",
    "logical_not",
    "logical_or",
    "lt",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mul",
    "narrow",
    "ne",
    "neg",
    "permute",
    "pow",
    "relu",
    "reshape",
    "rsqrt",
    "scatter_add",
    "sigmoid",
    "silu",
    "softmax",
    "sqrt",
    "squeeze",
    "stack",
    "sub",
    "sum",
    "sum_squares",
    "sum_to_shape",
    "tanh",
    "to",
    "transpose",
    "unsqueeze",
    "where",
]


def _install_methods() -> None:
    """Attach the operations to Variable as methods and Python operators."""
    from riftco.autograd.variable import Variable

    def reflected(fn):
        def method(self, other):
            return fn(other, self)

        return method

    names = [
        "reshape",
        "permute",
        "transpose",
        "narrow",
        "broadcast_to",
        "sum_to_shape",
        "unsqueeze",
        "squeeze",
        "flatten",
        "astype",
        "copy",
        "to",
        "neg",
        "abs",
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "tanh",
        "sigmoid",
        "relu",
        "gelu",
        "silu",
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "maximum",
        "minimum",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "logical_and",
        "logical_or",
        "logical_not",
        "sum",
        "mean",
        "max",
        "min",
        "argmax",
        "sum_squares",
        "matmul",
        "index_select",
        "index_add",
        "gather",
        "scatter_add",
        "softmax",
        "log_softmax",
    ]
    namespace = globals()
    for name in names:
        setattr(Variable, name, namespace[name])
    operators = {
        "__getitem__": getitem,
        "__neg__": neg,
        "__abs__": abs,
        "__invert__": logical_not,
        "__add__": add,
        "__sub__": sub,
        "__mul__": mul,
        "__truediv__": div,
        "__pow__": pow,
        "__matmul__": matmul,
        "__radd__": reflected(add),
        "__rsub__": reflected(sub),
        "__rmul__": reflected(mul),
        "__rtruediv__": reflected(div),
        "__rpow__": reflected(pow),
        "__rmatmul__": reflected(matmul),
        "__eq__": eq,
        "__ne__": ne,
        "__lt__": lt,
        "__le__": le,
        "__gt__": gt,
        "__ge__": ge,
        "__and__": logical_and,
        "__or__": logical_or,
    }
    for name, fn in operators.items():
        setattr(Variable, name, fn)
    Variable.T = property(lambda self: transpose(self, -2, -1))  # type: ignore[attr-defined]


_install_methods()
