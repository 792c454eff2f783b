"""custom_gradient: a fused result with its own, validated VJP."""

import numpy as np
import pytest

import riftco.autograd as ag
import riftco.tensor as rt
from riftco.autograd import GradientError, custom_gradient


def _fused_mul_add(x, w, b):
    """x * w + b computed in one go, as a fused kernel would."""
    value = x.value * w.value + b.value

    def vjp(g):
        return [g * w.value, (g * x.value).sum_to_shape(w.shape), g.sum_to_shape(b.shape)]

    return custom_gradient(value, [x, w, b], vjp)


def test_custom_gradient_matches_the_composed_ops(make):
    x, w, b = make((2, 3), seed=1), make((3,), seed=2), make((1, 3), seed=3)
    (_fused_mul_add(x, w, b) ** 2).sum().backward()
    fused = [v.grad.numpy().copy() for v in (x, w, b)]
    for v in (x, w, b):
        v.zero_grad()
    ((x * w + b) ** 2).sum().backward()
    for v, got in zip((x, w, b), fused):
        np.testing.assert_allclose(got, v.grad.numpy(), rtol=1e-6)
    assert ag.gradcheck(_fused_mul_add, [x, w, b])


def test_none_for_inputs_without_gradient(make):
    x, w = make((3,), seed=1), make((3,), seed=2, requires_grad=False)
    y = custom_gradient((x * w).value, [x, w], lambda g: [g * w.value, None])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), w.numpy())


def test_no_graph_when_nothing_requires_gradients(make):
    x = make((3,), requires_grad=False)
    y = custom_gradient(x.value, [x], lambda g: [g])
    assert not y.requires_grad


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda g, x: [g, g], "returned 2 gradients for 1 inputs"),
        (lambda g, x: [], "returned 0 gradients"),
        (lambda g, x: g, "list or tuple"),
        (lambda g, x: [g.reshape(-1)], r"shape \(6,\), expected \(2, 3\)"),
        (lambda g, x: [g.astype("int64")], "dtype int64, expected float32"),
        (lambda g, x: [x], "must be a Tensor or None, found Variable"),
        (lambda g, x: [g.numpy()], "found ndarray"),
    ],
)
def test_invalid_vjp_results_are_named(make, bad, message):
    x = make((2, 3), name="x")
    x.grad = None
    y = custom_gradient(x.value * 2.0, [x], lambda g: bad(g, x))
    with pytest.raises(GradientError, match=message) as raised:
        (y * 3.0).sum().backward()
    if "expected" in message and "gradients" not in message:
        assert "'x'" in str(raised.value)
    assert x.grad is None


def test_gradient_on_another_backend_is_refused():
    from riftco.testing.tensor import REFERENCE_ENTRY_POINT, extra_entry_points

    with extra_entry_points(REFERENCE_ENTRY_POINT):
        x = ag.Variable(rt.ones((2,), backend="cpu"), requires_grad=True)
        y = custom_gradient(x.value, [x], lambda g: [g.to("reference")])
        with pytest.raises(GradientError, match="backend 'reference', expected 'cpu'"):
            y.sum().backward()
        assert x.grad is None


def test_argument_types_are_checked(make):
    x = make((2,))
    with pytest.raises(TypeError, match="forward_result"):
        custom_gradient(np.zeros(2), [x], lambda g: [g])
    with pytest.raises(TypeError, match="input #0"):
        custom_gradient(x.value, [x.value], lambda g: [g])
    with pytest.raises(TypeError, match="callable"):
        custom_gradient(x.value, [x], None)


def test_inputs_updated_in_place_are_rejected(make, backend):
    x = make((2,))
    y = custom_gradient(x.value * 2.0, [x], lambda g: [g * 2.0])
    x.value.assign_(rt.zeros((2,), backend=backend))
    with pytest.raises(ag.StaleGraphError):
        y.sum().backward()


def _fused_sum_and_product(a, b):
    """(a + b, a * b) computed in one go, one VJP for both results."""

    def vjp(grads):
        gs, gp = grads
        da = (gs if gs is not None else 0.0) + (gp * b.value if gp is not None else 0.0)
        db = (gs if gs is not None else 0.0) + (gp * a.value if gp is not None else 0.0)
        return [da, db]

    return ag.custom_gradients([a.value + b.value, a.value * b.value], [a, b], vjp)


def test_custom_gradients_take_every_results_gradient_at_once(make):
    a, b = make((2, 3), seed=4), make((2, 3), seed=5)
    seen = []
    s, p = _fused_sum_and_product(a, b)
    ((s * 3.0) + p * p).sum().backward()
    fused = [v.grad.numpy().copy() for v in (a, b)]
    for v in (a, b):
        v.zero_grad()
    ((a + b) * 3.0 + (a * b) * (a * b)).sum().backward()
    for v, got in zip((a, b), fused):
        np.testing.assert_allclose(got, v.grad.numpy(), rtol=1e-6)
    # A result no gradient reached is None in the list the VJP receives.

    def vjp(grads):
        seen.append([g is None for g in grads])
        return [grads[1], grads[1]]

    _, q = ag.custom_gradients([a.value + b.value, a.value * b.value], [a, b], vjp)
    q.sum().backward()
    assert seen == [[True, False]]


def test_custom_gradients_check_their_arguments(make):
    a = make((2,), seed=6)
    with pytest.raises(TypeError, match="forward result #1 must be a Tensor"):
        ag.custom_gradients([a.value, 3.0], [a], lambda g: [None])
    with pytest.raises(TypeError, match="at least one forward result"):
        ag.custom_gradients([], [a], lambda g: [None])
    s, t = ag.custom_gradients([a.value, a.value], [a], lambda g: [g[0]] * 2)
    with pytest.raises(GradientError, match="returned 2 gradients for 1 inputs"):
        (s + t).sum().backward()
    with ag.no_grad():
        plain = ag.custom_gradients([a.value, a.value], [a], lambda g: [None])
    assert all(not v.requires_grad for v in plain)
