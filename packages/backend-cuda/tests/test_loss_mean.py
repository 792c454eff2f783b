"""The mean cross-entropy's kernels (API 1.15, ``cross_entropy_mean_f32`` and the
backward's shared scale) on the host emulation: the last block to finish takes the
mean over rows every block wrote, a target the device wrote is checked there, and the
results are the composed ops' (riftco-tensor's shared suite checks the same against
every backend's composition; here the cases only the device path has)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import riftco.tensor as rt

sys.path.insert(0, str(Path(__file__).resolve().parent / "emulator"))
import cuda_emulation

pytestmark = pytest.mark.skipif(
    cuda_emulation.available() is not None, reason=str(cuda_emulation.available())
)


@pytest.fixture(scope="module")
def emu():
    return cuda_emulation.EmulatedCudaBackend()


def test_the_last_block_takes_the_mean_over_every_block_s_rows(emu):
    # 50 rows over the emulation's 3 blocks (each looping over its rows): the mean and the
    # gradient agree with the CPU's composition, every launch again (the counter wraps).
    rng = np.random.default_rng(2)
    x = rng.normal(0, 3, (50, 9)).astype(np.float32)
    t = rng.integers(0, 9, 50)
    t[::4] = -100
    want = rt.softmax_cross_entropy_mean(rt.tensor(x), rt.tensor(t))
    for _ in range(2):
        got = rt.softmax_cross_entropy_mean(rt.tensor(x, backend=emu), rt.tensor(t, backend=emu))
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)
        assert got[2].numpy() == want[2].numpy()  # 1 / kept, the same float
    g = rt.tensor(np.float32(1.5), backend=emu)
    d = rt.softmax_cross_entropy_mean_backward(
        g, rt.tensor(x, backend=emu), rt.tensor(t, backend=emu), got[1], got[2]
    )
    cpu = rt.softmax_cross_entropy_mean_backward(
        rt.tensor(np.float32(1.5)), rt.tensor(x), rt.tensor(t), want[1], want[2]
    )
    np.testing.assert_allclose(d.numpy(), cpu.numpy(), rtol=1e-6, atol=1e-7)


def test_a_target_written_on_the_device_is_checked_there(emu):
    x = rt.tensor(np.zeros((3, 4), np.float32), backend=emu)
    t = rt.tensor(np.array([0, 1, 2]), backend=emu)
    # Written by a kernel: the host copy is stale, so the device flags the bad row.
    emu.assign(t._data, rt.tensor(np.array([1, 9, -100]), backend=emu)._data, (3,), t.dtype)
    with pytest.raises(rt.KernelError, match="target 9 of row 1 is out of range for 4 classes"):
        rt.softmax_cross_entropy_mean(x, t)
    emu.assign(t._data, rt.tensor(np.array([1, 3, -100]), backend=emu)._data, (3,), t.dtype)
    loss, _, scale = rt.softmax_cross_entropy_mean(x, t)
    assert scale.item() == 0.5
    np.testing.assert_allclose(loss.item(), np.log(4.0), rtol=1e-6)
