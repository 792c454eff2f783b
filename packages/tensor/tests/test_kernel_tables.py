"""Each backend's kernels against riftco.tensor's op vocabularies, by name.

Every backend (the ``backend`` fixture: cpu, the numpy reference, each available
plugin) runs every op of every vocabulary, asked for by its name, and gives the
vocabulary's numpy formula. The plugins whose kernel tables are Python (cuda's op codes
read from its CUDA C, the wgpu backends' WGSL tables) are also checked statically,
with no device: they name exactly the vocabulary's ops. tpu's programs are chosen by
op name in its native module; the by-name checks run on it through the backend fixture
where a PJRT plugin is loaded (``run_backend_suite("tpu")``).
"""

from __future__ import annotations

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.tensor.plugin import (
    ACTIVATION_GRADIENTS,
    BINARY,
    BOOL_COMPARISONS,
    BOOL_UNARY,
    COMPARISONS,
    FLOAT_UNARY,
    INTEGER_BINARY,
    INTEGER_REDUCTIONS,
    INTEGER_UNARY,
    ORDERINGS,
    REDUCTIONS,
    UNARY,
    VOCABULARIES,
    check_kernel_table,
)

#: Inside every float op's domain (log, sqrt and rsqrt need positive values).
X = np.linspace(0.25, 3.0, 12, dtype=np.float32).reshape(3, 4)
Y = np.linspace(-2.0, 2.0, 4, dtype=np.float32)


def _storage(backend, array: np.ndarray):
    return backend.from_numpy(np.ascontiguousarray(array))


def _read(backend, handle, like: np.ndarray, dtype) -> np.ndarray:
    return np.asarray(backend.to_numpy(handle, like.shape, dtype))


def test_the_vocabularies_are_name_tables_of_the_interface():
    assert set(VOCABULARIES) <= set(rt.CAPABILITIES)
    assert FLOAT_UNARY | BOOL_UNARY == set(UNARY) and INTEGER_UNARY <= FLOAT_UNARY
    assert INTEGER_BINARY <= set(BINARY) and INTEGER_REDUCTIONS <= set(REDUCTIONS)
    assert ORDERINGS | BOOL_COMPARISONS == set(COMPARISONS)
    check_kernel_table("unary", list(UNARY))
    with pytest.raises(ValueError, match=r"missing \['silu'\], not in the vocabulary \['swish'\]"):
        check_kernel_table("unary", [*(set(UNARY) - {"silu"}), "swish"])
    check_kernel_table("reduce", INTEGER_REDUCTIONS, subset=True)


@pytest.mark.parametrize("op", sorted(FLOAT_UNARY))
def test_every_float_unary_op_by_name(backend, op):
    out = backend.unary(op, _storage(backend, X), X.shape, rt.float32)
    want = UNARY[op](X.astype(np.float64))
    np.testing.assert_allclose(_read(backend, out, X, rt.float32), want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("op", sorted(INTEGER_UNARY | BOOL_UNARY))
def test_every_integer_and_bool_unary_op_by_name(backend, op):
    x = np.array([-3, 0, 5]) if op in INTEGER_UNARY else np.array([True, False, True])
    dtype = rt.int64 if op in INTEGER_UNARY else rt.bool_
    out = backend.unary(op, _storage(backend, x), x.shape, dtype)
    np.testing.assert_array_equal(_read(backend, out, x, dtype), UNARY[op](x))


@pytest.mark.parametrize("op", sorted(BINARY))
def test_every_binary_op_by_name(backend, op):
    a, b = (X, np.abs(Y) + 0.5) if op == "pow" else (X, Y)
    out = backend.binary(
        op, _storage(backend, a), a.shape, _storage(backend, b), b.shape, a.shape, rt.float32
    )
    want = BINARY[op](a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(_read(backend, out, a, rt.float32), want, rtol=2e-6, atol=2e-6)
    if op in INTEGER_BINARY:
        i, j = np.array([[4, -6], [7, 2]]), np.array([3, -2])
        out = backend.binary(
            op, _storage(backend, i), i.shape, _storage(backend, j), j.shape, i.shape, rt.int64
        )
        np.testing.assert_array_equal(_read(backend, out, i, rt.int64), BINARY[op](i, j))


@pytest.mark.parametrize("op", sorted(COMPARISONS))
def test_every_comparison_by_name(backend, op):
    if op in BOOL_COMPARISONS:
        a = np.array([[True, True, False, False]])
        b = np.array([True, False, True, False])
        dtype = rt.bool_
    else:
        a = np.array([[0.0, 1.0, 2.0, -1.0]], np.float32)
        b = np.array([1.0, 1.0, 0.0, -1.0], np.float32)
        dtype = rt.float32
    out = backend.compare(
        op, _storage(backend, a), a.shape, _storage(backend, b), b.shape, a.shape, dtype
    )
    np.testing.assert_array_equal(_read(backend, out, a, rt.bool_), COMPARISONS[op](a, b))


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
def test_every_reduction_by_name(backend, op):
    out = backend.reduce(op, _storage(backend, X), X.shape, rt.float32, 1)
    want = REDUCTIONS[op](X.astype(np.float64), 1)
    np.testing.assert_allclose(_read(backend, out, want, rt.float32), want, rtol=2e-6)
    if op in INTEGER_REDUCTIONS:
        i = np.array([[4, -6, 1], [7, 2, 0]])
        out = backend.reduce(op, _storage(backend, i), i.shape, rt.int64, 0)
        np.testing.assert_array_equal(_read(backend, out, i[0], rt.int64), REDUCTIONS[op](i, 0))


@pytest.mark.parametrize("op", sorted(ACTIVATION_GRADIENTS))
def test_every_activation_gradient_by_name(backend, op):
    x = X - 1.5
    dy = np.full_like(x, 0.5)
    out = backend.activation_backward(op, _storage(backend, x), _storage(backend, dy), x.shape)
    want = ACTIVATION_GRADIENTS[op](x.astype(np.float64)) * 0.5
    np.testing.assert_allclose(_read(backend, out, x, rt.float32), want, rtol=1e-5, atol=1e-6)


def test_cudas_op_codes_name_the_vocabularies():
    codes = pytest.importorskip(
        "riftco.backends.cuda.ops.codes", reason="riftco-backend-cuda is not installed"
    )
    assert set(codes.KERNEL_TABLES) == set(VOCABULARIES)
    for capability, names in codes.KERNEL_TABLES.items():
        check_kernel_table(capability, names)
    # The int64 kernel takes the codes of neg and abs only.
    assert INTEGER_UNARY <= set(codes.UNARY)


def test_the_wgpu_kernel_tables_name_the_vocabularies():
    tables = pytest.importorskip(
        "riftco.backends.metal.kernel_tables", reason="riftco-backend-metal is not installed"
    )
    assert set(tables.KERNEL_TABLES) == set(VOCABULARIES)
    for capability, by_dtype in tables.KERNEL_TABLES.items():
        check_kernel_table(capability, tables.names(capability))
        for names in by_dtype.values():
            check_kernel_table(capability, names, subset=True)
    assert tables.KERNEL_TABLES["unary"][rt.int64] == INTEGER_UNARY
    assert tables.KERNEL_TABLES["binary"][rt.int64] == INTEGER_BINARY
