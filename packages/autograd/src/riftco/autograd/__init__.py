"""riftco.autograd: reverse-mode differentiation over riftco.tensor.

>>> import riftco.tensor as rt
>>> from riftco.autograd import Variable
>>> x = Variable(rt.tensor(2.0), requires_grad=True)
>>> y = Variable(rt.tensor(3.0), requires_grad=True)
>>> z = x * y + x
>>> z.backward()
>>> x.grad.item(), y.grad.item()
(4.0, 2.0)
"""

from __future__ import annotations

__version__ = "0.1.0"

from riftco.autograd import functional
from riftco.autograd.checkpoint import checkpoint
from riftco.autograd.custom import custom_gradient, custom_gradients
from riftco.autograd.errors import GradientError, StaleGraphError
from riftco.autograd.functional.binary import *  # noqa: F403
from riftco.autograd.functional.indexing import *  # noqa: F403
from riftco.autograd.functional.layout import *  # noqa: F403
from riftco.autograd.functional.linalg import *  # noqa: F403
from riftco.autograd.functional.reduction import *  # noqa: F403
from riftco.autograd.functional.unary import *  # noqa: F403
from riftco.autograd.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from riftco.autograd.gradcheck import GradcheckResult, gradcheck
from riftco.autograd.graph import backward, grad
from riftco.autograd.variable import Parameter, Variable, rebind_epoch

__all__ = [
    "GradcheckResult",
    "GradientError",
    "Parameter",
    "StaleGraphError",
    "Variable",
    "backward",
    "checkpoint",
    "custom_gradient",
    "custom_gradients",
    "enable_grad",
    "functional",
    "grad",
    "gradcheck",
    "is_grad_enabled",
    "no_grad",
    "rebind_epoch",
    "set_grad_enabled",
]
__all__ += functional.__all__
