"""A tiny GPT-2 (riftco.nn) on cuda: forward, backward and one AdamW step
compared with the same model on the CPU backend, and bitwise repeatable."""

from __future__ import annotations

import os

import pytest

from riftco.testing import check_model_against_cpu, unavailable_reason

#: The backend checked: cuda, or cudaemu (the kernels on the host, see emulator/).
BACKEND = os.environ.get("RIFTCO_CUDA_CHECK_BACKEND", "cuda")


@pytest.fixture(scope="module", autouse=True)
def cuda_available():
    reason = unavailable_reason(BACKEND)
    if reason is not None:
        pytest.skip(f"{BACKEND} is unavailable: {reason}")


@pytest.mark.parametrize("attention", ["materialized", "flash"])
def test_forward_backward_and_adam_step_match_cpu(attention):
    check_model_against_cpu(BACKEND, attention=attention)


def test_the_same_step_gives_the_same_bits():
    check_model_against_cpu(BACKEND, attention="flash", repeatable=True)


@pytest.mark.skipif(BACKEND != "cuda", reason="the disk cache is the GPU's")
def test_kernels_are_cached_on_disk_by_source_hash(tmp_path):
    from riftco.backends.cuda import _native

    device = _native.Device(0, tmp_path)
    device.load_all()
    modules, compiles, hits = device.cache_stats()
    assert modules == len(_native.kernel_modules()) and hits == 0 and compiles == modules
    assert len(list(tmp_path.glob("*.cubin"))) == modules
    again = _native.Device(0, tmp_path)
    again.load_all()
    assert again.cache_stats() == (modules, 0, modules)
