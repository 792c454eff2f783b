"""The quantized products on every vector level this machine can run (``rt.set_cpu_isa``):
Q8_0 and Q4_0 (integer dot products: ``vpdpbusd`` at avx512-vnni, ``vpmaddubsw`` at
avx512) and NF4's one-row linear (codebook lookups) give the same bits at every level
and every thread count, for one input row and for several, odd block counts and many
rows; NF4 stays within float32 rounding of its exactly dequantized product."""

from __future__ import annotations

import numpy as np
import pytest
from tensor_helpers import reachable

import riftco.tensor as rt
from riftco.tensor.ops.blockquant import BlockWeight, quantize_block_array
from riftco.tensor.ops.quantized import NF4Weight, dequantize_nf4_array

# (rows, cols): odd block counts (3, 7, 49), a short last piece, many rows.
SHAPES = ((37, 96), (70, 224), (1029, 1568))


def block_weights(fmt: str) -> list[tuple[BlockWeight, np.ndarray]]:
    rng = np.random.default_rng(7)
    out = []
    for rows, cols in SHAPES:
        w = (rng.standard_normal((rows, cols)) * rng.uniform(0.05, 2, (rows, 1))).astype(np.float32)
        raw = quantize_block_array(w, fmt)
        out.append((BlockWeight.from_bytes(raw, fmt, (rows, cols)), w))
    return out


def inputs(cols: int) -> list[np.ndarray]:
    rng = np.random.default_rng(cols)
    return [rng.standard_normal((m, cols)).astype(np.float32) * 3 for m in (1, 2, 5)]


def products(fmt: str) -> list[np.ndarray]:
    got = []
    for w, dense in block_weights(fmt):
        for x in inputs(dense.shape[1]):
            got.append(rt.block_linear(rt.tensor(x), w).numpy().copy())
    return got


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_block_products_have_the_same_bits_at_every_level_and_thread_count(fmt, restore):
    want = None
    for isa in reachable():
        assert rt.set_cpu_isa(isa) == isa
        for threads in (1, 2, 3):
            rt.set_num_threads(threads)
            got = products(fmt)
            if want is None:
                want = got
                continue
            for g, v in zip(got, want, strict=True):
                assert np.array_equal(g.view(np.uint32), v.view(np.uint32)), (isa, threads)


def nf4_weights() -> list[NF4Weight]:
    rng = np.random.default_rng(11)
    out = []
    for (rows, cols), block, dq in zip(
        ((37, 128), (70, 384), (1029, 1536)), (32, 64, 128), (False, True, True), strict=True
    ):
        w = (rng.standard_normal((rows, cols)) * 0.2).astype(np.float32)
        out.append(rt.nf4_quantize(w, block, dq))
    return out


def dense(w: NF4Weight) -> np.ndarray:
    a = w.arrays()
    offset = float(a["offset"][0]) if w.double_quant else 0.0
    return dequantize_nf4_array(
        a["codes"], a["absmax"], a.get("group_range"), offset, w.shape, w.block_size
    )


def test_nf4_one_row_has_the_same_bits_at_every_level_and_thread_count(restore):
    weights = nf4_weights()
    xs = [inputs(w.shape[1])[0] for w in weights]
    want = None
    for isa in reachable():
        rt.set_cpu_isa(isa)
        for threads in (1, 2, 3):
            rt.set_num_threads(threads)
            got = [rt.nf4_linear(rt.tensor(x), w).numpy().copy() for w, x in zip(weights, xs)]
            if want is None:
                want = got
                continue
            for g, v in zip(got, want, strict=True):
                assert np.array_equal(g.view(np.uint32), v.view(np.uint32)), (isa, threads)
    assert want is not None
    # The bound against the exactly dequantized weight: float32 rounding of the sum,
    # at most about cols * 2^-24 of the sum of |w x| (here far below that).
    for w, x, y in zip(weights, xs, want, strict=True):
        d = dense(w).astype(np.float64)
        exact = x.astype(np.float64) @ d.T
        scale = np.abs(x.astype(np.float64)) @ np.abs(d).T
        assert np.all(np.abs(y - exact) <= w.shape[1] * 2.0**-24 * scale + 1e-30)
