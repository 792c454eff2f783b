"""Real XLA execution through a PJRT plugin (XLA's CPU plugin by default, see
pjrt_helpers.PLUGIN_PACKAGE), each suite in its own process."""

from __future__ import annotations

import pytest
from pjrt_helpers import HERE, REPO, needs_plugin, run_pytest

pytestmark = needs_plugin


def _check(outcome, record_property) -> None:
    record_property("summary", outcome.summary())
    print(outcome.summary())
    if outcome.returncode != 0:
        pytest.fail(
            f"subprocess exited with {outcome.returncode} ({outcome.summary()}):\n"
            + outcome.output[-6000:]
        )
    if not outcome.counts.get("passed") and outcome.counts.get("skipped"):
        pytest.skip(f"every check skipped: {outcome.output.strip().splitlines()[-1]}")
    assert outcome.counts.get("passed", 0) > 0, outcome.output[-2000:]


@pytest.mark.parametrize("check", ["check_backend.py", "check_model.py"])
def test_checks_of_this_package(check, record_property):
    args = ["-o", "python_files=check_*.py", str(HERE / "pjrt" / check)]
    _check(run_pytest(args), record_property)


def test_shared_tensor_suite_runs_on_tpu(record_property):
    """riftco-tensor's op suite with the `backend` fixture's tpu entries: every
    capability against numpy formulas on real XLA execution."""
    suite = REPO / "packages" / "tensor" / "tests"
    if not suite.is_dir():
        pytest.skip(f"riftco-tensor's tests are not at {suite} (run from the repository)")
    _check(run_pytest([str(suite), "-k", "tpu"]), record_property)
