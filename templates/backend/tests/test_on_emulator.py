"""The NAME backend's ops on the emulated device (emulator/), registered as ``NAMEemu``:
riftco-tensor's op suite and the tiny-model check against the CPU, each in its own
process. This is what checks the kernels where no device is."""

from __future__ import annotations

from pathlib import Path

from riftco.testing import run_backend_suite, run_checks

HERE = Path(__file__).resolve().parent
#: What each subprocess needs to see ``NAMEemu``: the emulator's plugin module, loaded
#: before the suite's fixtures are built, and the checks told which backend to use.
EMULATION = {
    "env": {"RIFTCO_NAME_CHECK_BACKEND": "NAMEemu"},
    "plugins": ["NAME_emulation"],
    "pythonpath": [HERE / "emulator"],
}


def test_riftco_tensors_op_suite_passes_on_the_emulated_device():
    run_backend_suite("NAMEemu", skip_undeclared=True, **EMULATION)


def test_a_tiny_model_on_the_emulated_device_matches_cpu():
    run_checks(HERE / "device" / "check_model.py", skip_if_nothing_ran=True, **EMULATION)
