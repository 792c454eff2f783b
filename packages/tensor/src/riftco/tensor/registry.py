"""Backend discovery through the ``riftco.backends`` entry-point group.

Registration is an entry point (name -> factory); nothing loads until a
backend is first needed. Discovery then runs once, under a lock: each
factory is called, and a plugin that is missing a library, raises, or
declares another major API version is recorded with its reason instead of
breaking anything. A backend asked for by name that is not available raises
``BackendUnavailable`` with that reason.

``auto`` takes the available backend that does not run on the host with the
highest ``priority`` (each plugin declares its own; this module knows no
backend names but the built-in ``cpu``), and otherwise cpu.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from riftco.tensor.backend import (
    BACKEND_API_VERSION,
    BASE_DTYPES,
    CAPABILITIES,
    Backend,
    composed_capabilities,
    overridden_capabilities,
)
from riftco.tensor.dtypes import DType
from riftco.tensor.errors import BackendUnavailable, JobUnsupported, UnknownCapability

GROUP = "riftco.backends"
ENV_VAR = "RIFTCO_BACKEND"
#: The backend ``auto`` falls back to (registered by riftco-tensor itself).
DEFAULT = "cpu"


@dataclass(frozen=True)
class BackendInfo:
    """What discovery found for one registered backend. ``priority``,
    ``capabilities`` (its own kernels, in CAPABILITIES order), ``composed`` (what the op
    layer composes from those on its device, riftco.tensor.COMPOSED) and ``dtypes``
    (names, in DType order) are known for available backends only."""

    name: str
    available: bool
    reason: str
    description: str
    source: str
    api_version: tuple[int, int] | None
    runs_on_host: bool | None
    priority: int | None = None
    capabilities: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    composed: tuple[str, ...] = ()

    @property
    def missing_capabilities(self) -> tuple[str, ...]:
        """The CAPABILITIES an available backend neither implements nor gets composed."""
        if not self.available:
            return ()
        have = {*self.capabilities, *self.composed}
        return tuple(name for name in CAPABILITIES if name not in have)


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: dict[str, Backend] | None = None
        self._infos: dict[str, BackendInfo] = {}
        #: Backends looked up by name before a full discovery (only their factories ran).
        self._named: dict[str, Backend] = {}

    def reset(self) -> None:
        """Forget what discovery found (tests patch entry points, then reset)."""
        with self._lock:
            self._loaded = None
            self._infos = {}
            self._named = {}

    def _by_name(self, name: str) -> Backend | None:
        """The backend ``name`` alone, its factory run without the others' (a lookup by
        name enumerates no other plugin's devices); None when it is not available."""
        with self._lock:
            if self._loaded is not None:
                return self._loaded.get(name)
            if name not in self._infos:
                eps = [ep for ep in _entry_points() if ep.name == name]
                self._load(eps[:1], self._named)
            return self._named.get(name)

    def _discover(self) -> dict[str, Backend]:
        loaded = self._loaded
        if loaded is not None:
            return loaded
        with self._lock:
            if self._loaded is None:
                self._loaded = self._load_all()
            return self._loaded

    def _load_all(self) -> dict[str, Backend]:
        loaded: dict[str, Backend] = dict(self._named)
        self._load(_entry_points(), loaded)
        # By name, as entry points are loaded (those looked up by name first included).
        self._infos = dict(sorted(self._infos.items()))
        return {n: loaded[n] for n in self._infos if n in loaded}

    def _load(self, eps: list[Any], loaded: dict[str, Backend]) -> None:
        for ep in eps:
            if ep.name in self._infos:
                continue  # first registration of a name wins
            source = ep.dist.name if ep.dist is not None else ep.value
            try:
                backend = ep.load()()
                reason = _incompatibility(backend)
                if reason is None:
                    self._infos[ep.name] = _describe(ep.name, backend, source)
                    loaded[ep.name] = backend
                    continue
            except Exception as exc:  # a broken plugin never breaks discovery
                reason = f"{type(exc).__name__}: {exc}"
                backend = None
            self._infos[ep.name] = BackendInfo(
                ep.name,
                False,
                reason,
                "",
                source,
                tuple(getattr(backend, "api_version", ())) or None,
                getattr(backend, "runs_on_host", None),
            )

    def infos(self) -> list[BackendInfo]:
        self._discover()
        return list(self._infos.values())

    def get(self, name: str | None = None) -> Backend:
        if name is None:
            name = os.environ.get(ENV_VAR) or "auto"
        if name != "auto":
            found = self._by_name(name)
            if found is not None:
                return found
        loaded = self._discover()
        if name == "auto":
            accelerators = [(n, b) for n, b in loaded.items() if not b.runs_on_host]
            if accelerators:
                # The highest priority, then the first name: a stable choice.
                _, best = min(accelerators, key=lambda nb: (-nb[1].priority, nb[0]))
                return best
            name = DEFAULT
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


def _entry_points() -> list[Any]:
    """The registered backend factories, sorted by name (stable for duplicates)."""
    return sorted(entry_points(group=GROUP), key=lambda ep: ep.name)


def _incompatibility(backend: object) -> str | None:
    if not isinstance(backend, Backend):
        return f"factory returned {type(backend).__name__}, not a riftco.tensor.Backend"
    version = tuple(getattr(backend, "api_version", ()))
    if len(version) != 2 or version[0] != BACKEND_API_VERSION[0]:
        return (
            f"implements backend API {version}, this riftco-tensor needs major "
            f"version {BACKEND_API_VERSION[0]} (API {BACKEND_API_VERSION})"
        )
    priority = backend.priority
    if not isinstance(priority, int) or isinstance(priority, bool):
        return f"declares priority {priority!r}; expected an int (higher wins in auto)"
    if not isinstance(backend.runs_on_host, bool):
        return f"declares runs_on_host {backend.runs_on_host!r}; expected a bool"
    held = backend.dtypes
    if not isinstance(held, (set, frozenset)) or not all(isinstance(d, DType) for d in held):
        return f"declares dtypes {held!r}; expected a frozenset of riftco.tensor.DType"
    if not BASE_DTYPES <= held:
        missing = ", ".join(d.value for d in DType if d in BASE_DTYPES - held)
        return f"declares dtypes without {missing}, which every backend must hold"
    claimed = backend.capabilities()
    if not isinstance(claimed, (set, frozenset)):
        return f"capabilities() returned {type(claimed).__name__}; expected a frozenset of names"
    # Names this riftco-tensor does not know come from a newer API minor: not ours to judge.
    own = overridden_capabilities(type(backend))  # type: ignore[arg-type]  # classes hash
    unbacked = sorted((claimed & set(CAPABILITIES)) - own)
    if unbacked:
        return (
            f"capabilities() claims {', '.join(unbacked)}, which its class does not "
            "implement (it inherits Backend's method that raises)"
        )
    return None


def _describe(name: str, backend: Backend, source: str) -> BackendInfo:
    claimed = backend.capabilities()
    return BackendInfo(
        name,
        True,
        "",
        backend.describe(),
        source,
        (backend.api_version[0], backend.api_version[1]),  # two ints, checked on discovery
        backend.runs_on_host,
        backend.priority,
        tuple(c for c in CAPABILITIES if c in claimed),
        tuple(d.value for d in DType if d in backend.dtypes),
        tuple(c for c in CAPABILITIES if c in composed_capabilities(backend)),
    )


REGISTRY = _Registry()


def backends() -> list[BackendInfo]:
    """Every registered backend, available or not, with the reason."""
    return REGISTRY.infos()


def get_backend(name: str | Backend | None = None) -> Backend:
    """The backend called ``name``; ``None`` reads RIFTCO_BACKEND, defaulting to ``auto``."""
    if isinstance(name, Backend):
        return name
    return REGISTRY.get(name)


def require_capabilities(
    backend: str | Backend | None, names: Iterable[str], *, job: str
) -> Backend:
    """The backend (resolved as `get_backend` does), once it is known to implement every
    capability in ``names``, which ``job`` (e.g. ``"QLoRA post-training"``) needs.

    Raises ``JobUnsupported`` (a ``CapabilityMissing``) naming every missing capability,
    ``BackendUnavailable`` if the backend cannot be used at all, and ``UnknownCapability``
    for a name that is not in CAPABILITIES. A capability the op layer composes on the
    backend's own device (COMPOSED) counts as there; nothing falls back to another
    backend.
    """
    chosen = get_backend(backend)
    wanted = set(names)
    unknown = sorted(wanted - CAPABILITIES.keys())
    if unknown:
        raise UnknownCapability(
            f"require_capabilities({job}): unknown capabilities {', '.join(unknown)}; "
            "expected names from riftco.tensor.CAPABILITIES"
        )
    have = chosen.capabilities() | composed_capabilities(chosen)
    missing = tuple(name for name in CAPABILITIES if name in wanted and name not in have)
    if missing:
        raise JobUnsupported(
            f"{job} needs capabilities that backend {chosen.name!r} does not implement: "
            f"{', '.join(missing)}; choose another backend (`riftco backends` lists what "
            "each implements)",
            backend=chosen.name,
            job=job,
            missing=missing,
        )
    return chosen


def reset_discovery() -> None:
    """Run discovery again on next use (after entry points changed)."""
    REGISTRY.reset()
