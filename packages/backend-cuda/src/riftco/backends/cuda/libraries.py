"""Finding the CUDA libraries before anything opens them.

libcuda comes with the NVIDIA driver and is found by the system loader. NVRTC
and cuBLAS usually come from the NVIDIA wheels (``nvidia-cuda-nvrtc``,
``nvidia-cublas``), which put them in ``site-packages/nvidia/<name>/lib``, a
folder the loader does not search: each is loaded here by its path with
``RTLD_GLOBAL``, so that the native module's own ``dlopen`` by soname finds
the copy already in the process. Nothing here raises: what was tried and what
was found is recorded, and the native probe (asked exactly as the loader will
be) decides.
"""

from __future__ import annotations

import ctypes
import os
import site
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

#: Folders searched first, ``os.pathsep``-separated.
LIBRARY_PATH_VAR = "RIFTCO_CUDA_LIBRARY_PATH"

#: The wheel-provided libraries, in load order (cuBLAS needs cuBLASLt), with the
#: sonames looked for (CUDA 13, then 12).
WHEEL_LIBRARIES: dict[str, tuple[str, ...]] = {
    "nvrtc": ("libnvrtc.so.13", "libnvrtc.so.12"),
    "cublasLt": ("libcublasLt.so.13", "libcublasLt.so.12"),
    "cublas": ("libcublas.so.13", "libcublas.so.12"),
}

#: What to install for each library.
INSTALL_HINT = {
    "cuda": "install an NVIDIA driver (libcuda.so.1 comes with it)",
    "nvrtc": "pip install nvidia-cuda-nvrtc",
    "cublasLt": "pip install nvidia-cublas",
    "cublas": "pip install nvidia-cublas",
}


@dataclass
class LibrarySearch:
    """One library: the folders and files tried, and the file loaded (if any)."""

    name: str
    tried: list[str] = field(default_factory=list)
    loaded: Path | None = None
    error: str | None = None


def wheel_library_dirs() -> list[Path]:
    """``RIFTCO_CUDA_LIBRARY_PATH``, then every ``nvidia/*/lib`` under the import path
    and the site-packages folders, in order, without repeats."""
    dirs: list[Path] = [
        Path(p) for p in os.environ.get(LIBRARY_PATH_VAR, "").split(os.pathsep) if p
    ]
    roots: list[str] = list(sys.path)
    try:
        roots += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # some embedded interpreters lack these
        pass
    for root in roots:
        nvidia = Path(root or ".") / "nvidia"
        if nvidia.is_dir():
            dirs.extend(sorted(p for p in nvidia.glob("*/lib") if p.is_dir()))
    seen: set[Path] = set()
    unique = []
    for d in dirs:
        key = d.resolve() if d.exists() else d
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return unique


_lock = threading.Lock()
_searches: dict[str, LibrarySearch] | None = None


def preload() -> dict[str, LibrarySearch]:
    """Load each wheel library found by path (once per process, under a lock)."""
    global _searches
    with _lock:
        if _searches is None:
            _searches = _preload(wheel_library_dirs())
        return _searches


def _preload(dirs: list[Path]) -> dict[str, LibrarySearch]:
    found: dict[str, LibrarySearch] = {}
    for name, sonames in WHEEL_LIBRARIES.items():
        search = LibrarySearch(name)
        for d in dirs:
            for soname in sonames:
                path = d / soname
                search.tried.append(str(path))
                if not path.is_file():
                    continue
                try:
                    ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
                except OSError as exc:
                    search.error = f"{path}: {exc}"
                    continue
                search.loaded = path
                break
            if search.loaded is not None:
                break
        found[name] = search
    return found


def missing_reason(stem: str, dlopen_names: list[str], search: LibrarySearch | None) -> str:
    """Why ``lib<stem>`` is unavailable: the paths tried and the names dlopen tried."""
    parts = [f"lib{stem}.so could not be opened"]
    if search is not None:
        tried = ", ".join(search.tried) if search.tried else "no nvidia/*/lib folder on the path"
        parts.append(f"looked for the NVIDIA wheel's copy at: {tried}")
        if search.error:
            parts.append(f"loading failed: {search.error}")
    names = list(dict.fromkeys(dlopen_names))
    shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    parts.append(f"dlopen tried {shown}")
    parts.append(f"fix: {INSTALL_HINT.get(stem, 'install the CUDA libraries')}")
    return "; ".join(parts)


__all__ = [
    "INSTALL_HINT",
    "LIBRARY_PATH_VAR",
    "WHEEL_LIBRARIES",
    "LibrarySearch",
    "missing_reason",
    "preload",
    "wheel_library_dirs",
]


#: The CUDA version the native module is built against (cudarc's ``cuda-13000``):
#: a driver reporting less (``cuDriverGetVersion``) cannot run its cuBLAS or its
#: driver calls, so ``cuda`` is unavailable there.
REQUIRED_DRIVER_VERSION = 13000


def version_text(version: int) -> str:
    """``13000`` -> ``13.0`` (cuDriverGetVersion's 1000 * major + 10 * minor)."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def driver_version() -> int | None:
    """The CUDA version the installed driver supports (``cuDriverGetVersion``, which
    needs no ``cuInit`` and no GPU), or None when libcuda cannot be opened or asked."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        value = ctypes.c_int(0)
        status = lib.cuDriverGetVersion(ctypes.byref(value))
    except (OSError, AttributeError):
        return None
    return int(value.value) if status == 0 else None


def driver_too_old(version: int | None, required: int = REQUIRED_DRIVER_VERSION) -> str | None:
    """Why a driver of ``version`` cannot run this build, or None when it can (or
    when the version is unknown: the driver's own errors then say why)."""
    if version is None or version >= required:
        return None
    return (
        f"the NVIDIA driver supports CUDA {version_text(version)} (cuDriverGetVersion "
        f"{version}); this build of riftco-backend-cuda needs CUDA {version_text(required)} "
        f"or newer ({required}): update the NVIDIA driver"
    )
