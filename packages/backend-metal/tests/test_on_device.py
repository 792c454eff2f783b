"""Real execution on the vulkan backend (Mesa's lavapipe in CI, any Vulkan GPU
elsewhere), each suite in its own process so that a driver crash cannot take
this one down. ``RIFTCO_GPU_TEST_BACKEND`` names another backend (``metal`` on
a Mac); ``RIFTCO_REQUIRE_GPU=1`` (CI) makes an unavailable backend a failure."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import riftco.tensor as rt

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
BACKEND = os.environ.get("RIFTCO_GPU_TEST_BACKEND", "vulkan")
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected)")


def _available() -> str | None:
    info = {b.name: b for b in rt.backends()}.get(BACKEND)
    if info is None:
        return f"no {BACKEND} backend is registered"
    return None if info.available else info.reason


@pytest.fixture(scope="module", autouse=True)
def device_present():
    reason = _available()
    if reason is not None:
        if os.environ.get("RIFTCO_REQUIRE_GPU", "0") not in ("", "0"):
            pytest.fail(f"RIFTCO_REQUIRE_GPU=1 but {BACKEND} is unavailable: {reason}")
        pytest.skip(f"{BACKEND} is unavailable: {reason}")


def run_pytest(args: list[str]) -> tuple[int, str, dict[str, int]]:
    env = dict(os.environ, RIFTCO_GPU_TEST_BACKEND=BACKEND, PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    output = done.stdout + done.stderr
    tail = [line for line in output.strip().splitlines() if _COUNT.search(line)][-1:] or [""]
    counts = {
        what.rstrip("s") if what.startswith("error") else what: int(n)
        for n, what in _COUNT.findall(tail[0])
    }
    return done.returncode, output, counts


def _check(args: list[str], record_property) -> None:
    code, output, counts = run_pytest(args)
    summary = ", ".join(f"{n} {what}" for what, n in counts.items()) or "no summary"
    record_property("summary", summary)
    print(summary)
    if code != 0:
        pytest.fail(f"subprocess exited with {code} ({summary}):\n" + output[-6000:])
    assert counts.get("passed", 0) > 0, output[-2000:]


@pytest.mark.parametrize("check", ["check_runtime.py", "check_model.py"])
def test_checks_of_this_package(check, record_property):
    _check(["-o", "python_files=check_*.py", str(HERE / "device" / check)], record_property)


def test_shared_tensor_suite_runs_on_the_device(record_property):
    """riftco-tensor's op suite with the `backend` fixture's entries for this backend:
    every capability against numpy formulas."""
    suite = REPO / "packages" / "tensor" / "tests"
    if not suite.is_dir():
        pytest.skip(f"riftco-tensor's tests are not at {suite} (run from the repository)")
    _check([str(suite), "-k", BACKEND], record_property)
