"""Errors of the wgpu backend."""

from __future__ import annotations

from riftco.tensor.plugin import KernelError


class GpuError(KernelError):
    """wgpu refused a kernel, a buffer or a transfer, the device reported an error,
    or an operand is outside what the backend supports."""


__all__ = ["GpuError"]
