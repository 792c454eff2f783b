"""A tiny GPT-2 (riftco.nn) on the tpu backend: forward, backward and one AdamW
step compared with the same model on the CPU backend."""

from __future__ import annotations

import pytest

from riftco.testing import check_model_against_cpu


@pytest.mark.parametrize("attention", ["materialized", "flash"])
def test_forward_backward_and_adam_step_match_cpu(tpu, attention):
    check_model_against_cpu("tpu", attention=attention)
