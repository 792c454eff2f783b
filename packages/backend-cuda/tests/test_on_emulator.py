"""The cuda backend's ops and CUDA C kernels on the host (emulator/: the kernel
sources compiled by the C++ compiler, a thread per GPU thread, a barrier per
block), registered as ``cudaemu``: riftco-tensor's whole op suite and a tiny
GPT-2 against the CPU, each in its own process (riftco.testing's shared calls).
This is what runs the kernels where no GPU is; the same checks run on a GPU in
test_on_gpu.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from riftco.testing import run_backend_suite, run_checks

HERE = Path(__file__).resolve().parent
#: What each subprocess needs to see ``cudaemu``: the emulator's plugin module, loaded
#: before the suite's fixtures are built, and the checks told which backend to use.
EMULATION = {
    "env": {"RIFTCO_CUDA_CHECK_BACKEND": "cudaemu"},
    "plugins": ["cuda_emulation"],
    "pythonpath": [HERE / "emulator"],
}

CXX = os.environ.get("CXX", "g++")
pytestmark = pytest.mark.skipif(
    shutil.which(CXX) is None, reason=f"no C++ compiler ({CXX}) to build the host emulation"
)


def test_shared_tensor_suite_runs_on_the_emulated_kernels():
    run_backend_suite("cudaemu", **EMULATION)


@pytest.mark.parametrize("check", ["check_model.py", "check_bfloat16.py", "check_casts.py"])
def test_tiny_model_and_bfloat16_on_the_emulated_kernels(check):
    run_checks(HERE / "gpu" / check, **EMULATION)


@pytest.mark.skipif(
    not os.environ.get("RIFTCO_CUDA_EMULATE_JOBS"),
    reason="about 2 minutes on two cores: set RIFTCO_CUDA_EMULATE_JOBS=1",
)
def test_jobs_on_the_emulated_kernels_match_cpu():
    run_checks(HERE / "gpu" / "check_jobs.py", **EMULATION)
