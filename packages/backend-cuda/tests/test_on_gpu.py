"""On a machine with an NVIDIA GPU: riftco-tensor's whole op suite restricted to
cuda (every capability against its numpy formula) and a tiny model against the
CPU, each in its own process. Elsewhere they skip with the reason."""

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
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected)")


def _cuda_reason() -> str | None:
    info = {i.name: i for i in rt.backends()}.get("cuda")
    if info is None:
        return "the cuda backend is not registered"
    return None if info.available else info.reason


pytestmark = pytest.mark.skipif(
    _cuda_reason() is not None, reason=f"cuda is unavailable: {_cuda_reason()}"
)


def _run(args: list[str]) -> None:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    output = done.stdout + done.stderr
    last = (output.strip().splitlines() or [""])[-1]
    print(last)
    if done.returncode != 0:
        pytest.fail(f"exit {done.returncode}: {last}\n{output[-8000:]}")
    counts = {what: int(n) for n, what in _COUNT.findall(last)}
    assert counts.get("passed", 0) > 0, output[-2000:]


def test_shared_tensor_suite_runs_on_cuda():
    suite = REPO / "packages" / "tensor" / "tests"
    if not suite.is_dir():
        pytest.skip(f"riftco-tensor's tests are not at {suite} (run from the repository)")
    _run([str(suite), "-k", "cuda"])


@pytest.mark.parametrize("check", ["check_model.py", "check_bfloat16.py", "check_jobs.py"])
def test_models_and_jobs_match_cpu(check):
    _run(["-o", "python_files=check_*.py", str(HERE / "gpu" / check)])
