"""Variables, operators, grad mode, detach, retained gradients."""

import threading

import numpy as np
import pytest

import riftco.autograd as ag
import riftco.tensor as rt
from riftco.autograd import Parameter, Variable, no_grad


def test_hand_computed_chain(backend):
    x = Variable(rt.tensor(2.0, backend=backend), requires_grad=True, name="x")
    y = Variable(rt.tensor(3.0, backend=backend), requires_grad=True, name="y")
    z = x * y + x
    assert z.item() == 8.0
    z.backward()
    assert x.grad.item() == 4.0  # dz/dx = y + 1
    assert y.grad.item() == 2.0  # dz/dy = x
    assert x.grad.backend.name == backend.name


def test_facts(make):
    x = make((2, 3), name="x")
    assert x.shape == (2, 3) and x.ndim == 2 and x.size == 6 and len(x) == 2
    assert x.dtype is rt.float32 and x.backend is x.value.backend and x.device == x.backend.name
    assert x.is_leaf and x.requires_grad and x.grad is None and x.name == "x"
    assert "requires_grad=True" in repr(x) and "'x'" in repr(x)
    y = x * 2.0
    assert not y.is_leaf and y.requires_grad and "op=mul" in repr(y)
    np.testing.assert_array_equal(y.numpy(), x.numpy() * 2)
    assert y.tolist() == (x.numpy() * 2).tolist()


def test_parameter_requires_grad_by_default(make):
    p = Parameter(make((3,)).value, name="w")
    assert isinstance(p, Variable) and p.requires_grad and p.name == "w"
    assert not Parameter(p.value, requires_grad=False).requires_grad


def test_binding_a_parameters_value_moves_the_rebind_epoch(make):
    p = Parameter(make((2,)).value)
    other = make((2,), seed=1)  # a Variable that is not a parameter
    before = ag.rebind_epoch()
    p.value.assign_(other.value)
    other.value = make((2,), seed=2).value
    assert ag.rebind_epoch() == before  # in place and non-parameters do not count
    new = make((2,), seed=3).value
    p.value = new
    assert ag.rebind_epoch() == before + 1 and p.value is new
    Parameter(new)
    assert ag.rebind_epoch() == before + 2


def test_only_float_values_require_gradients(const):
    with pytest.raises(rt.DTypeError):
        Variable(const([1, 2]), requires_grad=True)
    ids = Variable(const([1, 2]))
    with pytest.raises(rt.DTypeError):
        ids.requires_grad_()
    with pytest.raises(TypeError):
        Variable(np.zeros(3))


def test_operators_match_tensor_ops(make):
    a, b = make((3, 4), seed=1), make((4,), seed=2, domain="positive")
    at, bt = a.value, b.value
    pairs = [
        (a + b, at + bt),
        (a - b, at - bt),
        (a * b, at * bt),
        (a / b, at / bt),
        (b**a, bt**at),
        (-a, -at),
        (abs(a), abs(at)),
        (2.0 - a, 2.0 - at),
        (3.0 * a, 3.0 * at),
        (1.0 / b, 1.0 / bt),
        (2.0**a, 2.0**at),
        (a @ b, at @ bt),
        (a.T, at.T),
        (a[1:, 2], at[1:, 2]),
        (np.float32(2.0) * a, at * 2.0),
        (a + np.float32(1.0), at + 1.0),
    ]
    for got, want in pairs:
        assert isinstance(got, Variable)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_comparisons_and_argmax_have_no_gradient(make):
    a, b = make((3, 4), seed=1), make((3, 4), seed=2)
    for got, want in [
        (a > b, a.value > b.value),
        (a <= 0.0, a.value <= 0.0),
        (a == a, a.value == a.value),
        (a != b, a.value != b.value),
    ]:
        assert isinstance(got, Variable) and not got.requires_grad
        assert got.dtype is rt.bool_
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert not (~(a > b)).requires_grad and not ((a > b) & (a < b)).requires_grad
    assert a.argmax(axis=1).dtype is rt.int64 and not a.argmax().requires_grad
    y = ag.where(a > 0.0, a, b)  # a bool Variable works as a condition
    y.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), (a.numpy() > 0).astype(np.float32))


def test_variables_hash_by_identity(make):
    a = make((2,))
    assert {a: 1}[a] == 1 and len({a, a}) == 1


def test_tensor_and_variable_operands_mix(make):
    a = make((2, 3))
    c = a.value
    y = ag.add(c, a) * c  # Tensors are constants
    y.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), c.numpy(), rtol=1e-6)
    assert not ag.exp(c).requires_grad  # Tensor-only operations give constants


def test_no_grad_records_nothing(make):
    x = make((2,))
    with no_grad():
        assert not ag.is_grad_enabled()
        y = x * 2.0
        with ag.enable_grad():
            assert ag.is_grad_enabled()
            z = x * 2.0
    assert ag.is_grad_enabled()
    assert not y.requires_grad and y.is_leaf
    assert z.requires_grad

    @no_grad()
    def f(v):
        return v + 1.0

    assert not f(x).requires_grad
    with ag.set_grad_enabled(False):
        assert not (x + 1.0).requires_grad


def test_grad_mode_is_per_thread(make):
    x = make((2,))
    seen = []
    with no_grad():
        worker = threading.Thread(target=lambda: seen.append((x * 2.0).requires_grad))
        worker.start()
        worker.join()
        assert not (x * 2.0).requires_grad
    assert seen == [True]


def test_detach_cuts_the_graph(make):
    x = make((3,))
    y = x * 2.0
    d = y.detach()
    assert not d.requires_grad and d.is_leaf and d.value is y.value
    (d * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), d.numpy())


def test_intermediate_gradients_on_request(make):
    x = make((3,))
    y = x * 3.0
    z = y.exp()
    w = (z * 2.0).sum()
    y.retain_grad()
    w.retain_grad()
    w.backward()
    assert z.grad is None  # not retained
    np.testing.assert_allclose(y.grad.numpy(), 2.0 * z.numpy(), rtol=1e-6)
    assert w.grad.item() == 1.0
    np.testing.assert_allclose(x.grad.numpy(), 6.0 * z.numpy(), rtol=1e-6)


def test_zero_grad(make):
    x = make((2,))
    (x * 2.0).sum().backward()
    assert x.grad is not None
    x.zero_grad()
    assert x.grad is None


def test_constants_only_give_no_graph(make):
    x = make((2,), requires_grad=False)
    y = (x * 2.0).exp().sum()
    assert not y.requires_grad
    with pytest.raises(ag.GradientError, match="does not require gradients"):
        y.backward()


def test_to_another_backend_moves_gradients_back(make):
    from riftco.testing.tensor import REFERENCE_ENTRY_POINT, extra_entry_points

    with extra_entry_points(REFERENCE_ENTRY_POINT):
        x = make((2, 3))
        other = "reference" if x.backend.name != "reference" else "cpu"
        y = x.to(other)
        assert y.backend.name == other
        (y * y).sum().backward()
        assert x.grad.backend.name == x.backend.name
        np.testing.assert_allclose(x.grad.numpy(), 2.0 * x.numpy(), rtol=1e-6)
        assert x.to(x.backend) is x


def test_iteration_yields_rows(make):
    x = make((3, 2))
    rows = list(x)
    assert len(rows) == 3 and all(r.shape == (2,) for r in rows)
    (rows[0] * 2.0 + rows[2]).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2.0, 2.0], [0.0, 0.0], [1.0, 1.0]])
