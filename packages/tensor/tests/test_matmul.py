import numpy as np
import pytest
from tensor_helpers import close, on, rand

import riftco.tensor as rt

CASES = [
    ((3, 4), (4, 5)),
    ((1, 1), (1, 1)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (6, 4, 2)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((7,), (7, 3)),
    ((3, 7), (7,)),
    ((0, 4), (4, 3)),
    ((3, 0), (0, 2)),
    ((65, 130), (130, 97)),
    ((32, 128, 64), (32, 64, 128)),
]


# Transposed operands only where the operand is a matrix (1-D operands are vectors).
GRID = [
    (sa, sb, ta, tb)
    for sa, sb in CASES
    for ta in (False, True)
    for tb in (False, True)
    if (len(sa) > 1 or not ta) and (len(sb) > 1 or not tb)
]


@pytest.mark.parametrize(("sa", "sb", "ta", "tb"), GRID, ids=str)
def test_matmul_matches_numpy(backend, sa, sb, ta, tb):
    a, b = rand(sa, 1), rand(sb, 2)
    want = a.astype(np.float64) @ b.astype(np.float64)
    a_in = np.ascontiguousarray(np.swapaxes(a, -1, -2)) if ta else a
    b_in = np.ascontiguousarray(np.swapaxes(b, -1, -2)) if tb else b
    got = rt.matmul(on(backend, a_in), on(backend, b_in), transpose_a=ta, transpose_b=tb)
    close(got, want, rtol=1e-4, atol=1e-4)


def test_matmul_operator_and_errors(backend):
    a, b = rand((3, 4)), rand((4, 2))
    close(on(backend, a) @ on(backend, b), a @ b, rtol=1e-5)
    with pytest.raises(
        rt.ShapeError, match=r"matmul: inner dims disagree: \(3, 4\) @ \(3, 4\) \(4 vs 3\)"
    ):
        on(backend, a) @ on(backend, a)
    with pytest.raises(rt.ShapeError, match="do not broadcast"):
        on(backend, rand((2, 3, 4))) @ on(backend, rand((3, 4, 5)))
    with pytest.raises(rt.DTypeError, match="matmul"):
        on(backend, np.ones((2, 2), np.int64)) @ on(backend, np.ones((2, 2), np.int64))


@pytest.mark.parametrize("transpose_b", [False, True])
def test_vector_products_do_not_depend_on_threads(transpose_b):
    # One row times a matrix large enough to be shared by the kernel threads (the
    # decode step's shape), with a column count that is not a multiple of a piece.
    k, n = 384, 1000
    x = rand((1, k), 1)
    w = rand((n, k) if transpose_b else (k, n), 2)
    expected = x.astype(np.float64) @ (w.T if transpose_b else w).astype(np.float64)
    before = rt.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 3, 2):
            rt.set_num_threads(threads)
            y = rt.matmul(on("cpu", x), on("cpu", w), transpose_b=transpose_b)
            results.append(y.numpy().copy())
    finally:
        rt.set_num_threads(before)
    np.testing.assert_allclose(results[0], expected, rtol=1e-4, atol=1e-4)
    for other in results[1:]:
        np.testing.assert_array_equal(results[0], other)


@pytest.mark.parametrize(
    "k, n",
    [(64, 64), (384, 1152), (1536, 384), (800, 131), (384, 2048)],  # the last two: > 1 MiB
)
@pytest.mark.parametrize("transpose_b", [False, True])
def test_a_row_alone_gets_the_bits_it_gets_among_other_rows(k, n, transpose_b):
    """A decode step with one sequence (one row) and with several must agree bit for
    bit, or a sampled reply would depend on what it is batched with."""
    rng = np.random.default_rng(k + n)
    w = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
    x = rng.standard_normal((5, k)).astype(np.float32)
    weights = rt.tensor(w)
    batch = rt.matmul(rt.tensor(x), weights, transpose_b=transpose_b).numpy()
    for row in (0, 3):
        alone = rt.matmul(rt.tensor(x[row : row + 1]), weights, transpose_b=transpose_b)
        np.testing.assert_array_equal(alone.numpy(), batch[row : row + 1])
