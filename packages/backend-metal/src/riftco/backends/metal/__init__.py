"""riftco.backends.metal: riftco backends over wgpu, from one set of WGSL kernels.

Two backends: ``metal`` (Apple GPUs, on macOS) and ``vulkan`` (any Vulkan
adapter: NVIDIA, AMD and Intel GPUs on Linux and Windows, or Mesa's software
lavapipe, which is usable by name only).

>>> import riftco.tensor as rt
>>> x = rt.tensor([1.0, 2.0], backend="vulkan")  # with a Vulkan adapter
"""

from __future__ import annotations

__version__ = "0.1.0"

import os
from typing import Any

from riftco.backends.metal import _native

if _native.__version__ != __version__:
    raise ImportError(
        f"riftco.backends.metal {__version__} found its native module at version "
        f"{_native.__version__} ({_native.__file__}); reinstall riftco-backend-metal so both "
        "come from one build"
    )

from riftco.backends.metal.backend import API_VERSION, WgpuBackend, wants_cooperative_matrix
from riftco.backends.metal.discovery import (
    ADAPTER_VAR,
    Adapter,
    driver_messages,
    find_adapter,
    quiet_stderr,
    vulkan_loader,
)
from riftco.backends.metal.errors import GpuError
from riftco.tensor.plugin import BackendUnavailable

#: Free device buffers kept for reuse (bytes); RIFTCO_WGPU_POOL_MB overrides.
POOL_VAR = "RIFTCO_WGPU_POOL_MB"
DEFAULT_POOL_MB = 1024


def native_build_id() -> str:
    """The build id of the compiled wgpu bindings (checked against the wheelhouse)."""
    return _native.BUILD_ID


def _pool_bytes() -> int:
    raw = os.environ.get(POOL_VAR, str(DEFAULT_POOL_MB))
    try:
        mb = int(raw)
    except ValueError:
        raise BackendUnavailable(
            f"{POOL_VAR} must be a whole number of MiB, found {raw!r}"
        ) from None
    return max(mb, 0) << 20


def _quiet_adapters(api: str) -> list[dict[str, Any]]:
    with quiet_stderr():
        return _native.adapters(api)


def _create(api: str) -> WgpuBackend:
    # Called by riftco-tensor's discovery the first time a process looks a backend up
    # (never at import): enumerating and opening load the Vulkan drivers, whose
    # stderr chatter is kept in driver_messages() instead of reaching the terminal.
    adapter = find_adapter(api, _quiet_adapters)
    # Cooperative matrices are experimental in wgpu: the device opens with them only for
    # the coop matmul path (RIFTCO_WGPU_MATMUL=coop), refused here where there are none.
    coop = {"cooperative_matrix": True} if wants_cooperative_matrix(adapter) else {}
    try:
        with quiet_stderr():
            device = _native.Device(api, adapter.index, _pool_bytes(), **coop)
    except GpuError as exc:
        said = "; ".join(dict.fromkeys(driver_messages()))
        raise BackendUnavailable(
            f"opening {adapter.describe()} failed: {exc}"
            + (f" (the driver said: {said})" if said else "")
        ) from exc
    return WgpuBackend(api, device, adapter)


def create_metal() -> WgpuBackend:
    """Entry-point factory for ``metal``: the Apple GPU through Metal (macOS only)."""
    return _create("metal")


def create_vulkan() -> WgpuBackend:
    """Entry-point factory for ``vulkan``: the best Vulkan adapter (a GPU before a
    software device; ``RIFTCO_WGPU_ADAPTER`` chooses)."""
    return _create("vulkan")


__all__ = [
    "ADAPTER_VAR",
    "API_VERSION",
    "Adapter",
    "GpuError",
    "WgpuBackend",
    "create_metal",
    "create_vulkan",
    "driver_messages",
    "find_adapter",
    "native_build_id",
    "vulkan_loader",
]
