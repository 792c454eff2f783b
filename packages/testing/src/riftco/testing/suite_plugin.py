"""A pytest plugin that keeps riftco-tensor's op suite to one backend (loaded with
``-p riftco.testing.suite_plugin`` by ``riftco.testing.run_backend_suite``).

``RIFTCO_SUITE_BACKEND`` names the backend: every test that the ``backend`` fixture
parametrizes with it runs, the rest are deselected. With
``RIFTCO_SUITE_SKIP_UNDECLARED=1`` a test stopped by a capability the backend does not
declare (``capabilities()``) is a skip naming it, so the suite passes while a backend
grows and still checks every capability it claims.
"""

from __future__ import annotations

import os
import re

import pytest

import riftco.tensor as rt

BACKEND = os.environ.get("RIFTCO_SUITE_BACKEND", "")
SKIP_UNDECLARED = os.environ.get("RIFTCO_SUITE_SKIP_UNDECLARED", "") not in ("", "0")


def _on_the_backend(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("backend") == BACKEND


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.hook.pytest_deselected(items=[i for i in items if not _on_the_backend(i)])
    items[:] = [i for i in items if _on_the_backend(i)]


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    try:
        return (yield)
    except rt.CapabilityMissing as exc:
        if not SKIP_UNDECLARED:
            raise
        declared = rt.get_backend(BACKEND).capabilities()
        named = [c for c in re.findall(r"'(\w+)'", str(exc)) if c in rt.CAPABILITIES]
        lacking = [c for c in named if c not in declared]
        if lacking:
            pytest.skip(f"{BACKEND} does not implement {', '.join(lacking)} yet")
        raise
