"""Self-attention through its stacked projections (API 1.13) on the host emulation
(``cudaemu``): the products writing their columns of one stacked matrix, attention
reading its heads out of it, the gradients written into one stacked gradient and read
in place, against the op layer's composition on the same device (the weights
concatenated, one product, the parts narrowed out) -- the same bits for the output,
the statistics and every weight and bias gradient; ``dx``, three products summed into
one result, within float32 roundings of the one product over the stacked gradient.
And the pieces alone: ``swap_heads`` reading and writing column slices, the three-part
column reduction, the accumulating product."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.backends.cuda.ops import base
from riftco.tensor.plugin import DType

sys.path.insert(0, str(Path(__file__).resolve().parent / "emulator"))
import cuda_emulation

pytestmark = pytest.mark.skipif(
    cuda_emulation.available() is not None, reason=str(cuda_emulation.available())
)


class Named(cuda_emulation.EmulatedCudaBackend):
    """The emulated backend, naming the kernels it launches."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        launch = self.device.launch

        def named(module, kernel, *rest):
            self.names.append(kernel)
            launch(module, kernel, *rest)

        self.device.launch = named  # type: ignore[method-assign]


class Composed(cuda_emulation.EmulatedCudaBackend):
    """The emulated backend without the kernels: the op layer's composition."""

    projected_attention = rt.Backend.projected_attention
    projected_attention_backward = rt.Backend.projected_attention_backward


# (batch, steps, heads, kv_heads, head_dim, d_model, bias, compute, window): the cuBLAS
# route (float32, bfloat16 compute, no bias, rows enough for the tiled bias reduction),
# then the row kernels (grouped-query heads, a window).
CASES = [
    (2, 5, 3, 3, 4, 12, True, None, 0),
    (2, 5, 3, 3, 4, 12, True, "bfloat16", 0),
    (1, 6, 2, 2, 8, 16, False, "bfloat16", 0),
    (2, 32, 2, 2, 4, 8, True, "bfloat16", 0),
    (2, 5, 4, 2, 4, 12, True, None, 0),
    (2, 6, 2, 2, 4, 8, True, "bfloat16", 3),
]


def _operands(backend, case, seed=0):
    b, t, h, hkv, dh, d, bias, _, _ = case
    rng = np.random.default_rng(seed)
    sizes = (h * dh, hkv * dh, hkv * dh)
    x = rng.normal(0, 1, (b, t, d)).astype(np.float32)
    ws = [rng.normal(0, 0.4, (n, d)).astype(np.float32) for n in sizes]
    bs = [rng.normal(0, 0.3, (n,)).astype(np.float32) for n in sizes] if bias else None
    g = rng.normal(0, 1, (b, t, h * dh)).astype(np.float32)

    def put(a):
        return rt.from_numpy(a, backend=backend)

    return put(x), [put(w) for w in ws], None if bs is None else [put(v) for v in bs], put(g)


def _run(backend, case):
    _, _, h, hkv, dh, _, _, compute, window = case
    x, ws, bs, g = _operands(backend, case)
    out, state = rt.projected_attention_with_state(
        x, ws, bs, heads=h, kv_heads=hkv, head_dim=dh, window=window, compute=compute
    )
    dx, dws, dbs = rt.projected_attention_backward(g, state)
    return out, state, dx, dws, dbs


def _bits(t):
    return t.numpy().view(np.uint32)


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_the_kernels_give_the_compositions_results(case):
    native, composed = Named(), Composed()
    assert "projected_attention" in native.capabilities()
    assert "projected_attention" not in composed.capabilities()
    got = _run(native, case)
    want = _run(composed, case)
    assert got[1].saved is not None and want[1].saved is None
    # No concatenation, no narrowing copy, no convert: the stacked matrix in place.
    assert not [n for n in native.names if n.startswith(("place", "copy_strided", "convert"))]
    np.testing.assert_array_equal(_bits(got[0]), _bits(want[0]))
    for s, w in zip(got[1].stats, want[1].stats):
        np.testing.assert_array_equal(_bits(s), _bits(w))
    for a, e in zip(got[3], want[3]):
        np.testing.assert_array_equal(_bits(a), _bits(e))
    if case[6]:
        for a, e in zip(got[4], want[4]):
            np.testing.assert_array_equal(_bits(a), _bits(e))
    else:
        assert got[4] is None and want[4] is None
    # dx: three float32 products added (two more roundings) against one product.
    dx, ref = got[2].numpy(), want[2].numpy()
    np.testing.assert_allclose(dx, ref, rtol=1e-5, atol=4e-6 * np.abs(ref).max())


def test_no_input_gradient_when_not_asked():
    case = CASES[0]
    _, _, h, hkv, dh, _, _, _, _ = case
    backend = Named()
    x, ws, bs, g = _operands(backend, case)
    _, state = rt.projected_attention_with_state(x, ws, bs, heads=h, kv_heads=hkv, head_dim=dh)
    dx, dws, dbs = rt.projected_attention_backward(g, state, need_x=False)
    assert dx is None and len(dws) == 3 and dbs is not None and len(dbs) == 3


def test_bfloat16_bias_gradients_are_one_launch_over_the_stacked_gradient():
    case = CASES[3]  # 64 rows: the tiled column reduction's shape
    assert case[0] * case[1] >= base.TILED_AXIS
    backend = Named()
    _run(backend, case)
    assert backend.names.count("reduce_cols_parts_f32") == 1
    assert "reduce_cols_tiled_f32" not in backend.names


def test_swap_heads_reads_and_writes_column_slices():
    emu = cuda_emulation.EmulatedCudaBackend()
    rng = np.random.default_rng(1)
    b, t, h, d = 2, 3, 2, 4
    total = 5 * h * d  # three parts of [t, h, d] somewhere in a wider row
    stacked = rng.normal(0, 2, (b, t, total)).astype(np.float32)
    offsets = [h * d, 3 * h * d, 4 * h * d]
    src = emu.from_numpy(stacked)
    parts = [(src, "float32", t, h, to) for to in ("bfloat16", "float32", "float32")]
    outs = emu._swap_heads(b, d, parts, [(o, total) for o in offsets])
    for out, o, (_, _, _, _, to) in zip(outs, offsets, parts):
        part = stacked[:, :, o : o + h * d].reshape(b, t, h, d).transpose(0, 2, 1, 3)
        want = part.astype(cuda_emulation.ml_dtypes.bfloat16 if to == "bfloat16" else np.float32)
        got = emu.to_numpy(out, (b, h, t, d), DType(to))
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    # And back: heads-first parts written into the columns of one matrix.
    heads_first = [rng.normal(0, 1, (b, h, t, d)).astype(np.float32) for _ in offsets]
    into = emu.from_numpy(np.full((b, t, total), 7.0, np.float32))
    back = [(emu.from_numpy(a), "float32", h, t, "float32") for a in heads_first]
    emu._swap_heads(b, d, back, None, [(into, o, total) for o in offsets])
    want = np.full((b, t, total), 7.0, np.float32)
    for a, o in zip(heads_first, offsets):
        want[:, :, o : o + h * d] = a.transpose(0, 2, 1, 3).reshape(b, t, h * d)
    np.testing.assert_array_equal(emu.to_numpy(into, (b, t, total), DType.float32), want)


def test_the_three_part_column_sum_has_the_tiled_reductions_bits():
    emu = cuda_emulation.EmulatedCudaBackend()
    rng = np.random.default_rng(2)
    rows, sizes = 70, (12, 5, 5)
    total = sum(sizes)
    g = (rng.normal(0, 1, (rows, total)) * np.exp(rng.normal(0, 3, (rows, total)))).astype(
        np.float32
    )
    got = emu._bias_grads(emu.from_numpy(g), rows, sizes, [0, 12, 17], total)
    start = 0
    for buf, size in zip(got, sizes):
        part = np.ascontiguousarray(g[:, start : start + size])
        want = emu.reduce("sum", emu.from_numpy(part), (rows, size), DType.float32, 0)
        np.testing.assert_array_equal(
            emu.to_numpy(buf, (size,), DType.float32).view(np.uint32),
            emu.to_numpy(want, (size,), DType.float32).view(np.uint32),
        )
        start += size


def test_an_accumulating_product_adds_to_what_it_holds():
    emu = cuda_emulation.EmulatedCudaBackend()
    rng = np.random.default_rng(4)
    a = rng.normal(0, 1, (3, 4)).astype(np.float32)
    b = rng.normal(0, 1, (4, 2)).astype(np.float32)
    c0 = rng.normal(0, 1, (3, 2)).astype(np.float32)
    c = emu.from_numpy(c0)
    # Row-major c[3, 2] += a b: column-major c^T = b^T a^T.
    emu.device.gemm(
        "float32", 2, 3, 4, (emu.from_numpy(b), 0, 2, 0, False),
        (emu.from_numpy(a), 0, 4, 0, False), (c, 0, 2, 0, False), 1, "float32", True,
    )  # fmt: skip
    want = c0 + (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(emu.to_numpy(c, (3, 2), DType.float32), want)
