"""The tiled column reduction (a bias gradient: few outputs over a long axis, blocks of
8 columns by row lanes, lanes combined in a fixed tree) on ``cudaemu`` against float64
numpy, for every float op, with NaN winning max and min; the same bits on every run."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.backends.cuda.ops.base import COLS_TILE, TILED_AXIS

sys.path.insert(0, str(Path(__file__).resolve().parent / "emulator"))
import cuda_emulation

pytestmark = pytest.mark.skipif(
    cuda_emulation.available() is not None, reason=str(cuda_emulation.available())
)

#: [outer, n, inner] views reduced over n: the tiled kernel's (n >= TILED_AXIS), a
#: width that is no multiple of the tile, several outer indices.
SHAPES = [(1, 300, 37), (3, TILED_AXIS, 2 * COLS_TILE + 1), (2, 129, 8)]


@pytest.fixture(scope="module")
def emu():
    return cuda_emulation.EmulatedCudaBackend()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "sum_squares"])
def test_matches_float64_numpy(emu, shape, op):
    x = np.random.default_rng(3).uniform(-2, 2, size=shape).astype(np.float32)
    wide = x.astype(np.float64)
    want = {
        "sum": wide.sum(1),
        "mean": wide.mean(1),
        "max": wide.max(1),
        "min": wide.min(1),
        "sum_squares": (wide * wide).sum(1),
    }[op]
    t = rt.tensor(x, backend=emu)
    got = getattr(rt, op)(t, 1).numpy()
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6, atol=1e-6)
    again = getattr(rt, op)(t, 1).numpy()
    assert got.tobytes() == again.tobytes()


@pytest.mark.parametrize("op", ["max", "min", "sum"])
def test_a_nan_wins(emu, op):
    x = np.ones((1, 200, 20), np.float32)
    x[0, 150, 13] = np.nan
    got = getattr(rt, op)(rt.tensor(x, backend=emu), 1).numpy()
    assert np.isnan(got[0, 13]) and not np.isnan(np.delete(got[0], 13)).any()
