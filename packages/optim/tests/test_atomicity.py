"""A step that would produce a non-finite value changes nothing at all."""

import numpy as np
import pytest
from optim_helpers import grads_for, make_params, same_bits, set_grads, state_bits, values

import riftco.tensor as rt
from riftco.optim import Adam, AdamW, NonFiniteUpdate

SHAPES = [(3, 5), (40,), (2, 2)]


def trained(backend=None, paged=False, max_grad_norm=1.0):
    params = make_params(SHAPES, backend=backend)
    opt = AdamW(
        params, lr=1e-2, weight_decay=0.1, paged=paged, page_size=4, max_grad_norm=max_grad_norm
    )
    for step in (1, 2):
        set_grads(params, grads_for(SHAPES, step))
        opt.step()
    return params, opt


def assert_unchanged(params, opt, before):
    old_values, old_state, old_versions = before
    assert same_bits(values(params), old_values)
    assert state_bits(opt) == old_state
    assert [p.value.version for p in params] == old_versions
    assert opt.step_count == 2


def snapshot(params, opt):
    return values(params), state_bits(opt), [p.value.version for p in params]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_gradient_changes_nothing(backend, bad):
    params, opt = trained(backend)
    before = snapshot(params, opt)
    grads = grads_for(SHAPES, 3)
    grads[1][17] = bad
    set_grads(params, grads)
    with pytest.raises(NonFiniteUpdate, match="gradient norm"):
        opt.step()
    assert_unchanged(params, opt, before)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("paged", [False, True])
def test_a_non_finite_update_on_a_late_page_changes_nothing(backend, paged):
    # Finite gradients whose squares overflow float32: the norm is finite (it is
    # computed overflow-safely) but, unclipped, the second moment is not.
    params, opt = trained(backend, paged=paged, max_grad_norm=None)
    before = snapshot(params, opt)
    grads = grads_for(SHAPES, 3)
    grads[1][39] = 3e38  # the last element of the last page of parameter 1
    set_grads(params, grads)
    with pytest.raises(NonFiniteUpdate, match="parameter 1 'p1'") as info:
        opt.step()
    assert info.value.parameter == 1
    assert isinstance(info.value, rt.KernelError)
    assert_unchanged(params, opt, before)


def test_a_failed_step_leaves_no_trace_on_later_steps():
    params_a, opt_a = trained(paged=True, max_grad_norm=None)
    params_b, opt_b = trained(paged=True, max_grad_norm=None)
    bad = grads_for(SHAPES, 3)
    bad[0][2, 4] = 1e38
    set_grads(params_a, bad)
    with pytest.raises(NonFiniteUpdate):
        opt_a.step()
    for step in (3, 4):
        set_grads(params_a, grads_for(SHAPES, step))
        set_grads(params_b, grads_for(SHAPES, step))
        assert opt_a.step() == opt_b.step()
    assert same_bits(values(params_a), values(params_b))
    assert state_bits(opt_a) == state_bits(opt_b)


def test_a_failed_first_step_creates_no_state():
    params = make_params(SHAPES)
    opt = Adam(params, max_grad_norm=None)
    grads = grads_for(SHAPES, 1)
    grads[2][1, 1] = 1e38
    set_grads(params, grads)
    with pytest.raises(NonFiniteUpdate):
        opt.step()
    assert opt.state_dict()["state"] == {} and opt.step_count == 0
