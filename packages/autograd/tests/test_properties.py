"""Properties over generated shapes: broadcasting gradients and reductions against numpy."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import riftco.autograd as ag
import riftco.tensor as rt

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _sum_to(g, shape):
    """numpy's inverse of broadcasting ``shape`` up to ``g.shape``."""
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead))) if lead else g
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


# op -> (d out/d a, d out/d b) as numpy formulas of the broadcast operands
PARTIALS = {
    "add": (lambda a, b: np.ones_like(a * b), lambda a, b: np.ones_like(a * b)),
    "sub": (lambda a, b: np.ones_like(a * b), lambda a, b: -np.ones_like(a * b)),
    "mul": (lambda a, b: b + 0 * a, lambda a, b: a + 0 * b),
    "div": (lambda a, b: 1 / b + 0 * a, lambda a, b: -a / (b * b)),
}


@SETTINGS
@given(
    shapes=mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
    op=st.sampled_from(sorted(PARTIALS)),
    seed=st.integers(0, 2**16),
)
def test_broadcast_gradients_sum_back_to_each_operand(backend, shapes, op, seed):
    (sa, sb), out_shape = shapes.input_shapes, shapes.result_shape
    rng = np.random.Generator(np.random.PCG64(seed))
    a = rng.uniform(-1, 1, sa).astype(np.float32)
    b = rng.uniform(0.5, 1.5, sb).astype(np.float32)
    g = rng.uniform(-1, 1, out_shape).astype(np.float32)
    va = ag.Variable(rt.from_numpy(a, backend=backend), requires_grad=True)
    vb = ag.Variable(rt.from_numpy(b, backend=backend), requires_grad=True)
    out = getattr(ag, op)(va, vb)
    assert out.shape == tuple(out_shape)
    out.backward(rt.from_numpy(g, backend=backend))
    a64, b64, g64 = a.astype(np.float64), b.astype(np.float64), g.astype(np.float64)
    da, db = PARTIALS[op]
    np.testing.assert_allclose(
        va.grad.numpy(), _sum_to(g64 * da(a64, b64), sa), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        vb.grad.numpy(), _sum_to(g64 * db(a64, b64), sb), rtol=1e-5, atol=1e-5
    )
    assert va.grad.shape == tuple(sa) and vb.grad.shape == tuple(sb)


@st.composite
def _reduction(draw):
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    axes = draw(
        st.one_of(
            st.none(),
            st.integers(-len(shape), len(shape) - 1),
            st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True).map(tuple),
        )
    )
    return shape, axes, draw(st.booleans()), draw(st.sampled_from(["sum", "mean"]))


@SETTINGS
@given(case=_reduction(), seed=st.integers(0, 2**16))
def test_reduction_gradients_spread_evenly(backend, case, seed):
    shape, axis, keepdims, op = case
    rng = np.random.Generator(np.random.PCG64(seed))
    x = ag.Variable(rt.from_numpy(rng.uniform(-1, 1, shape), backend=backend), requires_grad=True)
    out = getattr(ag, op)(x, axis=axis, keepdims=keepdims)
    g = rng.uniform(-1, 1, out.shape).astype(np.float32)
    out.backward(rt.from_numpy(g, backend=backend))
    axes = (
        tuple(range(len(shape))) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    )
    kept = g.reshape([1 if i in {a % len(shape) for a in axes} else d for i, d in enumerate(shape)])
    want = np.broadcast_to(kept, shape).astype(np.float64)
    if op == "mean":
        want = want / np.prod([shape[a] for a in axes])
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)
