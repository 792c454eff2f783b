import math

import numpy as np
import pytest
from tensor_helpers import BROADCAST_PAIRS, SHAPES, close, on, rand

import riftco.tensor as rt

ERF = np.vectorize(math.erf, otypes=[np.float64])

UNARY = {
    "neg": (lambda t: -t, lambda x: -x),
    "abs": (rt.abs, np.abs),
    "exp": (rt.exp, np.exp),
    "log": (rt.log, None),
    "sqrt": (rt.sqrt, None),
    "rsqrt": (rt.rsqrt, None),
    "tanh": (rt.tanh, np.tanh),
    "sigmoid": (rt.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "relu": (rt.relu, lambda x: np.maximum(x, 0)),
    "gelu": (rt.gelu, lambda x: 0.5 * x * (1 + ERF(x / np.sqrt(2)))),
    "gelu_tanh": (
        lambda t: rt.gelu(t, approximate="tanh"),
        lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    ),
    "silu": (rt.silu, lambda x: x / (1 + np.exp(-x))),
}
POSITIVE = {"log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x)}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_unary_matches_numpy(backend, name, shape):
    fn, ref = UNARY[name]
    if name in POSITIVE:
        x, ref = rand(shape, low=0.01, high=50.0), POSITIVE[name]
    else:
        x = rand(shape, low=-12.0, high=12.0)
    close(fn(on(backend, x)), ref(x.astype(np.float64)), rtol=2e-6, atol=2e-6)


def test_unary_large_and_special_values(backend):
    x = np.array([-1e30, -100.0, -88.0, 0.0, 1e-30, 88.0, 100.0, np.inf, -np.inf], np.float32)
    t = on(backend, x)
    with np.errstate(over="ignore"):
        want_exp = np.exp(x.astype(np.float64)).astype(np.float32)
        want_sigmoid = 1 / (1 + np.exp(-x.astype(np.float64)))
    # Below e^-87.3 the CPU kernel returns exactly 0 rather than a subnormal.
    close(rt.exp(t), want_exp, rtol=2e-6, atol=1e-37)
    close(rt.tanh(t), np.tanh(x), atol=1e-7)
    close(rt.sigmoid(t), want_sigmoid, atol=1e-7)
    assert np.isnan(rt.exp(on(backend, [np.nan])).item())
    logs = rt.log(on(backend, [0.0, -1.0, np.inf])).numpy()
    assert logs[0] == -np.inf and np.isnan(logs[1]) and logs[2] == np.inf


def test_unary_on_int_and_bool(backend):
    i = on(backend, np.array([-3, 0, 5]))
    assert (-i).tolist() == [3, 0, -5]
    assert rt.abs(i).tolist() == [3, 0, 5]
    assert (~on(backend, [True, False])).tolist() == [False, True]
    with pytest.raises(rt.DTypeError, match="exp: expected float32 or bfloat16, found int64"):
        rt.exp(i)


BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.divide),
    "maximum": (rt.maximum, np.maximum),
    "minimum": (rt.minimum, np.minimum),
    "pow": (lambda a, b: a**b, np.power),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize(("sa", "sb"), BROADCAST_PAIRS, ids=str)
def test_binary_broadcasting(backend, name, sa, sb):
    fn, ref = BINARY[name]
    a, b = rand(sa, 1), rand(sb, 2)
    if name == "pow":
        a = np.abs(a) + 0.1
    if name == "div":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    close(fn(on(backend, a), on(backend, b)), ref(a, b), rtol=3e-6)


@pytest.mark.parametrize(("sa", "sb"), BROADCAST_PAIRS[:6], ids=str)
def test_int_arithmetic(backend, sa, sb):
    a = np.arange(int(np.prod(sa))).reshape(sa) - 3
    b = np.arange(int(np.prod(sb))).reshape(sb) * 2 + 1
    ta, tb = on(backend, a), on(backend, b)
    close(ta + tb, a + b)
    close(ta * tb, a * b)
    close(rt.maximum(ta, tb), np.maximum(a, b))
    with pytest.raises(rt.DTypeError, match="div"):
        ta / tb


def test_scalars_and_reflected_operators(backend):
    x = rand((3, 4))
    t = on(backend, x)
    close(t + 1, x + 1)
    close(2 - t, 2 - x)
    close(3.5 * t, 3.5 * x)
    close(1 / (t + 10), 1 / (x + 10))
    close(t**2, x**2)
    close(np.float32(2.0) * t, 2 * x)
    i = on(backend, np.array([1, 2]))
    close(i + 1, [2, 3])
    with pytest.raises(rt.DTypeError, match="float scalar"):
        i + 0.5
    with pytest.raises(TypeError, match="unsupported operand"):
        t + "a"
    with pytest.raises(TypeError, match="expected a Tensor or a Python scalar"):
        rt.add(t, "a")


class Wrapper:
    """Stands for a type (an autograd Variable, say) with its own reflected operators."""

    def __radd__(self, other):
        return "wrapper radd"

    def __rmatmul__(self, other):
        return "wrapper rmatmul"


def test_unknown_operands_defer_to_their_reflected_methods(backend):
    t = on(backend, rand((2, 2)))
    assert t + Wrapper() == "wrapper radd"
    assert t @ Wrapper() == "wrapper rmatmul"


@pytest.mark.parametrize(("sa", "sb"), BROADCAST_PAIRS, ids=str)
def test_comparisons(backend, sa, sb):
    a = np.round(rand(sa, 3))
    b = np.round(rand(sb, 4))
    ta, tb = on(backend, a), on(backend, b)
    for got, want in [
        (ta == tb, a == b),
        (ta != tb, a != b),
        (ta < tb, a < b),
        (ta <= tb, a <= b),
        (ta > tb, a > b),
        (ta >= tb, a >= b),
    ]:
        assert got.dtype is rt.bool_
        np.testing.assert_array_equal(got.numpy(), want)


def test_logical_and_where(backend):
    c = np.array([[True, False, True]])
    a = rand((2, 3))
    ta = on(backend, a)
    tc = on(backend, c)
    close(rt.where(tc, ta, 0.0), np.where(c, a, 0.0))
    close(rt.where(tc, -1.0, ta), np.where(c, -1.0, a))
    m = on(backend, [[True], [False]])
    np.testing.assert_array_equal((tc & m).numpy(), c & np.array([[True], [False]]))
    np.testing.assert_array_equal((tc | m).numpy(), c | np.array([[True], [False]]))
    with pytest.raises(rt.DTypeError, match="where"):
        rt.where(ta, ta, ta)


def test_shape_errors_name_op_and_shapes(backend):
    a, b = on(backend, rand((3, 4))), on(backend, rand((2, 4)))
    with pytest.raises(rt.ShapeError, match=r"add: shapes \(3, 4\) and \(2, 4\) do not broadcast"):
        a + b
    with pytest.raises(
        rt.DTypeError, match=r"mul: operands have dtypes float32 \(3, 4\) and int64"
    ):
        a * on(backend, np.ones((3, 4), np.int64))


def test_nan_propagates_through_maximum(backend):
    got = rt.maximum(on(backend, [np.nan, 1.0]), on(backend, [0.0, np.nan])).numpy()
    assert np.isnan(got).all()
