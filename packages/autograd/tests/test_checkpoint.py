"""Activation checkpointing: same gradients as the plain graph, parameters included."""

import gc
import weakref

import numpy as np
import pytest

import riftco.autograd as ag
from riftco.autograd import GradientError, StaleGraphError, checkpoint, no_grad


def _block(w1, w2):
    def block(h):
        return ag.gelu(h @ w1) @ w2 + h

    return block


def _grads(*variables):
    return [v.grad.numpy().copy() for v in variables]


def test_checkpoint_gradients_equal_the_plain_ones(make):
    x, w1, w2 = make((3, 4), seed=1), make((4, 6), seed=2), make((6, 4), seed=3)
    block = _block(w1, w2)
    block(block(x)).log_softmax().sum().backward()
    plain = _grads(x, w1, w2)
    for v in (x, w1, w2):
        v.zero_grad()
    checkpoint(block, checkpoint(block, x)).log_softmax().sum().backward()
    for got, want in zip(_grads(x, w1, w2), plain):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_checkpoint_keeps_no_internal_graph(make):
    x, w1, w2 = make((3, 4), seed=1), make((4, 6), seed=2), make((6, 4), seed=3)
    inner = []

    def block(h):
        hidden = ag.gelu(h @ w1)
        inner.append(weakref.ref(hidden))
        return hidden @ w2

    y = checkpoint(block, x)
    gc.collect()
    assert inner[0]() is None  # the block's intermediate is gone
    assert y._node.op == "checkpoint"
    assert len(y._node.inputs) == 3  # x, then the parameters the block used
    y.sum().backward()
    assert len(inner) == 2  # replayed once, during backward
    assert x.grad is not None and w1.grad is not None and w2.grad is not None


def test_checkpoint_matches_gradcheck(make):
    x, w = make((2, 3), seed=1), make((3, 3), seed=2)
    assert ag.gradcheck(lambda x, w: checkpoint(lambda h: (h @ w).tanh() * h, x), [x, w])


def test_several_outputs_and_constant_inputs(make):
    x, w = make((2, 3), seed=1), make((3,), seed=2)
    scale = make((3,), seed=3, requires_grad=False)

    def fn(h, s, factor):
        return (h * w * s).exp() * factor, (h + w).sum(axis=0)

    def loss(a, b):
        return a.sum() + (b * b).sum()

    loss(*fn(x, scale, 2.0)).backward()
    plain = _grads(x, w)
    x.zero_grad()
    w.zero_grad()
    a, b = checkpoint(fn, x, scale, 2.0)
    assert a._node is b._node
    loss(a, b).backward()
    for got, want in zip(_grads(x, w), plain):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_only_some_outputs_used(make):
    x = make((3,))
    _, second = checkpoint(lambda h: (h * 2.0, h.exp()), x)
    second.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(x.numpy()), rtol=1e-6)


def test_nested_checkpoints(make):
    x, w = make((2, 2), seed=1), make((2, 2), seed=2)

    def inner(h):
        return (h @ w).tanh()

    def outer(h):
        return checkpoint(inner, h) * h

    outer(x).sum().backward()
    plain = _grads(x, w)
    x.zero_grad()
    w.zero_grad()
    checkpoint(outer, x).sum().backward()
    for got, want in zip(_grads(x, w), plain):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_function_reading_an_outer_intermediate(make):
    x, w = make((3,), seed=1), make((3,), seed=2)
    (x * w.exp()).sum().backward()
    plain = _grads(x, w)
    x.zero_grad()
    w.zero_grad()
    shared = w.exp()  # made outside, read inside through the closure
    checkpoint(lambda h: h * shared, x).sum().backward()
    for got, want in zip(_grads(x, w), plain):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_parameter_updated_before_backward_is_rejected(make, backend):
    import riftco.tensor as rt

    x, w = make((2, 3), seed=1), make((3, 3), seed=2, name="w")
    y = checkpoint(lambda h: h @ w, x)
    w.value.assign_(rt.zeros((3, 3), backend=backend))
    with pytest.raises(StaleGraphError, match="'w'"):
        y.sum().backward()
    assert x.grad is None and w.grad is None


def test_non_deterministic_function_is_detected(make):
    x, a, b = make((2,), seed=1), make((2,), seed=2), make((2,), seed=3)
    calls = []

    def fn(h):
        calls.append(1)
        return h * (a if len(calls) == 1 else b)

    y = checkpoint(fn, x)
    with pytest.raises(GradientError, match="deterministic"):
        y.sum().backward()
    assert x.grad is None and a.grad is None and b.grad is None


def test_under_no_grad_checkpoint_is_a_plain_call(make):
    x = make((2,))
    with no_grad():
        y = checkpoint(lambda h: h * 2.0, x)
    assert not y.requires_grad


def test_outputs_must_be_variables(make):
    x = make((2,))
    with pytest.raises(TypeError, match="Variables"):
        checkpoint(lambda h: h.value, x)


def test_constant_inputs_only_give_constants(make):
    x = make((2,), requires_grad=False)
    y = checkpoint(lambda h: h * 2.0, x)
    assert not y.requires_grad
