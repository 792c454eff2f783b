"""Special tokens: reserved ids after the ordinary vocabulary, never made by merges.

They are recognised in text only when the caller asks (``allow_special=True``);
otherwise their text is ordinary text. Where two special tokens could match at
the same place, the longer wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from riftco.text.errors import SpecialTokenError

END_OF_TEXT = "<|endoftext|>"
SYSTEM = "<|system|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
END = "<|end|>"
DEFAULT_SPECIAL_TOKENS: tuple[str, ...] = (END_OF_TEXT, SYSTEM, USER, ASSISTANT, END)

MAX_SPECIAL_TOKENS = 4096
MAX_SPECIAL_TOKEN_LENGTH = 256


def check_special_tokens(tokens: Sequence[str]) -> tuple[str, ...]:
    """Validate a special-token list and return it as a tuple."""
    if isinstance(tokens, str):
        raise SpecialTokenError(f"expected a sequence of strings; found the string {tokens!r}")
    tokens = tuple(tokens)
    if len(tokens) > MAX_SPECIAL_TOKENS:
        raise SpecialTokenError(
            f"expected at most {MAX_SPECIAL_TOKENS} special tokens; found {len(tokens)}"
        )
    seen: set[str] = set()
    for index, token in enumerate(tokens):
        where = f"special token {index}"
        if not isinstance(token, str):
            raise SpecialTokenError(f"{where}: expected a string; found {type(token).__name__}")
        if not 0 < len(token) <= MAX_SPECIAL_TOKEN_LENGTH:
            raise SpecialTokenError(
                f"{where}: expected 1 to {MAX_SPECIAL_TOKEN_LENGTH} characters; found {len(token)}"
            )
        try:
            token.encode("utf-8")
        except UnicodeEncodeError:
            raise SpecialTokenError(f"{where}: {token!r} is not valid Unicode") from None
        if token in seen:
            raise SpecialTokenError(f"{where}: {token!r} appears twice")
        seen.add(token)
    return tokens


class SpecialTokens:
    """The special tokens of one tokenizer, with ids from ``first_id`` on."""

    def __init__(self, tokens: Sequence[str], first_id: int) -> None:
        self.tokens = check_special_tokens(tokens)
        self.first_id = first_id
        self.ids = {token: first_id + k for k, token in enumerate(self.tokens)}
        longest_first = sorted(self.tokens, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, longest_first))) if self.tokens else None

    def __len__(self) -> int:
        return len(self.tokens)

    def split(self, text: str) -> Iterator[tuple[str, int | None]]:
        """Cut ``text`` into ``(plain text, None)`` and ``(special text, its id)`` pieces."""
        if self._pattern is None:
            if text:
                yield text, None
            return
        start = 0
        for match in self._pattern.finditer(text):
            if match.start() > start:
                yield text[start : match.start()], None
            yield match.group(), self.ids[match.group()]
            start = match.end()
        if start < len(text):
            yield text[start:], None
