"""Errors of the CUDA backend."""

from __future__ import annotations

from riftco.tensor.plugin import DTypeError, KernelError


class CudaError(KernelError):
    """The driver, NVRTC or cuBLAS refused a call, a kernel failed, an index was out
    of range, or an operand is outside what the backend supports."""


class CudaDTypeError(CudaError, DTypeError):
    """An operand of a dtype the kernel does not take (bfloat16 where only float32
    is read): a ``DTypeError``, as riftco-tensor and the CPU backend refuse it, and a
    ``CudaError``."""


class CudaDeviceLost(CudaError):
    """A sticky error (an illegal address, a failed launch) left the CUDA context
    unusable: raised by the call that met it and by every later call."""


__all__ = ["CudaDTypeError", "CudaDeviceLost", "CudaError"]
