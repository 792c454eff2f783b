"""Backend discovery through the ``riftco.backends`` entry-point group.

Registration is an entry point (name -> factory); nothing loads until a
backend is first needed. Discovery then runs once, under a lock: each
factory is called, and a plugin that is missing a library, raises, or
declares another major API version is recorded with its reason instead of
breaking anything. A backend asked for by name that is not available raises
``BackendUnavailable`` with that reason.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from importlib.metadata import entry_points

from riftco.tensor.backend import BACKEND_API_VERSION, Backend
from riftco.tensor.errors import BackendUnavailable

GROUP = "riftco.backends"
#: Accelerators ``auto`` prefers, best first; otherwise cpu.
AUTO_PRIORITY = ("cuda", "metal", "tpu")
ENV_VAR = "RIFTCO_BACKEND"


@dataclass(frozen=True)
class BackendInfo:
    """What discovery found for one registered backend."""

    name: str
    available: bool
    reason: str
    description: str
    source: str
    api_version: tuple[int, int] | None
    runs_on_host: bool | None


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: dict[str, Backend] | None = None
        self._infos: dict[str, BackendInfo] = {}

    def reset(self) -> None:
        """Forget what discovery found (tests patch entry points, then reset)."""
        with self._lock:
            self._loaded = None
            self._infos = {}

    def _discover(self) -> dict[str, Backend]:
        loaded = self._loaded
        if loaded is not None:
            return loaded
        with self._lock:
            if self._loaded is None:
                self._loaded = self._load_all()
            return self._loaded

    def _load_all(self) -> dict[str, Backend]:
        loaded: dict[str, Backend] = {}
        for ep in sorted(entry_points(group=GROUP), key=lambda ep: ep.name):
            if ep.name in self._infos:
                continue  # first registration of a name wins
            source = ep.dist.name if ep.dist is not None else ep.value
            try:
                backend = ep.load()()
                reason = _incompatibility(backend)
            except Exception as exc:  # a broken plugin never breaks discovery
                self._infos[ep.name] = BackendInfo(
                    ep.name, False, f"{type(exc).__name__}: {exc}", "", source, None, None
                )
                continue
            available = reason is None
            self._infos[ep.name] = BackendInfo(
                ep.name,
                available,
                reason or "",
                backend.describe() if available else "",
                source,
                tuple(getattr(backend, "api_version", ())) or None,
                getattr(backend, "runs_on_host", None),
            )
            if available:
                loaded[ep.name] = backend
        return loaded

    def infos(self) -> list[BackendInfo]:
        self._discover()
        return list(self._infos.values())

    def get(self, name: str | None = None) -> Backend:
        loaded = self._discover()
        if name is None:
            name = os.environ.get(ENV_VAR) or "auto"
        if name == "auto":
            for candidate in AUTO_PRIORITY:
                backend = loaded.get(candidate)
                if backend is not None and not backend.runs_on_host:
                    return backend
            name = "cpu"
        backend = loaded.get(name)
        if backend is not None:
            return backend
        info = self._infos.get(name)
        if info is None:
            known = ", ".join(sorted(self._infos)) or "none"
            raise BackendUnavailable(
                f"backend {name!r} is not installed (registered backends: {known}); "
                f"install its plugin package, e.g. riftco-backend-{name}"
            )
        raise BackendUnavailable(
            f"backend {name!r} from {info.source} is unavailable: {info.reason}; "
            "run `riftco backends` to see every backend and why"
        )


def _incompatibility(backend: object) -> str | None:
    if not isinstance(backend, Backend):
        return f"factory returned {type(backend).__name__}, not a riftco.tensor.Backend"
    version = tuple(getattr(backend, "api_version", ()))
    if len(version) != 2 or version[0] != BACKEND_API_VERSION[0]:
        return (
            f"implements backend API {version}, this riftco-tensor needs major "
            f"version {BACKEND_API_VERSION[0]} (API {BACKEND_API_VERSION})"
        )
    return None


REGISTRY = _Registry()


def backends() -> list[BackendInfo]:
    """Every registered backend, available or not, with the reason."""
    return REGISTRY.infos()


def get_backend(name: str | Backend | None = None) -> Backend:
    """The backend called ``name``; ``None`` reads RIFTCO_BACKEND, defaulting to ``auto``."""
    if isinstance(name, Backend):
        return name
    return REGISTRY.get(name)


def reset_discovery() -> None:
    """Run discovery again on next use (after entry points changed)."""
    REGISTRY.reset()
