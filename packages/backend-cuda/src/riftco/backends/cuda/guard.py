"""The device as the ops see it: every call to ``_native.Device`` (or a stand-in)
goes through ``GuardedDevice``, which

- after a sticky error (the context is unusable: an illegal address, a failed or
  timed-out launch, ...) raises ``CudaDeviceLost`` on that call and every later one,
  saying which call lost it, instead of the driver's error again or a hang;
- with ``RIFTCO_CUDA_SYNC=1`` synchronizes after every kernel launch and product
  (not while a graph is being captured), so an asynchronous fault is raised by the
  launch that caused it, naming its module and kernel.
"""

from __future__ import annotations

import os
from typing import Any

from riftco.backends.cuda.errors import CudaDeviceLost, CudaError

#: Set to 1 to synchronize after every launch (slow: for finding a faulting kernel).
SYNC_VAR = "RIFTCO_CUDA_SYNC"

#: Driver errors after which the CUDA context cannot be used again.
STICKY = (
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_LAUNCH_TIMEOUT",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_ASSERT",
    "CUDA_ERROR_ECC_UNCORRECTABLE",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED",
)

#: Calls that enqueue work a fault can come from (synchronized under SYNC_VAR).
_WORK = frozenset({"launch", "gemm", "gemm_epilogue"})


def is_sticky(error: BaseException) -> bool:
    text = str(error)
    return any(name in text for name in STICKY)


class GuardedDevice:
    """Wraps a device; attribute reads pass through, method calls are guarded."""

    def __init__(self, device: Any, sync: bool | None = None) -> None:
        self._device = device
        self._sync = os.environ.get(SYNC_VAR, "") == "1" if sync is None else sync
        self._lost: str | None = None
        self._capturing = False

    @property
    def inner(self) -> Any:
        return self._device

    @property
    def lost(self) -> str | None:
        """Why the device is lost (the call and the driver's error), or None."""
        return self._lost

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._device, name)
        if not callable(value):
            return value

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self._lost is not None:
                raise CudaDeviceLost(
                    f"the CUDA device is lost ({self._lost}); nothing can run on it again in "
                    "this process: restart it"
                )
            what = _describe(name, args)
            try:
                result = value(*args, **kwargs)
                if name == "begin_capture":
                    self._capturing = True
                elif name == "end_capture":
                    self._capturing = False
                if self._sync and name in _WORK and not self._capturing:
                    try:
                        self._device.synchronize()
                    except CudaError as exc:
                        raise CudaError(f"{what} failed on the device: {exc}") from exc
                return result
            except CudaError as exc:
                if is_sticky(exc):
                    self._lost = f"{what}: {exc}"
                    raise CudaDeviceLost(
                        f"the CUDA device is lost at {what}: {exc}; nothing can run on it "
                        "again in this process"
                    ) from exc
                raise

        return guarded


def _describe(name: str, args: tuple) -> str:
    if name == "launch" and len(args) >= 2:
        return f"kernel {args[1]} of module {args[0]}"
    if name == "gemm" and args:
        return f"a {args[0]} cuBLAS product"
    if name == "gemm_epilogue" and len(args) >= 8:
        return f"a {args[0]} cuBLASLt product with epilogue {args[7]}"
    return name


__all__ = ["STICKY", "SYNC_VAR", "GuardedDevice", "is_sticky"]
