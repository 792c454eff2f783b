"""The norms' parameter gradients in one launch (``norm_param_grads_f32``; a layer
norm's with its input gradient, ``layer_norm_backward_f32``), on the host emulation: each chunk of ``PARAM_CHUNK`` rows summed in row order, then the chunks in
order by the last block to finish -- the same bits as that order written out in
numpy, over several blocks and several chunks a block, launch after launch (the
counter that picks the last block wraps back to zero)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.backends.cuda.ops.nn import PARAM_CHUNK

sys.path.insert(0, str(Path(__file__).resolve().parent / "emulator"))
import cuda_emulation

pytestmark = pytest.mark.skipif(
    cuda_emulation.available() is not None, reason=str(cuda_emulation.available())
)


@pytest.fixture(scope="module")
def emu():
    return cuda_emulation.EmulatedCudaBackend()


def chunked_sums(terms: np.ndarray) -> np.float32:
    """Column sums of float64 ``terms [rows, d]``: rows in order within each chunk of
    PARAM_CHUNK (from 0.0), then the chunks in order, rounded once."""
    partials = []
    for start in range(0, terms.shape[0], PARAM_CHUNK):
        acc = np.zeros(terms.shape[1])
        for row in terms[start : start + PARAM_CHUNK]:
            acc = acc + row
        partials.append(acc)
    total = np.zeros(terms.shape[1])
    for partial in partials:
        total = total + partial
    return total.astype(np.float32)


def inputs(rows: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.5, 2.0, (rows, d)).astype(np.float32)
    dy = rng.normal(0.0, 1.0, (rows, d)).astype(np.float32)
    w = rng.normal(1.0, 0.5, d).astype(np.float32)
    return x, dy, w


@pytest.mark.parametrize("rows, d", [(300, 33), (64, 5), (129, 48), (1, 7)])
def test_layer_norm_parameter_gradients_have_the_chunked_order_bits(emu, rows, d):
    x, dy, w = inputs(rows, d, rows + d)
    xt, dyt = rt.tensor(x, backend=emu), rt.tensor(dy, backend=emu)
    wt, bt = rt.tensor(w, backend=emu), rt.zeros([d], backend=emu)
    _, mean, rstd = rt.layer_norm_with_stats(xt, wt, bt)
    m, r = mean.numpy()[:, None], rstd.numpy()[:, None]
    xhat = ((x - m) * r).astype(np.float32)
    want_w = chunked_sums(dy.astype(np.float64) * xhat.astype(np.float64))
    want_b = chunked_sums(dy.astype(np.float64))
    for _ in range(3):  # the counter is back at zero after every launch
        _, dw, db = rt.layer_norm_backward(dyt, xt, wt, mean, rstd, with_bias=True)
        assert dw.numpy().tobytes() == want_w.tobytes()
        assert db.numpy().tobytes() == want_b.tobytes()
        _, dw_only, none = rt.layer_norm_backward(dyt, xt, wt, mean, rstd, with_bias=False)
        assert none is None and dw_only.numpy().tobytes() == want_w.tobytes()


def test_rms_norm_weight_gradient_has_the_chunked_order_bits(emu):
    x, dy, w = inputs(200, 24, 7)
    xt, dyt, wt = (rt.tensor(a, backend=emu) for a in (x, dy, w))
    _, rstd = rt.rms_norm_with_stats(xt, wt)
    xhat = (x * rstd.numpy()[:, None]).astype(np.float32)
    want = chunked_sums(dy.astype(np.float64) * xhat.astype(np.float64))
    for _ in range(2):
        _, dw = rt.rms_norm_backward(dyt, xt, wt, rstd)
        assert dw.numpy().tobytes() == want.tobytes()


def test_the_sums_are_taken_by_one_launch_over_several_blocks(emu):
    # The emulation caps a grid at cuda_emulation.MAX_GRID blocks: with more chunks
    # and columns than that, every launch has blocks that finish before the last.
    launched = []
    launch = emu.device.launch

    def recorded(module, kernel, grid, block, shared, args):
        launched.append((kernel, grid))
        return launch(module, kernel, grid, block, shared, args)

    emu.device.launch = recorded  # type: ignore[method-assign]
    try:
        x, dy, w = inputs(300, 33, 1)
        xt, dyt, wt = (rt.tensor(a, backend=emu) for a in (x, dy, w))
        _, mean, rstd = rt.layer_norm_with_stats(xt, wt)
        launched.clear()
        rt.layer_norm_backward(dyt, xt, wt, mean, rstd, with_bias=True)
    finally:
        del emu.device.launch
    # dx and both parameter gradients: one launch, a block per chunk of rows.
    assert [kernel for kernel, _ in launched] == ["layer_norm_backward_f32"]
    assert launched[0][1][0] > 1
    counter = emu.kernels.counter()
    assert emu.device.download(counter, 0, 4).view(np.uint32)[0] == 0
