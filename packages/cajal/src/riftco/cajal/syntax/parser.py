"""A recursive-descent parser for Cajal-lite; the grammar is in the package README."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn, TypeVar

from riftco.cajal.errors import CajalError, ParseError
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
from riftco.cajal.syntax.lexer import Token, tokenize
from riftco.cajal.types import BOOL, UNIT, DictionaryType, ProductType, SumType, Type

_Built = TypeVar("_Built")


def parse(source: str) -> Expression:
    """The expression that ``source`` spells; raises ParseError with a line and column."""
    parser = _Parser(source)
    expression = parser.expression()
    parser.expect_end()
    return expression


def parse_type(source: str) -> Type:
    """The type that ``source`` spells, e.g. ``Dict[Bool, Unit & Bool]``."""
    parser = _Parser(source)
    type_ = parser.type()
    parser.expect_end()
    return type_


def parse_context(source: str) -> tuple[tuple[str, Type], ...]:
    """An ordered context, e.g. ``x: Bool, d: Dict[Bool, Unit]`` (empty text: no variables)."""
    parser = _Parser(source)
    context = []
    if parser.peek().kind != "end":
        context.append(parser.declaration())
        while parser.accept(","):
            context.append(parser.declaration())
    parser.expect_end()
    return tuple(context)


class _Parser:
    def __init__(self, source: str) -> None:
        self.tokens = tokenize(source)
        self.position = 0

    # -- tokens ---------------------------------------------------------------

    def peek(self) -> Token:
        return self.tokens[self.position]

    def advance(self) -> Token:
        token = self.tokens[self.position]
        if token.kind != "end":
            self.position += 1
        return token

    def at(self, text: str) -> bool:
        token = self.peek()
        return token.kind in ("symbol", "keyword") and token.text == text

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.advance()
            return True
        return False

    def expect(self, text: str) -> Token:
        if not self.at(text):
            self.fail(f"expected {text!r}")
        return self.advance()

    def expect_name(self, role: str) -> str:
        token = self.peek()
        if token.kind != "name":
            self.fail(f"expected a {role}")
        return self.advance().text

    def expect_end(self) -> None:
        if self.peek().kind != "end":
            self.fail("expected end of input")

    def fail(self, expected: str, token: Token | None = None) -> NoReturn:
        token = token or self.peek()
        raise ParseError(f"{expected}, found {token.describe()}", token.line, token.column)

    # -- expressions ----------------------------------------------------------

    def expression(self) -> Expression:
        if self.accept("let"):
            name = self.expect_name("let binder name")
            self.expect("=")
            bound = self.expression()
            self.expect("in")
            return Let(name, bound, self.expression())
        if self.accept("case"):
            scrutinee = self.expression()
            self.expect("of")
            self.expect("inl")
            left_name = self.expect_name("case binder name")
            self.expect("=>")
            left_body = self.expression()
            self.expect("|")
            self.expect("inr")
            right_name = self.expect_name("case binder name")
            self.expect("=>")
            return Case(scrutinee, left_name, left_body, right_name, self.expression())
        first = self.prefix()
        if self.accept(";"):
            return Sequence(first, self.expression())
        return first

    def prefix(self) -> Expression:
        token = self.peek()
        if self.accept("inl") or self.accept("inr"):
            self.expect("[")
            type_token = self.peek()
            sum_type = self.type()
            self.expect("]")
            if not isinstance(sum_type, SumType):
                raise ParseError(
                    f"{token.text}: expected a Sum type in brackets, found {sum_type}",
                    type_token.line,
                    type_token.column,
                )
            body = self.prefix()
            injection = InjectLeft if token.text == "inl" else InjectRight
            return injection(body, sum_type)
        if self.accept("fst"):
            return Projection(self.prefix(), 0)
        if self.accept("snd"):
            return Projection(self.prefix(), 1)
        return self.postfix()

    def postfix(self) -> Expression:
        expression = self.atom()
        while self.accept("["):
            key = self.expression()
            self.expect("]")
            expression = Lookup(expression, key)
        return expression

    def atom(self) -> Expression:
        token = self.peek()
        if token.kind == "name":
            return Variable(self.advance().text)
        if self.accept("("):
            if self.accept(")"):
                return Unit()
            first = self.expression()
            if self.accept(","):
                second = self.expression()
                self.expect(")")
                return Tuple(first, second)
            self.expect(")")
            return first
        if self.accept("dict"):
            self.expect("[")
            key = self.type()
            self.expect(",")
            value = self.type()
            self.expect("]")
            dictionary_type = self.form(token, lambda: DictionaryType(key, value))
            self.expect("{")
            entries = []
            if not self.at("}"):
                entries.append(self.entry())
                while self.accept(","):
                    entries.append(self.entry())
            self.expect("}")
            return Dictionary(dictionary_type, tuple(entries))
        self.fail("expected an expression (a name, '(', or 'dict')")

    def entry(self) -> tuple[Expression, Expression]:
        key = self.expression()
        self.expect(":")
        return key, self.expression()

    def declaration(self) -> tuple[str, Type]:
        name = self.expect_name("variable name")
        self.expect(":")
        return name, self.type()

    # -- types ----------------------------------------------------------------

    def type(self) -> Type:
        left = self.product_type()
        token = self.peek()
        if self.accept("+"):
            right = self.type()
            return self.form(token, lambda: SumType(left, right))
        return left

    def product_type(self) -> Type:
        first = self.type_atom()
        if self.accept("&"):
            return ProductType(first, self.product_type())
        return first

    def type_atom(self) -> Type:
        token = self.peek()
        if self.accept("Unit"):
            return UNIT
        if self.accept("Bool"):
            return BOOL
        if self.accept("Dict"):
            self.expect("[")
            key = self.type()
            self.expect(",")
            value = self.type()
            self.expect("]")
            return self.form(token, lambda: DictionaryType(key, value))
        if self.accept("("):
            inner = self.type()
            self.expect(")")
            return inner
        self.fail("expected a type (Unit, Bool, Dict[...] or '(')")

    def form(self, token: Token, build: Callable[[], _Built]) -> _Built:
        """Build a type or node, reporting a formation error at ``token``."""
        try:
            return build()
        except CajalError as error:
            raise ParseError(str(error), token.line, token.column) from error
