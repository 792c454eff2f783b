"""A pytest plugin that runs riftco-tensor's op suite on one backend only.

``RIFTCO_SUITE_BACKEND`` names it: every test of the suite parametrized by the
``backend`` fixture runs with that backend, the rest are deselected. A test that
stops on a capability the backend does not declare (``capabilities()``) is a
skip naming it, so the suite passes while the backend grows, and checks every
capability it claims against the numpy formulas.
"""

from __future__ import annotations

import os
import re

import pytest

import riftco.tensor as rt

BACKEND = os.environ.get("RIFTCO_SUITE_BACKEND", "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def ours(item: pytest.Item) -> bool:
        callspec = getattr(item, "callspec", None)
        return callspec is not None and callspec.params.get("backend") == BACKEND

    config.hook.pytest_deselected(items=[i for i in items if not ours(i)])
    items[:] = [i for i in items if ours(i)]


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    try:
        return (yield)
    except rt.CapabilityMissing as exc:
        declared = rt.get_backend(BACKEND).capabilities()
        named = [c for c in re.findall(r"'(\w+)'", str(exc)) if c in rt.CAPABILITIES]
        lacking = [c for c in named if c not in declared]
        if lacking:
            pytest.skip(f"{BACKEND} does not implement {', '.join(lacking)} yet")
        raise
