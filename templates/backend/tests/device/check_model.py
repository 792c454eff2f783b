"""A tiny GPT-2 on the NAME backend (or the one RIFTCO_NAME_CHECK_BACKEND names): one
training step against the CPU's (riftco.testing's ``check_model_against_cpu``). Run by
../test_on_emulator.py, and on a machine with the device by hand or in CI."""

from __future__ import annotations

import os

import pytest

import riftco.tensor as rt
from riftco.testing import available_backend, check_model_against_cpu

BACKEND = os.environ.get("RIFTCO_NAME_CHECK_BACKEND", "NAME")


@pytest.fixture(scope="module", autouse=True)
def every_op_a_model_needs():
    lacking = set(rt.CAPABILITIES) - set(available_backend(BACKEND).capabilities())
    lacking -= {"decode_program", "decode_step", "block_dequantize", "block_linear"}
    if lacking:
        pytest.skip(f"{BACKEND} does not implement {', '.join(sorted(lacking))} yet")


@pytest.mark.parametrize("attention", ["materialized", "flash"])
def test_forward_backward_and_adam_step_match_cpu(attention):
    check_model_against_cpu(BACKEND, attention=attention)
