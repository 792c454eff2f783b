"""The errors of riftco.cajal: one base class, one subclass per stage."""

from __future__ import annotations

from enum import Enum

from riftco.core.errors import RiftcoError


class CajalError(RiftcoError):
    """Base class of every error raised by riftco.cajal (a ``RiftcoError``)."""


class TypeFormationError(CajalError):
    """A type that cannot be formed (a dictionary key that is not one-hot, ...)."""


class MalformedExpressionError(CajalError):
    """An expression node built with a field it cannot hold."""


class InvalidNameError(MalformedExpressionError):
    """A variable name that is not an identifier, or is a keyword."""


class InvalidValueError(CajalError):
    """A value that does not inhabit the type it claims (or duplicate dictionary keys)."""


class ParseError(CajalError):
    """Source text that does not follow the grammar; carries a 1-based line and column."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.message = message
        self.line = line
        self.column = column


class CheckError(CajalError):
    """A program the checker rejects."""


class TypeCheckError(CheckError):
    """A subexpression whose type is not the one its construct expects."""


class Rule(str, Enum):
    """The context rules of the linear checker; every LinearityError names one."""

    UNBOUND = "unbound"
    DROPPED = "dropped"
    DUPLICATED = "duplicated"
    TUPLE_SHARES_CONTEXT = "tuple-shares-context"
    CASE_BRANCHES_AGREE = "case-branches-agree"
    BINDER_USED_ONCE = "binder-used-once"
    DICTIONARY_DISJOINT = "dictionary-disjoint"
    DICTIONARY_SHARES_CONTEXT = "dictionary-shares-context"
    NO_SHADOWING = "no-shadowing"
    DUPLICATE_CONTEXT_NAME = "duplicate-context-name"


class LinearityError(CheckError):
    """A variable dropped, duplicated, unbound or shadowed; names the variable and the rule."""

    def __init__(self, variable: str, rule: Rule, message: str) -> None:
        super().__init__(f"variable {variable!r} breaks rule {rule.value!r}: {message}")
        self.variable = variable
        self.rule = rule


class EvaluationError(CajalError):
    """A program that fails at run time (a lookup without exactly one matching key, ...)."""


class EncodingError(CajalError):
    """A vector that is not the dense encoding of a value of the expected type."""


class ShapeError(CajalError):
    """A tensor or argument whose shape is not the one a multilinear map expects."""


class LoweringError(CajalError):
    """A map that cannot be lowered as asked (strategy, size or precision)."""


class UnsupportedStrategyError(LoweringError):
    """A lowering strategy that does not exist, does not fit the map, or is refused."""


class CoefficientLimitError(LoweringError):
    """A map with more coefficients than the lowering's limit allows."""


class LossyLoweringError(LoweringError):
    """An exact lowering of a map whose coefficients float32 cannot hold exactly."""
