"""Products in a compute dtype (API 1.9 ``matmul_compute``): float32 operands multiplied
as their bfloat16 roundings with float32 sums, bit for bit the product of the converted
operands, on every backend (its own kernel or the op layer's composition)."""

import ml_dtypes
import numpy as np
import pytest
from tensor_helpers import on

import riftco.tensor as rt

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture
def backend(backend):
    if rt.bfloat16 not in backend.dtypes:
        pytest.skip(f"backend {backend.name!r} holds no bfloat16 tensors")
    return backend


def operands(shape_a, shape_b, seed=0):
    rng = np.random.default_rng(seed)
    # Values with bits below bfloat16's resolution, and exact ties, so rounding shows.
    a = rng.standard_normal(shape_a).astype(np.float32)
    b = rng.standard_normal(shape_b).astype(np.float32)
    a.reshape(-1)[:3] = [1.00390625, -3.01171875, 1e-3]
    return a, b


CASES = [
    ((5, 7), (7, 3), False, False),
    ((7, 5), (7, 3), True, False),
    ((5, 7), (3, 7), False, True),
    ((2, 4, 9), (9, 6), False, False),
    ((3, 1, 4, 8), (2, 6, 8), False, True),
]


@pytest.mark.parametrize("shape_a, shape_b, ta, tb", CASES)
def test_equals_the_product_of_the_rounded_operands(backend, shape_a, shape_b, ta, tb):
    a, b = operands(shape_a, shape_b)
    x, y = on(backend, a), on(backend, b)
    got = rt.matmul(x, y, ta, tb, compute="bfloat16")
    want = rt.matmul(x.astype("bfloat16"), y.astype("bfloat16"), ta, tb)
    assert got.dtype is rt.float32 and got.shape == want.shape
    assert got.numpy().tobytes() == want.numpy().tobytes()
    # The numpy formula: each operand rounded to nearest bfloat16, float32 products.
    ra = a.astype(BF16).astype(np.float64)
    rb = b.astype(BF16).astype(np.float64)
    ra = np.swapaxes(ra, -1, -2) if ta else ra
    rb = np.swapaxes(rb, -1, -2) if tb else rb
    np.testing.assert_allclose(got.numpy(), ra @ rb, rtol=1e-5, atol=1e-5)


def test_vectors_and_float32_compute(backend):
    a, b = operands((7,), (7, 3))
    x, y = on(backend, a), on(backend, b)
    got = rt.matmul(x, y, compute=rt.bfloat16)
    assert got.shape == (3,)
    assert (
        got.numpy().tobytes()
        == rt.matmul(x.astype("bfloat16"), y.astype("bfloat16")).numpy().tobytes()
    )
    exact = rt.matmul(x, y, compute="float32")
    assert exact.numpy().tobytes() == rt.matmul(x, y).numpy().tobytes()


def test_bfloat16_operands_ignore_it_and_other_dtypes_are_refused(backend):
    a, b = operands((4, 5), (5, 2))
    x, y = on(backend, a).astype("bfloat16"), on(backend, b).astype("bfloat16")
    got = rt.matmul(x, y, compute="bfloat16")
    assert got.numpy().tobytes() == rt.matmul(x, y).numpy().tobytes()
    with pytest.raises(rt.DTypeError, match="compute dtype is float32 or bfloat16, found int64"):
        rt.matmul(on(backend, a), on(backend, b), compute="int64")


def test_kernel_or_composition():
    cpu = rt.get_backend("cpu")
    assert rt.CAPABILITIES["matmul_compute"] == 9 <= rt.BACKEND_API_VERSION[1]
    assert "matmul_compute" in cpu.capabilities()
    assert rt.COMPOSED["matmul_compute"] == ("astype", "matmul")
