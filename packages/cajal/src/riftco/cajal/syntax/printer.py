"""Source text for expressions: ``parse(print_expression(e)) == e`` for every expression.

Three levels decide where parentheses go: a let, a case or a sequence extends as far to
the right as it can, so it is parenthesized anywhere but at the top of an expression
slot (level 0); a prefix form (inl, inr, fst, snd) is parenthesized where a postfix base
is expected (level 2).
"""

from __future__ import annotations

from riftco.cajal.errors import MalformedExpressionError
from riftco.cajal.syntax.ast import (
    Case,
    Dictionary,
    Expression,
    InjectLeft,
    InjectRight,
    Let,
    Lookup,
    Projection,
    Sequence,
    Tuple,
    Unit,
    Variable,
)
from riftco.cajal.types import Type, format_type

_EXPRESSION, _PREFIX, _POSTFIX = 0, 1, 2


def print_expression(expression: Expression) -> str:
    """Source text for ``expression`` on one line."""
    return _print(expression, _EXPRESSION)


def print_type(type_: Type) -> str:
    """Source text for ``type_``."""
    return format_type(type_)


def _wrap(text: str, parenthesize: bool) -> str:
    return f"({text})" if parenthesize else text


def _print(expression: Expression, level: int) -> str:
    match expression:
        case Variable(name):
            return name
        case Unit():
            return "()"
        case Tuple(first, second):
            return f"({_print(first, _EXPRESSION)}, {_print(second, _EXPRESSION)})"
        case Dictionary(dictionary_type, entries):
            inner = ", ".join(
                f"{_print(key, _EXPRESSION)}: {_print(value, _EXPRESSION)}"
                for key, value in entries
            )
            key_type, value_type = dictionary_type.key, dictionary_type.value
            return f"dict[{format_type(key_type)}, {format_type(value_type)}] {{{inner}}}"
        case Lookup(dictionary, key):
            return f"{_print(dictionary, _POSTFIX)}[{_print(key, _EXPRESSION)}]"
        case InjectLeft(body, sum_type):
            text = f"inl[{format_type(sum_type)}] {_print(body, _PREFIX)}"
            return _wrap(text, level >= _POSTFIX)
        case InjectRight(body, sum_type):
            text = f"inr[{format_type(sum_type)}] {_print(body, _PREFIX)}"
            return _wrap(text, level >= _POSTFIX)
        case Projection(body, index):
            text = f"{('fst', 'snd')[index]} {_print(body, _PREFIX)}"
            return _wrap(text, level >= _POSTFIX)
        case Sequence(first, second):
            text = f"{_print(first, _PREFIX)}; {_print(second, _EXPRESSION)}"
            return _wrap(text, level > _EXPRESSION)
        case Let(name, bound, body):
            text = f"let {name} = {_print(bound, _EXPRESSION)} in {_print(body, _EXPRESSION)}"
            return _wrap(text, level > _EXPRESSION)
        case Case(scrutinee, left_name, left_body, right_name, right_body):
            text = (
                f"case {_print(scrutinee, _EXPRESSION)} of "
                f"inl {left_name} => {_print(left_body, _EXPRESSION)} | "
                f"inr {right_name} => {_print(right_body, _EXPRESSION)}"
            )
            return _wrap(text, level > _EXPRESSION)
    raise MalformedExpressionError(f"expected an expression, found {type(expression).__name__}")
