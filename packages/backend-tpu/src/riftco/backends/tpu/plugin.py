"""Finding the PJRT plugin library to load.

Lookup order (the first that names something wins):

1. ``RIFTCO_PJRT_PLUGIN``: a path to any PJRT plugin library, or the name of
   an installed Python distribution that ships one (``xla-cpu-pjrt`` for
   XLA's CPU plugin, ``jax-cuda13-pjrt`` for the CUDA plugin, ``libtpu``).
   An explicit choice that cannot be found is an error, not a fall-through.
2. ``RIFTCO_TPU_LIBRARY``: a path to ``libtpu.so``.
3. ``TPU_LIBRARY_PATH``: the variable libtpu's own tools read.
4. The ``libtpu`` Python package (``pip install libtpu``), if installed.
5. ``libtpu.so`` in a directory of the dynamic loader path
   (``LD_LIBRARY_PATH``, then the system library directories).

An installed ``xla-cpu-pjrt`` is never picked up by itself: a host-CPU
plugin must be asked for, so that installing it for tests does not give
every test suite in the environment a second CPU backend.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from riftco.tensor.plugin import BackendUnavailable

PLUGIN_VAR = "RIFTCO_PJRT_PLUGIN"
TPU_VARS = ("RIFTCO_TPU_LIBRARY", "TPU_LIBRARY_PATH")
LIBTPU = "libtpu.so"
SYSTEM_LIBRARY_DIRS = (
    "/usr/local/lib",
    "/usr/lib",
    "/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
)
_SUFFIXES = (".so", ".dylib", ".dll")


@dataclass(frozen=True)
class PluginLocation:
    """A plugin library and how it was found (for ``describe()`` and errors)."""

    path: Path
    source: str


def _is_library(p: Path) -> bool:
    return p.is_file() and (p.suffix in _SUFFIXES or ".so." in p.name)


def _looks_like_a_path(value: str) -> bool:
    return os.sep in value or value.endswith(_SUFFIXES) or Path(value).exists()


def distribution_library(name: str) -> Path | None:
    """The PJRT plugin library inside the installed distribution ``name``."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    libraries = [
        Path(str(dist.locate_file(f)))
        for f in dist.files or []
        if str(f).endswith(_SUFFIXES) and "/nvidia/" not in f"/{f}"
    ]
    libraries = [p for p in libraries if p.is_file()]
    if not libraries:
        return None

    def rank(p: Path) -> tuple[int, str]:
        name = p.name.lower()
        hint = any(word in name for word in ("pjrt", "plugin", "libtpu"))
        return (0 if hint else 1, str(p))

    return sorted(libraries, key=rank)[0]


def _libtpu_package() -> Path | None:
    spec = importlib.util.find_spec("libtpu")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / LIBTPU
        if candidate.is_file():
            return candidate
    return None


def _loader_path() -> Path | None:
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    for d in [*dirs, *SYSTEM_LIBRARY_DIRS]:
        candidate = Path(d) / LIBTPU
        if candidate.is_file():
            return candidate
    return None


def find_plugin(environ: os._Environ[str] | dict[str, str] | None = None) -> PluginLocation:
    """Where the plugin is, by the lookup order above; ``BackendUnavailable`` otherwise."""
    env = os.environ if environ is None else environ
    chosen = env.get(PLUGIN_VAR, "").strip()
    if chosen:
        if _looks_like_a_path(chosen):
            path = Path(chosen).expanduser()
            if not _is_library(path):
                raise BackendUnavailable(f"{PLUGIN_VAR}={chosen} is not a shared library file")
            return PluginLocation(path, f"{PLUGIN_VAR}")
        packaged = distribution_library(chosen)
        if packaged is None:
            raise BackendUnavailable(
                f"{PLUGIN_VAR}={chosen}: no installed distribution of that name ships a "
                f"plugin library (pip install {chosen}, or give a path)"
            )
        return PluginLocation(packaged, f"{PLUGIN_VAR} (package {chosen})")
    for var in TPU_VARS:
        value = env.get(var, "").strip()
        if value:
            path = Path(value).expanduser()
            if not _is_library(path):
                raise BackendUnavailable(f"{var}={value} is not a shared library file")
            return PluginLocation(path, var)
    found = _libtpu_package()
    if found is not None:
        return PluginLocation(found, "the libtpu package")
    found = _loader_path()
    if found is not None:
        return PluginLocation(found, "the library path")
    raise BackendUnavailable(
        "no PJRT plugin found: not on a Cloud TPU VM (no libtpu: RIFTCO_TPU_LIBRARY, "
        "TPU_LIBRARY_PATH, the libtpu package and the library path were tried); set "
        f"{PLUGIN_VAR} to a plugin library or package, e.g. {PLUGIN_VAR}=xla-cpu-pjrt"
    )
