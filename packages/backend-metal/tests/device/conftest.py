"""Fixtures of the checks that run on a device (run by ../test_on_device.py in a
subprocess): the backend named by RIFTCO_GPU_TEST_BACKEND (default vulkan)."""

from __future__ import annotations

import os

import pytest

import riftco.tensor as rt


@pytest.fixture(scope="session")
def gpu():
    name = os.environ.get("RIFTCO_GPU_TEST_BACKEND", "vulkan")
    info = {b.name: b for b in rt.backends()}.get(name)
    if info is None or not info.available:
        pytest.fail(
            f"the {name} backend is not available: {info.reason if info else 'not installed'}"
        )
    return rt.get_backend(name)
