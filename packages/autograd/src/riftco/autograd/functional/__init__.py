"""Every differentiable operation, as a function over Variables, Tensors and scalars.

Names mirror riftco.tensor's ops (the methods both Tensor and Variable offer are
listed once, in ``riftco.tensor.tensor.METHOD_OPS``). Tensors and scalars are constants; the result is
a Variable that records its operation when grad mode is on and some operand
requires gradients. Comparisons, logical ops and argmax return Variables that need
no gradient.
"""

from riftco.autograd.functional import binary, indexing, layout, linalg, reduction, unary
from riftco.autograd.functional.binary import *  # noqa: F403
from riftco.autograd.functional.indexing import *  # noqa: F403
from riftco.autograd.functional.layout import *  # noqa: F403
from riftco.autograd.functional.linalg import *  # noqa: F403
from riftco.autograd.functional.reduction import *  # noqa: F403
from riftco.autograd.functional.unary import *  # noqa: F403

# Each submodule's __all__ is the one list its operations are named in.
__all__: list[str] = []
__all__ += binary.__all__
__all__ += indexing.__all__
__all__ += layout.__all__
__all__ += linalg.__all__
__all__ += reduction.__all__
__all__ += unary.__all__
