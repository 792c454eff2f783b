"""Tensor and Variable offer the same op methods and operators, read from one table
(riftco.tensor.tensor's METHOD_OPS and OPERATOR_OPS): each method of either class is
the op of its name (riftco.tensor.ops, riftco.autograd.functional), with the same
parameters, and neither class has an op method the table does not list."""

from __future__ import annotations

import inspect
from types import FunctionType

import pytest

import riftco.autograd.functional as F
import riftco.tensor.ops as ops
from riftco.autograd import Variable
from riftco.tensor import Tensor
from riftco.tensor.tensor import METHOD_OPS, OPERATOR_OPS

#: Methods that call ops but are not mirrored by name: Tensor's in-place assignment and
#: its copy (``contiguous_copy``); Variable's ``copy`` and its differentiable ``to``
#: (Tensor's ``to`` is a transfer, not an op).
TENSOR_ONLY = {"assign_", "contiguous_copy"}
VARIABLE_ONLY = {"copy", "to"}


def _function(cls: type, name: str) -> FunctionType:
    member = vars(cls)[name]
    return member.fget if isinstance(member, property) else member


def _calls(cls: type, name: str) -> set[str]:
    """The global and attribute names the method's code uses."""
    return set(_function(cls, name).__code__.co_names)


def _op_methods(cls: type, module_name: str) -> set[str]:
    return {
        name
        for name, member in vars(cls).items()
        if isinstance(member, FunctionType) and module_name in member.__code__.co_names
    }


def _parameters(function: object) -> list[tuple[inspect._ParameterKind, object]]:
    """Each parameter's kind and default (names differ: ``other`` and ``b``)."""
    params = list(inspect.signature(function).parameters.values())[1:]  # self
    return [(p.kind, p.default) for p in params]


def test_the_table_lists_distinct_ops_that_both_layers_define():
    assert len(set(METHOD_OPS)) == len(METHOD_OPS) == 50
    for name in {*METHOD_OPS, *OPERATOR_OPS.values()}:
        assert callable(getattr(ops, name)), name
        assert name in F.__all__ and callable(getattr(F, name)), name


@pytest.mark.parametrize("name", METHOD_OPS)
def test_each_method_is_its_op_on_both_classes(name):
    assert {"ops", name} <= _calls(Tensor, name)
    assert {"F", name} <= _calls(Variable, name)
    assert _parameters(vars(Tensor)[name]) == _parameters(vars(Variable)[name])


@pytest.mark.parametrize("operator", sorted(OPERATOR_OPS))
def test_each_operator_calls_its_op_on_both_classes(operator):
    op = OPERATOR_OPS[operator]
    assert {"ops", op} <= _calls(Tensor, operator)
    assert {"F", op} <= _calls(Variable, operator)


def test_neither_class_has_an_op_method_outside_the_table():
    listed = {*METHOD_OPS, *OPERATOR_OPS}
    assert _op_methods(Tensor, "ops") - listed == TENSOR_ONLY
    assert _op_methods(Variable, "F") - listed == VARIABLE_ONLY
    # the transpose property of both is the op ``transpose``
    assert {"ops", "transpose"} <= _calls(Tensor, "T")
    assert {"F", "transpose"} <= _calls(Variable, "T")
