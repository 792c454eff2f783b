"""Backends registered by patching the entry points, so discovery is tested without
installing anything (riftco-tensor's discovery reads ``importlib.metadata`` through
``riftco.tensor.registry.entry_points``, which this module stands in for)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint

from riftco.tensor import registry


def add_entry_points(*eps: EntryPoint, replace: bool = False) -> Callable[[], None]:
    """Make discovery see ``eps`` from now on (in addition to, or with ``replace`` instead
    of, the installed ones); a patched name wins over an installed plugin of that name.
    Returns the function that undoes it. A pytest plugin module that registers an
    emulated backend calls this when it is loaded (``-p``), before any conftest builds
    the ``backend`` fixture."""
    original = registry.entry_points

    def patched(*, group: str):
        found = [] if replace else list(original(group=group))
        return [ep for ep in eps if ep.group == group] + found

    registry.entry_points = patched  # type: ignore[assignment]  # a stand-in for discovery
    registry.reset_discovery()

    def undo() -> None:
        registry.entry_points = original
        registry.reset_discovery()

    return undo


@contextlib.contextmanager
def extra_entry_points(*eps: EntryPoint, replace: bool = False) -> Iterator[None]:
    """Make discovery see ``eps`` (in addition to, or instead of, the installed ones)
    inside the block."""
    undo = add_entry_points(*eps, replace=replace)
    try:
        yield
    finally:
        undo()


__all__ = ["add_entry_points", "extra_entry_points"]
