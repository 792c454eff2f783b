"""riftco.backends.cuda: a riftco backend for NVIDIA GPUs.

The CUDA driver (libcuda) comes with the NVIDIA driver; NVRTC and cuBLAS come
from the NVIDIA wheels (``nvidia-cuda-nvrtc``, ``nvidia-cublas``) or the
system. Kernels are CUDA C compiled by NVRTC on first use and cached on disk.
Without a GPU or a library the package still imports and ``cuda`` is listed
unavailable with the reason.

>>> import riftco.tensor as rt
>>> x = rt.tensor([1.0, 2.0], backend="cuda")  # on a machine with a GPU
"""

from __future__ import annotations

__version__ = "0.1.0"

from riftco.backends.cuda import _native

if _native.__version__ != __version__:
    raise ImportError(
        f"riftco.backends.cuda {__version__} found its native module at version "
        f"{_native.__version__} ({_native.__file__}); reinstall riftco-backend-cuda so both "
        "come from one build"
    )

import os

from riftco.backends.cuda import libraries
from riftco.backends.cuda.backend import API_VERSION, CudaBackend
from riftco.backends.cuda.errors import CudaDeviceLost, CudaError
from riftco.backends.cuda.libraries import LibrarySearch, missing_reason, preload
from riftco.tensor.plugin import BackendUnavailable

#: The GPU the backend opens (default 0).
DEVICE_VAR = "RIFTCO_CUDA_DEVICE"


def native_build_id() -> str:
    """The build id of the compiled CUDA bindings (checked against the wheelhouse)."""
    return _native.BUILD_ID


def library_status() -> list[tuple[str, bool, str]]:
    """``(library, usable, where or why not)`` for libcuda, libnvrtc, libcublas and
    libcublasLt, after loading the NVIDIA wheels' copies; never raises."""
    searches = preload()
    out = []
    for stem, present, names in _native.probe_libraries():
        search = searches.get(stem)
        if present:
            where = str(search.loaded) if search and search.loaded else "found by the system loader"
            out.append((stem, True, where))
        else:
            out.append((stem, False, missing_reason(stem, names, search)))
    return out


def create_backend() -> CudaBackend:
    """Entry-point factory for ``cuda``: load the libraries, open the GPU.

    Raises ``BackendUnavailable`` with the reason (which library, which paths were
    tried; a driver older than the build's CUDA, with both versions; no GPU; the
    driver's error) when it cannot.
    """
    missing = [why for _, usable, why in library_status() if not usable]
    if missing:
        raise BackendUnavailable(" | ".join(missing))
    too_old = libraries.driver_too_old(libraries.driver_version())
    if too_old:
        raise BackendUnavailable(too_old)
    try:
        count = _native.device_count()
    except CudaError as exc:
        raise BackendUnavailable(f"the CUDA driver failed to initialize: {exc}") from exc
    if count == 0:
        raise BackendUnavailable("the CUDA driver reports no GPU")
    ordinal = int(os.environ.get(DEVICE_VAR, "0"))
    try:
        device = _native.Device(ordinal, _native.default_cache_dir())
    except CudaError as exc:
        raise BackendUnavailable(f"CUDA device {ordinal} could not be opened: {exc}") from exc
    return CudaBackend(device, preload())


__all__ = [
    "API_VERSION",
    "DEVICE_VAR",
    "CudaBackend",
    "CudaDeviceLost",
    "CudaError",
    "LibrarySearch",
    "create_backend",
    "library_status",
    "native_build_id",
]
