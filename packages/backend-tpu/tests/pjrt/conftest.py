"""Fixtures of the checks that execute on a PJRT plugin (run by ../test_on_xla_cpu.py
in a subprocess with RIFTCO_PJRT_PLUGIN set)."""

from __future__ import annotations

import pytest

import riftco.tensor as rt


@pytest.fixture(scope="session")
def tpu():
    info = {b.name: b for b in rt.backends()}.get("tpu")
    if info is None or not info.available:
        pytest.fail(f"the tpu backend is not available: {info.reason if info else 'not installed'}")
    return rt.get_backend("tpu")


@pytest.fixture(scope="session")
def cpu():
    return rt.get_backend("cpu")
