"""Float to integer casts on the cuda backend give the CPU backend's answers for
every value, out-of-range ones included: toward zero, and NaN, infinities and
values outside int64 give INT64_MIN (a GPU's own conversion saturates instead);
uint8 takes that integer's low byte."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

import riftco.tensor as rt
from riftco.testing import unavailable_reason

BACKEND = os.environ.get("RIFTCO_CUDA_CHECK_BACKEND", "cuda")

VALUES = np.array(
    [np.nan, -np.nan, np.inf, -np.inf, 1e19, -1e19, 9.3e18, -9.3e18, 2.0**62, -(2.0**63)]
    + [3.7, -3.7, 0.5, -0.5, 0.0, -0.0, 255.9, 256.0, 300.0, -1.0, -255.0, 1e10],
    dtype=np.float32,
)


@pytest.fixture(scope="module")
def backend():
    reason = unavailable_reason(BACKEND)
    if reason is not None:
        pytest.skip(f"{BACKEND} is unavailable: {reason}")
    return rt.get_backend(BACKEND)


@pytest.mark.parametrize("source", ["float32", "bfloat16"])
@pytest.mark.parametrize("target", ["int64", "uint8"])
def test_float_to_integer_casts_match_the_cpu(backend, source, target):
    values = VALUES if source == "float32" else VALUES.astype(ml_dtypes.bfloat16)
    got = rt.from_numpy(values, backend=backend).astype(target).numpy()
    want = rt.from_numpy(values, backend="cpu").astype(target).numpy()
    np.testing.assert_array_equal(got, want)
