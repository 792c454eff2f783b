"""Tokens of Cajal-lite source text, each with its 1-based line and column."""

from __future__ import annotations

from dataclasses import dataclass

from riftco.cajal.errors import ParseError
from riftco.cajal.syntax.ast import IDENTIFIER, KEYWORDS

SYMBOLS = ("=>", "(", ")", "[", "]", "{", "}", ",", ":", ";", "=", "|", "+", "&")


@dataclass(frozen=True)
class Token:
    kind: str  # "name", "keyword", "symbol" or "end"
    text: str
    line: int
    column: int

    def describe(self) -> str:
        if self.kind == "end":
            return "end of input"
        return f"{self.kind} {self.text!r}"


def tokenize(source: str) -> list[Token]:
    """Split ``source`` into tokens; ``#`` starts a comment that runs to the end of the line."""
    tokens = []
    line, line_start, position = 1, 0, 0
    while position < len(source):
        char = source[position]
        column = position - line_start + 1
        if char == "\n":
            line, line_start = line + 1, position + 1
            position += 1
        elif char.isspace():
            position += 1
        elif char == "#":
            end = source.find("\n", position)
            position = len(source) if end < 0 else end
        elif match := IDENTIFIER.match(source, position):
            text = match.group()
            kind = "keyword" if text in KEYWORDS else "name"
            tokens.append(Token(kind, text, line, column))
            position = match.end()
        else:
            symbol = next((s for s in SYMBOLS if source.startswith(s, position)), None)
            if symbol is None:
                raise ParseError(
                    f"expected a name, a keyword or one of {' '.join(SYMBOLS)}, found {char!r}",
                    line,
                    column,
                )
            tokens.append(Token("symbol", symbol, line, column))
            position += len(symbol)
    tokens.append(Token("end", "", line, position - line_start + 1))
    return tokens
