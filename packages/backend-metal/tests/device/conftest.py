"""Fixtures of the checks that run on a device (run by ../test_on_device.py in a
subprocess): the backend named by RIFTCO_GPU_TEST_BACKEND (default vulkan)."""

from __future__ import annotations

import os

import pytest

from riftco.testing import available_backend


@pytest.fixture(scope="session")
def gpu():
    return available_backend(os.environ.get("RIFTCO_GPU_TEST_BACKEND", "vulkan"))
