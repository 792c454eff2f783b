"""Module.replace_child and Module.adopt: the public ways to swap a child in place and
to make one layer take over another's state (quantization and LoRA use nothing else)."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.nn as nn
import riftco.tensor as rt
from riftco.nn.module import structure_epoch


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(3, 4, seed=1)
        self.inner = nn.ModuleList([nn.Linear(4, 4, seed=2), nn.LayerNorm(4)])
        self.last = nn.Linear(4, 2, seed=3)
        self.register_buffer("steps", rt.zeros(1))


def _names(m):
    return [n for n, _ in m.named_parameters()]


def test_replace_child_keeps_the_place_in_the_order_and_returns_the_old_child():
    m = Stack()
    before = _names(m)
    old = m.first
    new = nn.Linear(3, 4, seed=9)
    assert m.replace_child("first", new) is old
    assert m.first is new and _names(m) == before
    assert next(c for _, c in m.named_children()) is new
    assert m.state_dict()["first.weight"] is new.weight.value


def test_replace_child_takes_a_dotted_name_and_bumps_the_structure_epoch():
    m = Stack()
    before, epoch = _names(m), structure_epoch()
    new = nn.Linear(4, 4, bias=False, seed=5)
    m.replace_child("inner.0", new)
    assert m.inner[0] is new and structure_epoch() > epoch
    assert _names(m) == [n for n in before if n != "inner.0.bias"]


def test_replace_child_refuses_unknown_names_and_non_modules():
    m = Stack()
    for name in ("missing", "inner.7", "nowhere.first", "steps", "first.weight"):
        with pytest.raises(KeyError, match="is not a child module"):
            m.replace_child(name, nn.Linear(3, 4))
    with pytest.raises(TypeError, match="expected a Module, found int"):
        m.replace_child("first", 3)  # type: ignore[arg-type]


class Scaled(nn.Linear):
    """A Linear whose output is doubled, built by adopting an existing Linear."""

    def __init__(self, base: nn.Linear) -> None:
        self.adopt(base)
        self.factor = 2.0

    def forward(self, x):
        return super().forward(x) * self.factor


def test_adopt_takes_over_parameters_buffers_children_and_settings():
    base = nn.Linear(3, 4, seed=1)
    base.register_buffer("mask", rt.ones(4))
    base.register_buffer("scratch", rt.zeros(2), persistent=False)
    base.helper = nn.LayerNorm(4)
    base.eval()
    wrapped = Scaled(base)
    assert _names(wrapped) == _names(base)
    assert all(a is b for a, b in zip(wrapped.parameters(), base.parameters()))
    assert [n for n, _ in wrapped.named_buffers()] == [n for n, _ in base.named_buffers()]
    assert set(wrapped.state_dict()) == set(base.state_dict())  # scratch stays transient
    assert wrapped.helper is base.helper and not wrapped.training
    assert (wrapped.in_features, wrapped.out_features) == (3, 4)
    x = rt.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(wrapped(x).numpy(), 2 * base(x).numpy())
    # ``base`` itself is unchanged
    assert [n for n, _ in base.named_children()] == ["helper"] and not hasattr(base, "factor")


def test_adopt_drops_what_was_registered_before():
    target = nn.Linear(5, 5, seed=4)
    target.adopt(nn.Linear(2, 3, bias=False, seed=1))
    assert _names(target) == ["weight"] and target.weight.shape == (3, 2)
    with pytest.raises(TypeError, match="expected a Module, found str"):
        target.adopt("layer")  # type: ignore[arg-type]


def test_an_adopting_wrapper_stands_in_the_place_of_what_it_wraps():
    m = Stack()
    before = _names(m)
    wrapped = Scaled(m.last)
    m.replace_child("last", wrapped)
    assert _names(m) == before and m.last is wrapped


def test_own_parameters_and_buffers_without_recursing():
    m = Stack()
    m.scale = nn.Parameter(rt.ones(2))
    assert [n for n, _ in m.named_parameters(recurse=False)] == ["scale"]
    assert [n for n, _ in m.named_buffers(recurse=False)] == ["steps"]
    assert [n for n, _ in m.first.named_parameters("first", recurse=False)] == [
        "first.weight",
        "first.bias",
    ]
