"""The traversal: accumulation, repeated backward, seeds, long chains, stale graphs,
and all-or-nothing commits."""

import numpy as np
import pytest

import riftco.autograd as ag
import riftco.tensor as rt
from riftco.autograd import GradientError, StaleGraphError, Variable


def test_gradients_accumulate_across_uses(make):
    x = make((3,))
    y = x * x + x * 3.0 + x  # x reaches the output through four paths
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() + 4.0, rtol=1e-6)


def test_gradients_accumulate_across_backward_calls(make):
    x = make((3,))
    (x * 2.0).sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 5.0))


def test_repeated_backward_needs_retain_graph(make):
    x = make((2, 2))
    loss = (x.exp() * x).sum()
    loss.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first, rtol=1e-6)
    with pytest.raises(GradientError, match="freed"):
        loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first, rtol=1e-6)


def test_seed_for_non_scalar_outputs(make, backend):
    x = make((2, 3))
    y = x * 2.0
    with pytest.raises(GradientError, match="seed"):
        y.backward()
    seed = rt.full((2, 3), 0.5, backend=backend)
    y.backward(seed)
    np.testing.assert_allclose(x.grad.numpy(), np.ones((2, 3)))
    with pytest.raises(GradientError, match="seed"):
        (x * 2.0).backward(rt.ones((3, 2), backend=backend))


def test_backward_from_a_leaf(make):
    x = make(())
    x.backward()
    assert x.grad.item() == 1.0


def test_several_roots(make, backend):
    x = make((3,))
    a, b = x * 2.0, x.exp()
    ag.backward([a.sum(), b], [None, rt.ones((3,), backend=backend)])
    np.testing.assert_allclose(x.grad.numpy(), 2.0 + np.exp(x.numpy()), rtol=1e-6)


def test_root_that_is_also_an_intermediate_of_another_root(make):
    x = make(())
    y = x * 3.0
    z = y * y
    ag.backward([z, y])
    np.testing.assert_allclose(x.grad.item(), 18 * x.item() + 3.0, rtol=1e-6)


def test_grad_returns_without_accumulating(make):
    x, w = make((2, 3), seed=1), make((3,), seed=2)
    h = x * w
    y = h.sum()
    gx, gh = ag.grad(y, [x, h], retain_graph=True)
    np.testing.assert_allclose(gx.numpy(), np.broadcast_to(w.numpy(), (2, 3)))
    np.testing.assert_array_equal(gh.numpy(), np.ones((2, 3)))
    assert x.grad is None and w.grad is None
    unused = make((1,), seed=3)
    assert ag.grad(y, [unused], retain_graph=True)[0] is None
    with pytest.raises(GradientError, match="do not depend"):
        ag.grad(y, [unused], allow_unused=False)
    (gw,) = ag.grad([y], [w], seeds=[None])
    np.testing.assert_allclose(gw.numpy(), x.numpy().sum(axis=0), rtol=1e-6)
    with pytest.raises(GradientError, match="freed"):
        ag.grad(y, w)


def test_module_level_backward_takes_one_variable(make):
    x = make((2,))
    ag.backward((x * 3.0).sum())
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_ten_thousand_operation_chain(make):
    x = make(())
    y = x
    for _ in range(10_000):
        y = y * 1.0001 + 0.0
    y.backward()
    np.testing.assert_allclose(x.grad.item(), 1.0001**10_000, rtol=1e-3)


def test_dropping_a_long_unused_chain(make):
    x = make(())
    y = x
    for _ in range(50_000):
        y = y + 1.0
    del y  # deallocation must not recurse


def test_in_place_update_of_a_saved_parameter_is_rejected(make, backend):
    x, w = make((2, 3), seed=1), make((3, 4), seed=2, name="w")
    (x @ w).sum().backward()
    before = (x.grad.numpy().copy(), w.grad.numpy().copy())
    loss = (x @ w).sum()
    w.value.assign_(rt.zeros((3, 4), backend=backend))  # an optimizer step
    with pytest.raises(StaleGraphError, match="'w'.*updated in place"):
        loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), before[0])
    np.testing.assert_array_equal(w.grad.numpy(), before[1])


def test_reassigned_value_is_rejected(make, backend):
    x, w = make((2, 3), seed=1), make((3,), seed=2, name="w")
    loss = (x * w).sum()
    w.value = rt.tensor(w.numpy(), backend=backend)  # same numbers, another tensor
    with pytest.raises(StaleGraphError, match="another tensor"):
        loss.backward()
    assert x.grad is None and w.grad is None


def test_moved_parameter_is_rejected():
    from riftco.testing.tensor import REFERENCE_ENTRY_POINT, extra_entry_points

    with extra_entry_points(REFERENCE_ENTRY_POINT):
        x = Variable(rt.ones((2, 2), backend="cpu"), requires_grad=True)
        w = Variable(rt.ones((2, 2), backend="cpu"), requires_grad=True, name="w")
        loss = (x @ w).sum()
        w.value = w.value.to("reference")
        with pytest.raises(StaleGraphError, match="reference"):
            loss.backward()
        assert x.grad is None and w.grad is None
        # Nothing of b is saved by add, so the commit catches the move.
        b = Variable(rt.ones((2, 2), backend="cpu"), requires_grad=True, name="b")
        loss = (x + b).sum()
        b.value = b.value.to("reference")
        with pytest.raises(StaleGraphError, match="'b'"):
            loss.backward()
        assert x.grad is None and b.grad is None


def test_updated_saved_output_is_rejected(make, backend):
    x = make((3,))
    y = x.exp()
    loss = (y * 2.0).sum()
    y.value.assign_(rt.zeros((3,), backend=backend))
    with pytest.raises(StaleGraphError):
        loss.backward()


def test_updated_constant_tensor_is_rejected(make, const):
    x = make((3,))
    mask = const([1.0, 0.0, 1.0])
    loss = (x * mask).sum()
    mask.assign_(const([0.0, 0.0, 0.0]))
    with pytest.raises(StaleGraphError):
        loss.backward()


def _failing_after(x, calls):
    """x * 2 through a custom VJP that raises on its first call."""

    def vjp(g):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("kernel failed")
        return [ag.mul(g, 2.0).value]

    return ag.custom_gradient((x * 2.0).value, [x], vjp)


def test_exception_in_a_vjp_leaves_every_gradient_unchanged(make):
    x, w = make((3,), seed=1), make((3,), seed=2)
    (x * w).sum().backward()
    before = (x.grad.numpy().copy(), w.grad.numpy().copy())
    calls = []
    # w's gradient is computed before the failing VJP runs, x's path fails.
    loss = (w * 5.0).sum() + _failing_after(x, calls).sum()
    with pytest.raises(RuntimeError, match="kernel failed"):
        loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), before[0])
    np.testing.assert_array_equal(w.grad.numpy(), before[1])
    loss.backward()  # the graph survived the failed attempt
    np.testing.assert_allclose(x.grad.numpy(), before[0] + 2.0, rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), before[1] + 5.0, rtol=1e-6)


def test_exception_leaves_none_gradients_none(make):
    x, w = make((3,), seed=1), make((3,), seed=2)
    loss = (w * 5.0).sum() + _failing_after(x, []).sum()
    with pytest.raises(RuntimeError):
        loss.backward()
    assert x.grad is None and w.grad is None


def test_retained_intermediates_are_atomic_too(make):
    x = make((3,))
    h = (x * 3.0).retain_grad()
    loss = _failing_after(h, []).sum() + h.sum()
    with pytest.raises(RuntimeError):
        loss.backward()
    assert h.grad is None and x.grad is None


def test_grad_with_a_wrong_shape_is_refused_at_commit(make, backend):
    x = make((3,))
    x.grad = rt.ones((4,), backend=backend)
    with pytest.raises(GradientError, match="zero_grad"):
        (x * 2.0).sum().backward()
    assert x.grad.shape == (4,)
