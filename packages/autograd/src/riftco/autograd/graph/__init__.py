"""The recorded graph and the reverse-mode traversal over it."""

from .backward import backward, grad
from .node import Node, saved_values

__all__ = ["Node", "backward", "grad", "saved_values"]
