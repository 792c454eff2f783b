"""Finite-difference checks of every lowered module's gradients, for its inputs and
(trainable) coefficients; frozen coefficients get none and stay out of the optimizer."""

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.autograd import Variable, gradcheck
from riftco.cajal import compile_program
from riftco.cajal.examples import example
from riftco.cajal.lowering import lower
from riftco.cajal.multilinear import MultilinearMap
from riftco.optim import Adam

SHAPES = {"linear": (3, 4), "linear_attention": (3, 4, 2), "dense": (2, 3, 2, 2)}


def _random_map(shape, seed=0):
    values = np.random.default_rng(seed).normal(size=shape).astype(np.float32)
    return MultilinearMap(shape, tuple(float(x) for x in values.reshape(-1)))


@pytest.mark.parametrize("strategy", sorted(SHAPES))
def test_input_and_coefficient_gradients_match_finite_differences(strategy):
    shape = SHAPES[strategy]
    module = lower(_random_map(shape), strategy, trainable=True)
    rng = np.random.default_rng(1)
    inputs = [
        Variable(rt.from_numpy(rng.normal(size=(2, 3, d)).astype(np.float32)), requires_grad=True)
        for d in shape[1:]
    ]
    coefficients = module.coefficients

    # gradcheck perturbs copies of its inputs: route the coefficients through an argument
    def through(*args):
        saved = module._parameters["coefficients"]
        module._parameters["coefficients"] = args[-1]
        object.__setattr__(module, "coefficients", args[-1])
        try:
            return module(*args[:-1])
        finally:
            module._parameters["coefficients"] = saved
            object.__setattr__(module, "coefficients", saved)

    result = gradcheck(through, [*inputs, coefficients])
    assert result, result


@pytest.mark.parametrize("name", ["not", "lookup", "store-then-read"])
def test_frozen_programs_pass_gradients_to_inputs_only(name):
    program = compile_program(example(name).expression, example(name).context)
    module = lower(program)
    rng = np.random.default_rng(2)
    inputs = [
        Variable(rt.from_numpy(rng.normal(size=(4, d)).astype(np.float32)), requires_grad=True)
        for d in program.map.input_dimensions
    ]
    assert gradcheck(lambda *xs: module(*xs), inputs)
    module(*inputs).sum().backward()
    assert all(x.grad is not None for x in inputs)
    assert module.parameters() == []


def test_frozen_coefficients_stay_put_under_an_optimizer():
    program = compile_program(example("lookup").expression, example("lookup").context)
    module = lower(program)
    before = module.coefficient_tensor().numpy().copy()
    x = Variable(rt.from_numpy(np.ones((2, 4), np.float32)), requires_grad=True)
    y = rt.from_numpy(np.ones((2, 2), np.float32))
    optimizer = Adam([*module.parameters(), x], lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        module(x, y).sum().backward()
        optimizer.step()
    np.testing.assert_array_equal(module.coefficient_tensor().numpy(), before)
    assert not np.array_equal(x.numpy(), np.ones((2, 4), np.float32))


def test_trainable_coefficients_learn():
    program = compile_program(example("not").expression, example("not").context)
    module = lower(program, init="normal", seed=0, trainable=True)
    optimizer = Adam(module.parameters(), lr=0.05, max_grad_norm=None)
    x = rt.from_numpy(np.eye(2, dtype=np.float32))
    target = np.array([program.map(row) for row in np.eye(2)], np.float32)
    for _ in range(200):
        optimizer.zero_grad()
        diff = module(x) - rt.from_numpy(target)
        (diff * diff).sum().backward()
        optimizer.step()
    assert module.to_map().allclose(program.map, tolerance=1e-2)
