"""Errors of the CUDA backend."""

from __future__ import annotations

from riftco.tensor.errors import KernelError


class CudaError(KernelError):
    """The driver, NVRTC or cuBLAS refused a call, a kernel failed, an index was out
    of range, or an operand is outside what the backend supports."""


__all__ = ["CudaError"]
