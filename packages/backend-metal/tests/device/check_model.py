"""A tiny GPT-2 (riftco.nn) on the vulkan backend: forward, backward and one
AdamW step compared with the same model on the CPU backend; and a tiny llama's
forward and backward."""

from __future__ import annotations

import pytest

from riftco.testing import check_model_against_cpu


@pytest.mark.parametrize("attention", ["materialized", "flash"])
def test_forward_backward_and_adam_step_match_cpu(gpu, attention):
    check_model_against_cpu(gpu.name, attention=attention)


def test_llama_forward_and_backward_match_cpu(gpu):
    """RMSNorm, rotary, grouped-query attention and SwiGLU on the device."""
    check_model_against_cpu(
        gpu.name,
        preset="llama",
        config={"kv_heads": 2, "n_layers": 1},
        tokens=(2, 9),
        token_seed=1,
        optimizer_step=False,
    )
