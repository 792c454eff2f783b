"""Fixtures of the checks that execute on a PJRT plugin (run by ../test_on_xla_cpu.py
in a subprocess with RIFTCO_PJRT_PLUGIN set)."""

from __future__ import annotations

import pytest

import riftco.tensor as rt
from riftco.testing import available_backend


@pytest.fixture(scope="session")
def tpu():
    return available_backend("tpu")


@pytest.fixture(scope="session")
def cpu():
    return rt.get_backend("cpu")
