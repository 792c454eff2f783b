"""Real XLA execution through a PJRT plugin (XLA's CPU plugin by default, see
pjrt_helpers.PLUGIN_PACKAGE), each suite in its own process (riftco.testing's shared
calls). A run where every check skipped is a skip."""

from __future__ import annotations

import pytest
from pjrt_helpers import HERE, PLUGIN_ENV, needs_plugin

from riftco.testing import run_backend_suite, run_checks

pytestmark = needs_plugin


@pytest.mark.parametrize("check", ["check_backend.py", "check_model.py"])
def test_checks_of_this_package(check, record_property):
    run_checks(
        HERE / "pjrt" / check, env=PLUGIN_ENV, record=record_property, skip_if_nothing_ran=True
    )


def test_shared_tensor_suite_runs_on_tpu(record_property):
    """riftco-tensor's op suite with the `backend` fixture's tpu entries: every
    capability against numpy formulas on real XLA execution."""
    run_backend_suite("tpu", env=PLUGIN_ENV, record=record_property, skip_if_nothing_ran=True)
