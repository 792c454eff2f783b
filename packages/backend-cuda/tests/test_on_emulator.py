"""The cuda backend's ops and CUDA C kernels on the host (emulator/: the kernel
sources compiled by the C++ compiler, a thread per GPU thread, a barrier per
block), registered as ``cudaemu``: riftco-tensor's whole op suite and a tiny
GPT-2 against the CPU, each in its own process. This is what runs the kernels
where no GPU is; the same checks run on a GPU in test_on_gpu.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
EMULATOR = HERE / "emulator"
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected)")

CXX = os.environ.get("CXX", "g++")
pytestmark = pytest.mark.skipif(
    shutil.which(CXX) is None, reason=f"no C++ compiler ({CXX}) to build the host emulation"
)


def _run(args: list[str], **env: str) -> None:
    environ = dict(
        os.environ,
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=os.pathsep.join([str(EMULATOR), os.environ.get("PYTHONPATH", "")]),
        RIFTCO_CUDA_CHECK_BACKEND="cudaemu",
        **env,
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "cuda_emulation"]
    done = subprocess.run([*cmd, *args], env=environ, capture_output=True, text=True, timeout=1800)
    output = done.stdout + done.stderr
    last = (output.strip().splitlines() or [""])[-1]
    print(last)
    if done.returncode != 0:
        pytest.fail(f"exit {done.returncode}: {last}\n{output[-8000:]}")
    assert {w: int(n) for n, w in _COUNT.findall(last)}.get("passed", 0) > 0, output[-2000:]


def test_shared_tensor_suite_runs_on_the_emulated_kernels():
    suite = REPO / "packages" / "tensor" / "tests"
    if not suite.is_dir():
        pytest.skip(f"riftco-tensor's tests are not at {suite} (run from the repository)")
    _run([str(suite), "-k", "cudaemu"])


@pytest.mark.parametrize("check", ["check_model.py", "check_bfloat16.py"])
def test_tiny_model_and_bfloat16_on_the_emulated_kernels(check):
    _run(["-o", "python_files=check_*.py", str(HERE / "gpu" / check)])


@pytest.mark.skipif(
    not os.environ.get("RIFTCO_CUDA_EMULATE_JOBS"),
    reason="about 2 minutes on two cores: set RIFTCO_CUDA_EMULATE_JOBS=1",
)
def test_jobs_on_the_emulated_kernels_match_cpu():
    _run(["-o", "python_files=check_*.py", str(HERE / "gpu" / "check_jobs.py")])
