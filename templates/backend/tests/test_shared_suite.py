"""riftco-tensor's op suite on the NAME backend, in a subprocess (a native crash there
fails this test instead of ending the run); see shared_suite.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def test_riftco_tensors_op_suite_passes_on_NAME():
    suite = REPO / "packages" / "tensor" / "tests"
    if not suite.is_dir():
        pytest.skip(f"riftco-tensor's tests are not at {suite} (run from the repository)")
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "RIFTCO_SUITE_BACKEND": "NAME", "PYTHONPATH": path}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    run = subprocess.run(
        [*command, "-p", "shared_suite", str(suite)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-2000:]
    print(summary)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in summary, summary
