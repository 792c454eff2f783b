"""Paged attention, defined in riftco.tensor (one definition per op) and named here
for the cache code."""

from riftco.tensor.ops.paged import paged_attention
from riftco.tensor.ops.paged import paged_attention_unchecked as dispatch

__all__ = ["dispatch", "paged_attention"]
