"""Every setting an optimizer or a schedule refuses raises a typed riftco error.

``OptimizerConfigError`` is a ``RiftcoError`` and a ``ValueError``; ``ParameterError``
a ``RiftcoError`` and a ``TypeError``, so callers that caught the builtins still do.
"""

import math

import pytest

import riftco.tensor as rt
from riftco.autograd import Parameter
from riftco.optim import (
    Adam,
    AdamW,
    ConstantSchedule,
    OptimizerConfigError,
    ParameterError,
    WarmupCosineSchedule,
    norm_and_values,
    schedule_from_state,
)
from riftco.tensor import RiftcoError

NOT_RATES = [math.nan, math.inf, -math.inf, -1.0, "0.1", None, True, [0.1]]


def _param():
    return Parameter(rt.ones(3), name="w")


def test_the_error_classes_are_typed_and_keep_the_builtin_bases():
    assert issubclass(OptimizerConfigError, RiftcoError)
    assert issubclass(OptimizerConfigError, ValueError)
    assert issubclass(ParameterError, RiftcoError)
    assert issubclass(ParameterError, TypeError)


@pytest.mark.parametrize("optimizer", [Adam, AdamW])
@pytest.mark.parametrize("lr", NOT_RATES)
def test_set_lr_refuses_what_is_not_a_finite_non_negative_rate(optimizer, lr):
    opt = optimizer([_param()], lr=1e-3)
    with pytest.raises(OptimizerConfigError, match="set_lr: lr must be a finite"):
        opt.set_lr(lr)
    assert [g["lr"] for g in opt.param_groups] == [1e-3]  # nothing changed
    opt.set_lr(0.0)
    assert opt.param_groups[0]["lr"] == 0.0


@pytest.mark.parametrize(
    "settings, match",
    [
        ({"lr": math.nan}, "lr must be a finite"),
        ({"lr": -1.0}, "lr must be a finite"),
        ({"betas": (0.9,)}, "betas must be a pair"),
        ({"betas": "ab"}, "betas must be a pair"),
        ({"betas": (math.nan, 0.999)}, "beta1 must lie in"),
        ({"betas": (0.9, 1.0)}, "beta2 must lie in"),
        ({"eps": math.inf}, "eps must be a finite"),
        ({"eps": -1e-8}, "eps must be a finite"),
        ({"weight_decay": math.nan}, "weight_decay must be a finite"),
        ({"weight_decay": "0.1"}, "weight_decay must be a finite"),
        ({"max_grad_norm": math.nan}, "max_grad_norm must be a positive number"),
        ({"max_grad_norm": 0.0}, "max_grad_norm must be a positive number"),
        ({"page_size": 0}, "page_size must be a positive int"),
        ({"page_size": 2.5}, "page_size must be a positive int"),
    ],
)
@pytest.mark.parametrize("optimizer", [Adam, AdamW])
def test_constructor_settings_are_checked(optimizer, settings, match):
    with pytest.raises(OptimizerConfigError, match=match):
        optimizer([_param()], **settings)


def test_group_settings_and_structure_are_checked():
    p = _param()
    with pytest.raises(OptimizerConfigError, match="group 0: lr must be a finite"):
        AdamW([{"params": [p], "lr": math.nan}])
    with pytest.raises(OptimizerConfigError, match="group 0 needs 'params'"):
        AdamW([{"params": [p], "momentum": 0.9}])
    with pytest.raises(OptimizerConfigError, match="appears twice"):
        AdamW([p, p])
    with pytest.raises(ParameterError, match="found a mix"):
        AdamW([p, {"params": [_param()]}])
    with pytest.raises(ParameterError, match="riftco.autograd.Parameter"):
        AdamW([object()])
    with pytest.raises(rt.DTypeError, match="float32"):
        AdamW([type("IntParameter", (), {"value": rt.arange(3), "grad": None})()])


def test_max_grad_norm_setter_keeps_the_old_value_on_refusal():
    opt = AdamW([_param()], max_grad_norm=1.0)
    for bad in (math.nan, -1.0, "1"):
        with pytest.raises(OptimizerConfigError):
            opt.max_grad_norm = bad
    assert opt.max_grad_norm == 1.0
    opt.max_grad_norm = None
    assert opt.max_grad_norm is None


def test_step_refuses_a_gradient_that_is_not_a_tensor_and_a_norm_that_is_not_a_number():
    p = _param()
    opt = AdamW([p])
    p.grad = [1.0, 2.0, 3.0]
    with pytest.raises(ParameterError, match="grad of type list"):
        opt.step()
    p.grad = rt.ones(3)
    with pytest.raises(OptimizerConfigError, match="gradient_norm must be a number"):
        opt.step(gradient_norm="0.5")
    assert opt.step_count == 0
    assert opt.step(gradient_norm=opt.measure()[0]).step == 1


def test_norm_and_values_refuses_a_value_of_more_than_one_element():
    with pytest.raises(rt.ShapeError, match="one element"):
        norm_and_values([rt.ones(2)], [rt.ones(2)])


@pytest.mark.parametrize("lr", NOT_RATES)
def test_constant_schedule_refuses_a_bad_rate(lr):
    with pytest.raises(OptimizerConfigError, match="lr must be a finite non-negative"):
        ConstantSchedule(lr)


@pytest.mark.parametrize(
    "settings, match",
    [
        ({"peak_lr": math.nan}, "peak_lr must be a finite"),
        ({"min_lr": math.inf}, "min_lr must be a finite"),
        ({"warmup_steps": -1}, "warmup_steps must be a non-negative int"),
        ({"total_steps": 2.0}, "total_steps must be a non-negative int"),
        ({"total_steps": True}, "total_steps must be a non-negative int"),
        ({"warmup_steps": 20, "total_steps": 10}, "warmup_steps <= total_steps"),
        ({"total_steps": 0, "warmup_steps": 0}, "total_steps >= 1"),
        ({"min_lr": 1.0}, "exceeds peak_lr"),
    ],
)
def test_warmup_cosine_settings_are_checked(settings, match):
    values = {"peak_lr": 0.1, "warmup_steps": 2, "total_steps": 10, **settings}
    with pytest.raises(OptimizerConfigError, match=match):
        WarmupCosineSchedule(**values)


@pytest.mark.parametrize("step", [0, -1, 1.0, "1", True, None])
def test_schedule_steps_are_checked(step):
    for schedule in (ConstantSchedule(0.1), WarmupCosineSchedule(0.1, 2, 10)):
        with pytest.raises(OptimizerConfigError, match="steps count from 1"):
            schedule.lr_at(step)


@pytest.mark.parametrize(
    "state, match",
    [
        ([("kind", "constant")], "expected a dict with 'kind'"),
        ("constant", "expected a dict with 'kind'"),
        ({}, "unknown kind None"),
        ({"kind": ["constant"]}, "unknown kind"),
        ({"kind": "linear", "lr": 0.1}, "unknown kind 'linear'"),
        ({"kind": "constant"}, r"missing \['lr'\]"),
        ({"kind": "constant", "lr": 0.1, "decay": 2}, r"unknown \['decay'\]"),
        ({"kind": "warmup_cosine", "peak_lr": 0.1}, r"missing \['total_steps', 'warmup_steps'\]"),
        ({"kind": "constant", "lr": math.nan}, "lr must be a finite"),
        (
            {"kind": "warmup_cosine", "peak_lr": 0.1, "warmup_steps": "x", "total_steps": 5},
            "warmup_steps must be a non-negative int",
        ),
    ],
)
def test_schedule_from_state_refuses_what_describes_no_schedule(state, match):
    with pytest.raises(OptimizerConfigError, match=match):
        schedule_from_state(state)


def test_schedule_state_round_trips():
    for schedule in (ConstantSchedule(0.25), WarmupCosineSchedule(0.1, 2, 10, min_lr=0.01)):
        assert schedule_from_state(schedule.state_dict()) == schedule
