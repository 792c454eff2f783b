"""Linear layers as cuBLASLt products with fused epilogues, on ``cudaemu``: the
forward bias (``CUBLASLT_EPILOGUE_BIAS``) gives the op-by-op route's bits (product,
then add); the bias gradient is the weight-gradient product's ``BGRADB`` (float32,
within one float32 rounding of the op-by-op float64 reduction) or, with bfloat16
operands, one pass that writes the gradient's bfloat16 copy and sums the float32
gradient in the tiled reduction's order (the op-by-op bits). Counted: one GEMM and no
add forward, no reduction backward."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.backends.cuda.counting import CountingCudaBackend
from riftco.backends.cuda.errors import CudaDTypeError
from riftco.backends.cuda.ops.base import TILED_AXIS
from riftco.tensor.plugin import DType

sys.path.insert(0, str(Path(__file__).resolve().parent / "emulator"))
import cuda_emulation

pytestmark = pytest.mark.skipif(
    cuda_emulation.available() is not None, reason=str(cuda_emulation.available())
)

#: (rows, in, out): the tiled bias-gradient route (rows >= TILED_AXIS), a short one
#: (the two-pass route), widths that are no multiple of the reduction's tile.
SHAPES = [(TILED_AXIS + 9, 24, 19), (5, 7, 3), (2 * TILED_AXIS, 16, 40)]
DTYPES = ["float32", "bfloat16"]


@pytest.fixture(scope="module")
def emu():
    return cuda_emulation.EmulatedCudaBackend()


def _data(shape, seed):
    rows, inner, out = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, inner)).astype(np.float32)
    w = (rng.standard_normal((out, inner)) / np.sqrt(inner)).astype(np.float32)
    b = rng.standard_normal(out).astype(np.float32)
    g = rng.standard_normal((rows, out)).astype(np.float32)
    return x, w, b, g


def _tensors(emu, dtype, *arrays):
    out = []
    for i, a in enumerate(arrays):
        t = rt.tensor(a, backend=emu)
        out.append(t.astype(dtype) if i < 2 else t)
    return out


def _bits(backend, storage, shape):
    return backend.to_numpy(storage, shape, DType.float32).tobytes()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_is_the_op_by_op_bits(emu, shape, dtype):
    rows, _, out = shape
    x, w, b, _ = _data(shape, 1)
    xt, wt, bt = _tensors(emu, dtype, x, w, b)
    want = rt.matmul(xt, wt, transpose_b=True) + bt
    got = emu.linear(xt._data, xt.shape, wt._data, wt.shape, bt._data)
    assert _bits(emu, got, (rows, out)) == want.numpy().tobytes()
    # and the CPU's products (float32 sums of exact products) plus the bias
    xc, wc, bc = (rt.tensor(a) for a in (x, w, b))
    if dtype == "bfloat16":
        xc, wc = xc.astype(dtype), wc.astype(dtype)
    cpu = (rt.matmul(xc, wc, transpose_b=True) + bc).numpy()
    np.testing.assert_allclose(
        np.frombuffer(_bits(emu, got, (rows, out)), np.float32).reshape(rows, out),
        cpu,
        rtol=1e-5,
        atol=1e-5,
    )
    plain = emu.linear(xt._data, xt.shape, wt._data, wt.shape, None)
    assert _bits(emu, plain, (rows, out)) == rt.matmul(xt, wt, transpose_b=True).numpy().tobytes()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_against_the_op_by_op_route(emu, shape, dtype):
    rows, inner, out = shape
    x, w, _, g = _data(shape, 2)
    xt, wt, gt = _tensors(emu, dtype, x, w, g)
    gl = gt.astype(dtype)
    want_dx = rt.matmul(gl, wt).numpy()
    want_dw = rt.matmul(gl, xt, transpose_a=True).numpy()
    want_db = gt.sum(axis=0).numpy()
    dx, dw, db = emu.linear_backward(
        gt._data, xt._data, xt.shape, wt._data, wt.shape, True, True, True
    )
    assert _bits(emu, dx, (rows, inner)) == want_dx.tobytes()
    assert _bits(emu, dw, (out, inner)) == want_dw.tobytes()
    got_db = np.frombuffer(_bits(emu, db, (out,)), np.float32)
    if dtype == "bfloat16":
        assert got_db.tobytes() == want_db.tobytes()  # the tiled reduction's order
    else:
        # float64 sums in another order, each rounded once to float32
        np.testing.assert_array_max_ulp(got_db, want_db, maxulp=1)
        exact = np.array(
            [float(np.float32(sum(map(float, col)))) for col in g.T.astype(np.float64)]
        )
        np.testing.assert_array_max_ulp(got_db, exact.astype(np.float32), maxulp=1)
    np.testing.assert_allclose(got_db, g.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_parts_on_request(emu, dtype):
    shape = SHAPES[0]
    rows, inner, out = shape
    x, w, _, g = _data(shape, 3)
    xt, wt, gt = _tensors(emu, dtype, x, w, g)
    full = emu.linear_backward(gt._data, xt._data, xt.shape, wt._data, wt.shape, True, True, True)
    for need in [
        (True, False, False),
        (False, True, False),
        (False, False, True),
        (False, True, True),
    ]:
        parts = emu.linear_backward(gt._data, xt._data, xt.shape, wt._data, wt.shape, *need)
        for wanted, part, whole, s in zip(need, parts, full, [(rows, inner), (out, inner), (out,)]):
            assert (part is not None) == wanted
            if wanted:
                np.testing.assert_array_max_ulp(
                    np.frombuffer(_bits(emu, part, s), np.float32),
                    np.frombuffer(_bits(emu, whole, s), np.float32),
                    maxulp=1,
                )


def test_the_same_bits_every_call(emu):
    x, w, b, g = _data(SHAPES[2], 4)
    xt, wt, _, gt = _tensors(emu, "float32", x, w, b, g)
    runs = [
        emu.linear_backward(gt._data, xt._data, xt.shape, wt._data, wt.shape, True, True, True)
        for _ in range(2)
    ]
    for a, c, s in zip(*runs, [(x.shape), (w.shape), (w.shape[0],)]):
        assert _bits(emu, a, s) == _bits(emu, c, s)


def test_mixed_dtypes_are_refused(emu):
    x, w, b, _ = _data(SHAPES[1], 5)
    xt = rt.tensor(x, backend=emu).astype("bfloat16")
    wt, bt = rt.tensor(w, backend=emu), rt.tensor(b, backend=emu)
    with pytest.raises(CudaDTypeError, match="one dtype"):
        emu.linear(xt._data, xt.shape, wt._data, wt.shape, bt._data)
    with pytest.raises(CudaDTypeError, match="float32 bias"):
        emu.linear(wt._data, wt.shape, wt._data, wt.shape, bt.astype("bfloat16")._data)


@pytest.mark.parametrize("dtype", DTYPES)
def test_counted_passes(dtype):
    backend = CountingCudaBackend()
    rows, inner, out = 4096, 768, 3072
    x = rt.zeros([rows, inner], backend=backend).astype(dtype)
    w = rt.zeros([out, inner], backend=backend).astype(dtype)
    b = rt.zeros([out], backend=backend)
    g = rt.zeros([rows, out], backend=backend)
    backend.counter.reset()
    backend.linear(x._data, x.shape, w._data, w.shape, b._data)
    forward = backend.counter.reset()
    assert (forward.gemms, forward.kernel_launches, dict(forward.epilogues)) == (1, 0, {"bias": 1})
    backend.linear_backward(g._data, x._data, x.shape, w._data, w.shape, True, True, True)
    back = backend.counter.reset()
    assert back.gemms == 2
    if dtype == "float32":
        assert (back.kernel_launches, dict(back.epilogues)) == (0, {"bgradb": 1})
    else:
        assert dict(back.launches) == {"colsum_to_bf16": 1}


def test_a_bfloat16_compute_dtype_rounds_float32_operands(emu):
    shape = SHAPES[0]
    rows, inner, out = shape
    x, w, b, g = _data(shape, 6)
    xf, wf, bt, gt = (rt.tensor(a, backend=emu) for a in (x, w, b, g))
    xl, wl = xf.astype("bfloat16"), wf.astype("bfloat16")
    low = DType.bfloat16
    got = emu.linear(xf._data, xf.shape, wf._data, wf.shape, bt._data, low)
    want = emu.linear(xl._data, xl.shape, wl._data, wl.shape, bt._data)
    assert _bits(emu, got, (rows, out)) == _bits(emu, want, (rows, out))
    parts = emu.linear_backward(
        gt._data, xf._data, xf.shape, wf._data, wf.shape, True, True, True, low
    )
    wants = emu.linear_backward(gt._data, xl._data, xl.shape, wl._data, wl.shape, True, True, True)
    for p, q, s in zip(parts, wants, [(rows, inner), (out, inner), (out,)]):
        assert _bits(emu, p, s) == _bits(emu, q, s)
