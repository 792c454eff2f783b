"""Real execution on the vulkan backend (Mesa's lavapipe in CI, any Vulkan GPU
elsewhere), each suite in its own process so that a driver crash cannot take
this one down (riftco.testing's shared calls). ``RIFTCO_GPU_TEST_BACKEND`` names
another backend (``metal`` on a Mac); ``RIFTCO_REQUIRE_GPU=1`` (CI) makes an
unavailable backend a failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from riftco.testing import run_backend_suite, run_checks, unavailable_reason

HERE = Path(__file__).resolve().parent
BACKEND = os.environ.get("RIFTCO_GPU_TEST_BACKEND", "vulkan")
#: The checks of device/ run on the backend named here too.
DEVICE_ENV = {"RIFTCO_GPU_TEST_BACKEND": BACKEND}


@pytest.fixture(scope="module", autouse=True)
def device_present():
    reason = unavailable_reason(BACKEND)
    if reason is not None:
        if os.environ.get("RIFTCO_REQUIRE_GPU", "0") not in ("", "0"):
            pytest.fail(f"RIFTCO_REQUIRE_GPU=1 but {BACKEND} is unavailable: {reason}")
        pytest.skip(f"{BACKEND} is unavailable: {reason}")


@pytest.mark.parametrize(
    "check",
    [
        "check_runtime.py",
        "check_model.py",
        "check_matmul.py",
        "check_budget.py",
        "check_attention.py",
        "check_decode.py",
    ],
)
def test_checks_of_this_package(check, record_property):
    run_checks(HERE / "device" / check, env=DEVICE_ENV, record=record_property)


def test_shared_tensor_suite_runs_on_the_device(record_property):
    """riftco-tensor's op suite with the `backend` fixture's entries for this backend:
    every capability against numpy formulas."""
    run_backend_suite(BACKEND, env=DEVICE_ENV, record=record_property)
