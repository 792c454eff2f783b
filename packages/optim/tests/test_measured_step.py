"""``measured_step``: ``measure`` and ``step`` in one call (one device read where the
backend has ``clipped_adam_update``), with ``step()``'s stats, bits and errors, and
nothing updated when a measured value is not finite."""

from __future__ import annotations

import math

import numpy as np
import pytest
from optim_helpers import grads_for, make_params, same_bits, set_grads, state_bits, values

import riftco.tensor as rt
from riftco.optim import AdamW, NonFiniteUpdate
from riftco.testing.tensor import NumpyReferenceBackend

SHAPES = [(4, 3), (10,), (0,), (2, 2, 2)]


class TwoCalls(NumpyReferenceBackend):
    """A backend without the clipped step (an older API): measure, then step."""

    clipped_adam_update = rt.Backend.clipped_adam_update


def run(backend, fused: bool, steps=3, scale=1.0, **kw):
    params = make_params(SHAPES, backend=backend)
    opt = AdamW(params, lr=1e-2, weight_decay=0.1, **kw)
    stats = []
    for step in range(1, steps + 1):
        set_grads(params, grads_for(SHAPES, step, scale))
        loss = rt.tensor(np.array(1.5 * step, np.float32), backend=backend)
        if fused:
            got, read = opt.measured_step([loss])
        else:
            norm, read = opt.measure([loss])
            got = opt.step(gradient_norm=norm)
        assert read == [1.5 * step]
        stats.append(got)
    return stats, values(params), state_bits(opt)


@pytest.mark.parametrize("backend_name", ["cpu", "reference", "two calls"])
@pytest.mark.parametrize(("scale", "max_grad_norm"), [(1.0, 1.0), (1e-3, 1.0), (1.0, None)])
def test_equals_measure_then_step(backend_name, scale, max_grad_norm):
    backend = {
        "cpu": rt.get_backend("cpu"),
        "reference": NumpyReferenceBackend(),
        "two calls": TwoCalls(),
    }[backend_name]
    assert ("clipped_adam_update" in backend.capabilities()) == (backend_name != "two calls")
    fused = run(backend, True, scale=scale, max_grad_norm=max_grad_norm)
    plain = run(backend, False, scale=scale, max_grad_norm=max_grad_norm)
    assert fused[0] == plain[0]
    assert same_bits(fused[1], plain[1]) and fused[2] == plain[2]
    if max_grad_norm is not None and scale == 1.0:
        assert fused[0][0].clip_scale < 1.0


def test_a_non_finite_loss_updates_nothing():
    params = make_params(SHAPES)
    opt = AdamW(params, lr=1e-2)
    set_grads(params, grads_for(SHAPES, 1))
    before, state = values(params), state_bits(opt)
    stats, read = opt.measured_step([rt.tensor(np.array(np.inf, np.float32))])
    assert stats is None and read == [math.inf]
    assert same_bits(values(params), before) and state_bits(opt) == state
    assert opt.step_count == 0


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_gradient_raises_as_step_does(bad):
    params = make_params(SHAPES)
    opt = AdamW(params, lr=1e-2)
    set_grads(params, grads_for(SHAPES, 1))
    opt.measured_step()
    before, state = values(params), state_bits(opt)
    arrays = grads_for(SHAPES, 2)
    arrays[1][3] = bad
    set_grads(params, arrays)
    with pytest.raises(NonFiniteUpdate, match="the gradient norm is") as info:
        opt.measured_step()
    assert info.value.parameter is None
    assert same_bits(values(params), before) and state_bits(opt) == state
    assert opt.step_count == 1


def test_a_non_finite_update_names_the_parameter():
    params = make_params(SHAPES)
    opt = AdamW(params, lr=1e38, max_grad_norm=None)
    set_grads(params, grads_for(SHAPES, 1))
    before = values(params)
    with pytest.raises(NonFiniteUpdate, match="the update of") as info:
        opt.measured_step()
    assert info.value.parameter == 0
    assert same_bits(values(params), before) and opt.step_count == 0


def test_an_overflowing_sum_is_rescaled_as_step_does():
    arrays = grads_for(SHAPES, 1)
    arrays[0][1, 1] = 1e30  # a float32 sum of squares of inf, a finite norm
    results = []
    for fused in (True, False):
        params = make_params(SHAPES)
        opt = AdamW(params, lr=1e-2)
        set_grads(params, arrays)
        if fused:
            stats, _ = opt.measured_step()
        else:
            stats = opt.step(gradient_norm=opt.measure()[0])
        results.append((stats, values(params)))
    assert results[0][0] == results[1][0] and same_bits(results[0][1], results[1][1])
    assert 1e29 < results[0][0].gradient_norm < 1e31


def test_no_gradients_counts_the_step():
    params = make_params(SHAPES)
    opt = AdamW(params, lr=1e-2)
    stats, read = opt.measured_step([rt.tensor(np.array(2.0, np.float32))])
    assert stats.step == 1 and stats.gradient_norm == 0.0 and read == [2.0]


def test_values_must_be_one_element_tensors():
    opt = AdamW(make_params(SHAPES), lr=1e-2)
    with pytest.raises(rt.ShapeError, match="one-element"):
        opt.measured_step([rt.zeros([2])])
