"""The host-side plans of the cuda ops (no GPU): merged views, broadcast strides,
matmul batching, ragged attention rows, Adam coefficients. Each is checked
against numpy or the CPU kernel's formula."""

from __future__ import annotations

import math

import numpy as np
import pytest

from riftco.backends.cuda.errors import CudaError
from riftco.backends.cuda.ops.attention import _meta
from riftco.backends.cuda.ops.base import _batch_plan
from riftco.backends.cuda.ops.launch import dims, element, outer_inner
from riftco.backends.cuda.ops.optim import coefficients
from riftco.tensor.plugin import broadcast_strides, coalesce


def _read(flat: np.ndarray, shape, strides, offset=0) -> np.ndarray:
    """What a kernel reads through (shape, strides), element by element."""
    out = np.empty(int(np.prod(shape)) if shape else 1, flat.dtype)
    for i in range(out.size):
        idx, rest = offset, i
        for n, s in zip(reversed(shape), reversed(strides)):
            idx += (rest % n) * s
            rest //= n
        out[i] = flat[idx]
    return out


@pytest.mark.parametrize(
    "shape,out_shape",
    [
        ((3, 4), (3, 4)),
        ((4,), (3, 4)),
        ((3, 1), (3, 4)),
        ((2, 1, 4), (2, 3, 4)),
        ((), (2, 3)),
        ((1, 1), (4, 1, 6)),
        ((5, 1, 2, 3), (5, 7, 2, 3)),
    ],
)
def test_broadcast_strides_merged_read_what_numpy_broadcasts(shape, out_shape):
    x = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    strides = broadcast_strides(shape, out_shape)
    merged, (st,) = coalesce(out_shape, strides)
    assert len(merged) <= len(out_shape)
    got = _read(x.reshape(-1), merged, st)
    np.testing.assert_array_equal(got, np.broadcast_to(x, out_shape).reshape(-1))


def test_a_permutation_keeps_its_strides_through_merging():
    x = np.arange(24).reshape(2, 3, 4)
    view = x.transpose(2, 0, 1)
    strides = [s // x.itemsize for s in view.strides]
    merged, (st,) = coalesce(view.shape, strides)
    np.testing.assert_array_equal(_read(x.reshape(-1), merged, st), view.reshape(-1))


def test_dims_pad_and_refuse_too_many_axes():
    assert dims([2, 3], 1) == (2, 3, 1, 1, 1, 1, 1, 1)
    with pytest.raises(CudaError, match="at most 8 axes"):
        dims(list(range(9)), 0)


def test_dtypes_have_sizes_and_bfloat16_plugs_in_by_name():
    assert element("float32") == (4, 0) and element("bfloat16") == (2, 4)
    with pytest.raises(CudaError, match="no storage for dtype 'complex64'"):
        element("complex64")
    assert outer_inner((2, 3, 4), 1) == (2, 3, 4)


@pytest.mark.parametrize(
    "ba,bb",
    [((), ()), ((3,), (3,)), ((3,), ()), ((), (2, 3)), ((2, 1), (1, 3)), ((4, 1, 2), (3, 1))],
)
def test_matmul_batch_plans_cover_each_product_once(ba, bb):
    batch = tuple(np.broadcast_shapes(ba, bb))
    total = int(np.prod(batch)) if batch else 1
    a_ids = np.arange(int(np.prod(ba)) if ba else 1).reshape(ba)
    b_ids = np.arange(int(np.prod(bb)) if bb else 1).reshape(bb)
    want_a = np.broadcast_to(a_ids, batch).reshape(-1)
    want_b = np.broadcast_to(b_ids, batch).reshape(-1)
    seen = {}
    for fa, fb, fc, sa, sb, runs in _batch_plan(ba, bb, batch):
        for r in range(runs):
            seen[fc + r] = (fa + r * sa, fb + r * sb)
    assert sorted(seen) == list(range(total))
    for c, (a, b) in seen.items():
        assert (a, b) == (want_a[c], want_b[c])


def test_ragged_rows_know_their_sequence_keys_and_position():
    meta = _meta(5, [0, 2], [2, 3], [4, 3], [10, 20], 23)
    np.testing.assert_array_equal(
        meta,
        [[0, 10, 4, 2], [0, 10, 4, 3], [1, 20, 3, 0], [1, 20, 3, 1], [1, 20, 3, 2]],
    )
    assert (_meta(1, [0], [1], [7], None, 8)[0] == [0, 0, 7, 6]).all()


@pytest.mark.parametrize(
    "args,match",
    [
        ((4, [0], [3], [4], [0], 4), "query row 3 belongs to 0"),
        ((2, [0, 0], [2, 2], [2, 2], [0, 2], 4), "query row 0 belongs to 2"),
        ((2, [0], [2], [1], [0], 4), "does not fit"),
        ((2, [0], [2], [3], [2], 4), "does not fit"),
    ],
)
def test_ragged_rows_refuse_what_does_not_fit(args, match):
    with pytest.raises(CudaError, match=match):
        _meta(*args)


def test_adam_coefficients_follow_the_cpu_kernel():
    c = coefficients(1e-3, 0.9, 0.999, 1e-8, 0.1, True, 3, 0.5)
    assert c[0] == 0.5 and c[1] == 0.0 and c[3] == 1.0
    assert c[2] == 1.0 - 1e-3 * 0.1
    assert c[7] == -(1e-3 / (1.0 - 0.9**3))
    assert c[8] == math.sqrt(1.0 - 0.999**3)
    coupled = coefficients(1e-3, 0.9, 0.999, 1e-8, 0.1, False, 1, 1.0)
    assert coupled[1] == 0.1 and coupled[3] == 0.0
