import itertools
import math

import pytest

from riftco.optim import ConstantSchedule, Schedule, WarmupCosineSchedule, schedule_from_state


def test_constant():
    s = ConstantSchedule(3e-4)
    assert s.lr_at(1) == s(10_000) == 3e-4
    assert isinstance(s, Schedule)


def test_warmup_then_cosine_decay():
    s = WarmupCosineSchedule(peak_lr=1e-3, warmup_steps=10, total_steps=110, min_lr=1e-4)
    assert s.lr_at(1) == pytest.approx(1e-4)
    assert s.lr_at(5) == pytest.approx(5e-4)
    assert s.lr_at(10) == pytest.approx(1e-3)
    assert s.lr_at(60) == pytest.approx(1e-4 + 0.5 * 9e-4)
    assert s.lr_at(110) == s.lr_at(500) == pytest.approx(1e-4)
    rates = [s.lr_at(t) for t in range(10, 111)]
    assert all(a >= b for a, b in itertools.pairwise(rates))
    quarter = 1e-4 + 0.5 * 9e-4 * (1 + math.cos(math.pi * 0.25))
    assert s.lr_at(35) == pytest.approx(quarter)


def test_no_warmup():
    s = WarmupCosineSchedule(peak_lr=1.0, warmup_steps=0, total_steps=4)
    assert [round(s(t), 6) for t in (1, 2, 3, 4)] == [0.853553, 0.5, 0.146447, 0.0]


def test_state_round_trip():
    for s in (ConstantSchedule(0.1), WarmupCosineSchedule(1e-3, 5, 50, 1e-5)):
        assert schedule_from_state(s.state_dict()) == s


@pytest.mark.parametrize(
    "make",
    [
        lambda: ConstantSchedule(-1.0),
        lambda: WarmupCosineSchedule(1e-3, 20, 10),
        lambda: WarmupCosineSchedule(1e-3, -1, 10),
        lambda: WarmupCosineSchedule(1e-3, 0, 0),
        lambda: WarmupCosineSchedule(1e-3, 0, 10, min_lr=1e-2),
        lambda: ConstantSchedule(1.0).lr_at(0),
        lambda: schedule_from_state({"kind": "step"}),
    ],
)
def test_bad_schedules_are_refused(make):
    with pytest.raises(ValueError):
        make()
