"""The deterministic reference interpreter of Cajal-lite.

It evaluates any expression, checked or not, in an environment of values, and raises
EvaluationError where a construct meets a value it cannot use. Dictionaries have unique
keys: a literal that builds two entries with one key fails, and a lookup succeeds only
when exactly one entry's key equals the key looked up.
"""

from __future__ import annotations

from collections.abc import Mapping

from riftco.cajal.errors import EvaluationError, InvalidValueError
from riftco.cajal.syntax import ast
from riftco.cajal.syntax.ast import Expression
from riftco.cajal.syntax.printer import print_expression
from riftco.cajal.values import (
    UNIT_VALUE,
    DictionaryValue,
    LeftValue,
    PairValue,
    RightValue,
    UnitValue,
    Value,
    format_value,
    type_of,
)


def evaluate(expression: Expression, environment: Mapping[str, Value] | None = None) -> Value:
    """The value of ``expression`` where each free variable has its value in ``environment``."""
    return _evaluate(expression, dict(environment or {}))


def _fail(expected: str, found: Value, where: Expression) -> EvaluationError:
    return EvaluationError(
        f"{expected}, found {format_value(found)} (in `{print_expression(where)}`)"
    )


def _evaluate(expression: Expression, env: dict[str, Value]) -> Value:
    match expression:
        case ast.Variable(name):
            if name not in env:
                raise EvaluationError(f"expected a value for variable {name!r}, found none")
            return env[name]
        case ast.Unit():
            return UNIT_VALUE
        case ast.Tuple(first, second):
            return PairValue(_evaluate(first, env), _evaluate(second, env))
        case ast.InjectLeft(body, sum_type):
            payload = _evaluate(body, env)
            _expect_type(payload, sum_type.left, "inl payload", expression)
            return LeftValue(payload, sum_type)
        case ast.InjectRight(body, sum_type):
            payload = _evaluate(body, env)
            _expect_type(payload, sum_type.right, "inr payload", expression)
            return RightValue(payload, sum_type)
        case ast.Projection(body, index):
            pair = _evaluate(body, env)
            if not isinstance(pair, PairValue):
                raise _fail("projection: expected a pair", pair, expression)
            return (pair.first, pair.second)[index]
        case ast.Sequence(first, second):
            unit = _evaluate(first, env)
            if not isinstance(unit, UnitValue):
                raise _fail("sequence: expected () from the first part", unit, expression)
            return _evaluate(second, env)
        case ast.Let(name, bound, body):
            return _evaluate(body, {**env, name: _evaluate(bound, env)})
        case ast.Case(scrutinee, left_name, left_body, right_name, right_body):
            tagged = _evaluate(scrutinee, env)
            if isinstance(tagged, LeftValue):
                return _evaluate(left_body, {**env, left_name: tagged.payload})
            if isinstance(tagged, RightValue):
                return _evaluate(right_body, {**env, right_name: tagged.payload})
            raise _fail("case: expected inl or inr", tagged, expression)
        case ast.Lookup(dictionary, key):
            return _lookup(_evaluate(dictionary, env), _evaluate(key, env), expression)
        case ast.Dictionary(dictionary_type, entries):
            built: list[tuple[Value, Value]] = []
            for key_expression, value_expression in entries:
                entry_key = _evaluate(key_expression, env)
                if any(entry_key == seen for seen, _ in built):
                    raise _fail("dictionary: expected unique keys", entry_key, expression)
                built.append((entry_key, _evaluate(value_expression, env)))
            try:
                return DictionaryValue(dictionary_type, tuple(built))
            except InvalidValueError as error:
                raise EvaluationError(f"{error} (in `{print_expression(expression)}`)") from error
    raise EvaluationError(f"expected an expression, found {type(expression).__name__}")


def _lookup(dictionary: Value, key: Value, where: Expression) -> Value:
    if not isinstance(dictionary, DictionaryValue):
        raise _fail("lookup: expected a dictionary", dictionary, where)
    matches = [value for stored, value in dictionary.entries if stored == key]
    if len(matches) != 1:
        raise EvaluationError(
            f"lookup of key {format_value(key)}: expected exactly one matching entry, found "
            f"{len(matches)} in {format_value(dictionary)} (in `{print_expression(where)}`)"
        )
    return matches[0]


def _expect_type(value: Value, expected: object, role: str, where: Expression) -> None:
    try:
        found = type_of(value)
    except InvalidValueError as error:
        raise EvaluationError(str(error)) from error
    if found != expected:
        raise _fail(f"{role}: expected a value of type {expected}", value, where)
