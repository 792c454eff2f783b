"""On a machine with an NVIDIA GPU: riftco-tensor's whole op suite restricted to
cuda (every capability against its numpy formula) and a tiny model against the
CPU, each in its own process (riftco.testing's shared calls). Elsewhere they skip
with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from riftco.testing import run_backend_suite, run_checks, unavailable_reason

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(
    unavailable_reason("cuda") is not None,
    reason=f"cuda is unavailable: {unavailable_reason('cuda')}",
)


def test_shared_tensor_suite_runs_on_cuda():
    run_backend_suite("cuda")


@pytest.mark.parametrize(
    "check",
    ["check_model.py", "check_bfloat16.py", "check_casts.py", "check_jobs.py", "check_linear.py"],
)
def test_models_and_jobs_match_cpu(check):
    run_checks(HERE / "gpu" / check)
