"""state_dict / load_state_dict: an exact resume, and refusal of state that does not fit."""

import copy

import numpy as np
import pytest
from optim_helpers import grads_for, make_params, same_bits, set_grads, values

import riftco.tensor as rt
from riftco.autograd import Parameter
from riftco.optim import Adam, AdamW, OptimizerStateError

SHAPES = [(6, 4), (5,), (3, 3)]


def build(params, paged=False):
    groups = [{"params": params[:1], "weight_decay": 0.1}, {"params": params[1:], "lr": 3e-3}]
    return AdamW(groups, lr=1e-2, weight_decay=0.0, max_grad_norm=0.5, paged=paged, page_size=5)


@pytest.mark.parametrize("paged_after", [False, True])
def test_a_round_trip_continues_bit_identically(paged_after):
    params = make_params(SHAPES)
    opt = build(params)
    for step in (1, 2, 3):
        set_grads(params, grads_for(SHAPES, step, scale=2.0))
        opt.step()
    saved = opt.state_dict()
    saved_values = values(params)
    reference = copy.deepcopy(saved)

    stats = []
    for step in (4, 5, 6):
        set_grads(params, grads_for(SHAPES, step, scale=2.0))
        stats.append(opt.step())
    # the saved dict holds copies: later steps did not change it
    for a, b in zip(saved["state"].values(), reference["state"].values()):
        assert a["exp_avg"].tobytes() == b["exp_avg"].tobytes()

    resumed = [Parameter(rt.from_numpy(v), name=p.name) for v, p in zip(saved_values, params)]
    fresh = build(resumed, paged=paged_after)
    fresh.set_lr(123.0)  # overwritten by the state's hyperparameters
    fresh.load_state_dict(saved)
    assert fresh.param_groups[1]["lr"] == 3e-3 and fresh.step_count == 3
    resumed_stats = []
    for step in (4, 5, 6):
        set_grads(resumed, grads_for(SHAPES, step, scale=2.0))
        resumed_stats.append(fresh.step())
    assert resumed_stats == stats
    assert same_bits(values(resumed), values(params))


def test_state_dict_contents():
    params = make_params(SHAPES)
    opt = build(params)
    set_grads(params, [grads_for(SHAPES, 1)[0], None, None])
    opt.step()
    sd = opt.state_dict()
    assert sd["version"] == 1 and sd["kind"] == "adamw" and sd["step"] == 1
    assert sd["max_grad_norm"] == 0.5
    assert [g["params"] for g in sd["param_groups"]] == [[0], [1, 2]]
    assert sd["param_groups"][0] == {
        "lr": 1e-2,
        "betas": [0.9, 0.999],
        "eps": 1e-8,
        "weight_decay": 0.1,
        "params": [0],
    }
    assert list(sd["state"]) == [0] and sd["state"][0]["step"] == 1
    assert sd["state"][0]["exp_avg"].dtype == np.float32
    assert sd["state"][0]["exp_avg"].shape == (6, 4)


def corrupt(sd, path, value):
    sd = copy.deepcopy(sd)
    target = sd
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return sd


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        (("version",), 2, "version"),
        (("kind",), "adam", "'adam' optimizer"),
        (("step",), -1, "step"),
        (("max_grad_norm",), -1.0, "max_grad_norm"),
        (("param_groups",), [], "groups"),
        (("param_groups", 1, "params"), [1], "positions"),
        (("param_groups", 0, "betas"), [0.9, 1.5], "beta2"),
        (("state", 0, "exp_avg"), np.zeros((4, 6), np.float32), "expected float32"),
        (("state", 0, "exp_avg"), np.zeros((6, 4), np.float64), "expected float32"),
        (("state", 0, "exp_avg_sq"), np.full((6, 4), np.nan, np.float32), "not finite"),
        (("state", 0, "exp_avg_sq"), np.full((6, 4), -1.0, np.float32), "negative"),
        (("state", 0, "step"), 0, "step"),
        (("state", 7), {"step": 1}, "does not exist"),
    ],
)
def test_state_that_does_not_fit_is_refused_and_changes_nothing(path, value, match):
    params = make_params(SHAPES)
    opt = build(params)
    set_grads(params, grads_for(SHAPES, 1))
    opt.step()
    good = opt.state_dict()
    with pytest.raises(OptimizerStateError, match=match):
        opt.load_state_dict(corrupt(good, path, value))
    after = opt.state_dict()
    assert after["step"] == good["step"] and after["param_groups"] == good["param_groups"]
    for i, s in good["state"].items():
        assert s["exp_avg"].tobytes() == after["state"][i]["exp_avg"].tobytes()


def test_adam_refuses_adamw_state():
    params = make_params(SHAPES)
    with pytest.raises(OptimizerStateError, match="'adamw' optimizer"):
        Adam(params).load_state_dict(AdamW(params).state_dict())
    with pytest.raises(OptimizerStateError, match="not an optimizer state"):
        Adam(params).load_state_dict({"step": 1})
