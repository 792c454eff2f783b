"""Cajal-lite syntax: the expression tree, the parser and the printer."""

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
    free_variables,
    literal,
)
from riftco.cajal.syntax.parser import parse, parse_context, parse_type
from riftco.cajal.syntax.printer import print_expression, print_type

__all__ = [
    "Case",
    "Dictionary",
    "Expression",
    "InjectLeft",
    "InjectRight",
    "Let",
    "Lookup",
    "Projection",
    "Sequence",
    "Tuple",
    "Unit",
    "Variable",
    "free_variables",
    "literal",
    "parse",
    "parse_context",
    "parse_type",
    "print_expression",
    "print_type",
]
