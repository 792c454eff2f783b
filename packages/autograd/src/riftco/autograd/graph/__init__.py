"""The recorded graph and the reverse-mode traversal over it."""

from riftco.autograd.graph.backward import backward, grad
from riftco.autograd.graph.node import Node, saved_values

__all__ = ["Node", "backward", "grad", "saved_values"]
