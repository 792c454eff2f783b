import numpy as np
import pytest
from tensor_helpers import close, on, rand

import riftco.tensor as rt


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_index_select_and_index_add(backend, axis):
    x = rand((4, 5, 6))
    idx = np.array([3, 0, 3, 1], dtype=np.int64) % x.shape[axis]
    t, i = on(backend, x), on(backend, idx)
    close(rt.index_select(t, axis, i), np.take(x, idx, axis=axis))
    src = rand(np.take(x, idx, axis=axis).shape, 9)
    want = x.astype(np.float64).copy()
    np.add.at(np.moveaxis(want, axis, 0), idx, np.moveaxis(src, axis, 0))
    close(rt.index_add(t, axis, i, on(backend, src)), want, rtol=1e-6)


def test_embedding(backend):
    table = rand((10, 4))
    ids = np.array([[1, 2, 9], [0, 0, 5]])
    got = rt.embedding(on(backend, table), on(backend, ids))
    close(got, table[ids])
    with pytest.raises(
        rt.KernelError, match="index 10 at position 1 is out of range for an axis of size 10"
    ):
        rt.embedding(on(backend, table), on(backend, np.array([0, 10]))).numpy()


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_and_scatter_add(backend, axis):
    x = rand((3, 4, 5))
    shape = list(x.shape)
    shape[axis] = 2
    idx = np.random.default_rng(0).integers(0, x.shape[axis], size=shape)
    t, i = on(backend, x), on(backend, idx)
    close(rt.gather(t, axis, i), np.take_along_axis(x, idx, axis=axis))
    src = rand(tuple(shape), 4)
    want = np.zeros_like(x, dtype=np.float64)
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis % 3] = idx
    np.add.at(want, tuple(grid), src)
    got = rt.scatter_add(rt.zeros_like(t), axis, i, on(backend, src))
    close(got, want, rtol=1e-6)


def test_index_errors(backend):
    t = on(backend, rand((3, 4)))
    with pytest.raises(rt.DTypeError, match="index_select: expected int64"):
        rt.index_select(t, 0, on(backend, [0.0]))
    with pytest.raises(rt.ShapeError, match="indices must be 1-D"):
        rt.index_select(t, 0, on(backend, [[0]]))
    with pytest.raises(rt.ShapeError, match="gather: indices"):
        rt.gather(t, 1, on(backend, np.zeros((2, 2), np.int64)))
    with pytest.raises(rt.ShapeError, match="axis 2 is out of range"):
        rt.index_select(t, 2, on(backend, [0]))


def test_tensor_index_selects_rows(backend):
    x = rand((5, 2))
    close(on(backend, x)[on(backend, np.array([4, 0]))], x[[4, 0]])
