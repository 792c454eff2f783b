"""cuBLASLt's fused epilogues on the cuda backend against the CPU: the forward bias
(``CUBLASLT_EPILOGUE_BIAS``: the product's float32 sums plus the bias, within the
products' float32 rounding of the CPU), the float32 bias gradient from ``BGRADB``
(float32 accumulation in cuBLASLt's order: within ``rows * 2**-24 * sum |g|``), the
bfloat16 route's bias gradient (float64 sums: within one float32 rounding), and the
same bits on every call of a shape (the algorithm chosen once, no split-K)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.testing import unavailable_reason

BACKEND = os.environ.get("RIFTCO_CUDA_CHECK_BACKEND", "cuda")


@pytest.fixture(scope="module")
def backend():
    reason = unavailable_reason(BACKEND)
    if reason is not None:
        pytest.skip(f"{BACKEND} is unavailable: {reason}")
    return rt.get_backend(BACKEND)


@pytest.mark.parametrize("compute", [None, "bfloat16"])
@pytest.mark.parametrize("shape", [(4096, 768, 2304), (333, 96, 40), (7, 16, 8)], ids=str)
def test_linear_and_its_gradients_match_the_cpu(backend, shape, compute):
    rows, inner, out = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, inner)).astype(np.float32)
    w = (rng.standard_normal((out, inner)) / np.sqrt(inner)).astype(np.float32)
    b = rng.standard_normal(out).astype(np.float32)
    g = rng.standard_normal((rows, out)).astype(np.float32)
    on = [rt.from_numpy(a, backend=backend) for a in (x, w, b, g)]
    cpu = [rt.from_numpy(a) for a in (x, w, b, g)]
    y = rt.linear(*on[:3], compute=compute).numpy()
    want = rt.linear(*cpu[:3], compute=compute).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    parts = rt.linear_backward(on[3], on[0], on[1], compute=compute)
    wants = rt.linear_backward(cpu[3], cpu[0], cpu[1], compute=compute)
    for p, q in zip(parts[:2], wants[:2]):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-3)
    bound = rows * 2.0**-24 * np.abs(g.astype(np.float64)).sum(0) + 1e-30
    assert (np.abs(parts[2].numpy() - g.astype(np.float64).sum(0)) <= 2 * bound).all()
    again = rt.linear_backward(on[3], on[0], on[1], compute=compute)
    for p, q in zip(parts, again):
        assert p.numpy().tobytes() == q.numpy().tobytes()
    assert rt.linear(*on[:3], compute=compute).numpy().tobytes() == y.tobytes()
