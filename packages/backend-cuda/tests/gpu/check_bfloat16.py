"""bfloat16 storage on the cuda backend, by dtype name (the backend methods
directly, so it runs whatever dtypes riftco-tensor has): conversions round to
nearest even as ml_dtypes does, copies keep the bits, matmul multiplies
bfloat16 operands with float32 accumulation."""

from __future__ import annotations

import os

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.tensor.dtypes import DType

BACKEND = os.environ.get("RIFTCO_CUDA_CHECK_BACKEND", "cuda")


@pytest.fixture(scope="module")
def backend():
    info = {i.name: i for i in rt.backends()}.get(BACKEND)
    if info is None or not info.available:
        pytest.skip(f"{BACKEND} is unavailable: {info.reason if info else 'not installed'}")
    return rt.get_backend(BACKEND)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even, NaN kept quiet (numpy formula)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def values() -> np.ndarray:
    rng = np.random.default_rng(0)
    special = [
        0.0,
        -0.0,
        1.0,
        1.00390625,
        1.01171875,
        3.4e38,
        -3.4e38,
        1e-40,
        np.inf,
        -np.inf,
        np.nan,
    ]
    return np.concatenate(
        [np.array(special, np.float32), rng.standard_normal(300).astype(np.float32) * 50]
    )


def test_float32_to_bfloat16_rounds_to_nearest_even(backend):
    x = values()
    out = backend._convert(backend.from_numpy(x), x.shape, "float32", "bfloat16")
    got = backend.device.download(out, 0, 2 * x.size).view(np.uint16)
    np.testing.assert_array_equal(got, to_bf16_bits(x))
    try:
        import ml_dtypes
    except ImportError:
        return
    np.testing.assert_array_equal(got, x.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_bfloat16_back_to_float32_and_int64_is_exact(backend):
    bits = to_bf16_bits(values())
    buf = backend.kernels.upload(bits, "bfloat16")
    f32 = backend._convert(buf, bits.shape, "bfloat16", "float32")
    got = backend.to_numpy(f32, bits.shape, DType.float32)
    np.testing.assert_array_equal(got.view(np.uint32), from_bf16_bits(bits).view(np.uint32))


def test_copies_keep_the_bits(backend):
    bits = to_bf16_bits(values()[:12]).reshape(3, 4)
    buf = backend.kernels.upload(bits, "bfloat16")
    t = backend.copy_strided(buf, (3, 4), "bfloat16", (4, 3), [1, 4], 0)
    got = backend.device.download(t, 0, 24).view(np.uint16).reshape(4, 3)
    np.testing.assert_array_equal(got, bits.T)


def test_matmul_of_bfloat16_operands_accumulates_in_float32(backend):
    rng = np.random.default_rng(1)
    a, b = (
        rng.standard_normal((2, 5, 7)).astype(np.float32),
        rng.standard_normal((7, 3)).astype(np.float32),
    )
    ab, bb = to_bf16_bits(a), to_bf16_bits(b)
    out = backend.matmul(
        backend.kernels.upload(ab, "bfloat16"),
        a.shape,
        backend.kernels.upload(bb, "bfloat16"),
        b.shape,
        False,
        False,
    )
    assert out.dtype == "bfloat16"
    got = from_bf16_bits(backend.device.download(out, 0, 2 * 30).view(np.uint16)).reshape(2, 5, 3)
    want = from_bf16_bits(to_bf16_bits(from_bf16_bits(ab) @ from_bf16_bits(bb)))
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
