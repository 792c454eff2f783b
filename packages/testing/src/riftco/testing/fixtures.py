"""The ``backend`` pytest fixture: every available backend in turn (cpu first, then the
installed plugins, then the numpy reference backend); a backend that is unavailable is
a skip with its reason. Use it from a conftest.py with
``from riftco.testing.tensor import backend  # noqa: F401``.

Its parameters are read from discovery when this module is imported, so a plugin that
registers a backend (``riftco.testing.discovery.add_entry_points``) must load first.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from riftco.tensor import registry
from riftco.tensor.plugin import Backend
from riftco.testing.discovery import extra_entry_points
from riftco.testing.reference import REFERENCE_ENTRY_POINT


def _fixture_params() -> list:
    params: list[Any] = []
    for info in registry.backends():
        if info.available:
            params.append(info.name)
        elif info.name != "reference":
            params.append(pytest.param(info.name, marks=pytest.mark.skip(reason=info.reason)))
    return [*params, "reference"]


def backend_names() -> Sequence[str]:
    return [p for p in _fixture_params() if isinstance(p, str)]


@pytest.fixture(params=_fixture_params())
def backend(request) -> Iterator[Backend]:
    """Every available backend in turn (cpu first, then plugins, then the reference)."""
    if request.param == "reference":
        with extra_entry_points(REFERENCE_ENTRY_POINT):
            yield registry.get_backend("reference")
    else:
        yield registry.get_backend(request.param)


__all__ = ["backend", "backend_names"]
