"""Whether operations record a graph: ``no_grad()``, ``enable_grad()``, per thread."""

from __future__ import annotations

import contextlib
import threading


class _GradState(threading.local):
    enabled = True


#: Read by every operation; one flag per thread.
state = _GradState()


def is_grad_enabled() -> bool:
    """True when operations on variables that require gradients record a graph."""
    return state.enabled


class set_grad_enabled(contextlib.ContextDecorator):
    """Enable or disable graph recording in this thread for a ``with`` block (or a
    decorated function); the previous mode comes back on exit."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = bool(enabled)
        self._previous: list[bool] = []

    def __enter__(self) -> set_grad_enabled:
        self._previous.append(state.enabled)
        state.enabled = self._enabled
        return self

    def __exit__(self, *exc: object) -> None:
        state.enabled = self._previous.pop()


class no_grad(set_grad_enabled):
    """Operations inside run on values only: no graph, results that need no gradient."""

    def __init__(self) -> None:
        super().__init__(False)


class enable_grad(set_grad_enabled):
    """Record a graph again inside a ``no_grad()`` block (checkpoint replays use it)."""

    def __init__(self) -> None:
        super().__init__(True)


__all__ = ["enable_grad", "is_grad_enabled", "no_grad", "set_grad_enabled"]
