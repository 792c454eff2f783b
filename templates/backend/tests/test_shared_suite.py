"""riftco-tensor's op suite on the NAME backend, in a subprocess (a native crash there
fails this test instead of ending the run): riftco.testing's ``run_backend_suite``.
While the backend grows, a test stopped by a capability it does not declare is a skip
naming it; every capability it claims is checked against the numpy formulas."""

from __future__ import annotations

from riftco.testing import run_backend_suite


def test_riftco_tensors_op_suite_passes_on_NAME():
    run_backend_suite("NAME", skip_undeclared=True)
