"""Generated token ids to streamed text, with stop strings.

Bytes of byte-level tokens can split a UTF-8 character, and a stop string can
span tokens, so text is released only when it is whole characters that cannot
become the start of a stop string. When a stop string appears, the text before
it is the last that is released.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence


class TextStream:
    """Feed token ids with ``push``; each call returns the newly released text."""

    def __init__(
        self,
        token_bytes: Callable[[int], bytes],
        stop: Sequence[str] = (),
        skip: frozenset[int] = frozenset(),
    ) -> None:
        self._token_bytes = token_bytes
        self._skip = skip
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(s for s in stop if s)
        self._longest = max((len(s) for s in self._stop), default=0)
        self._text = ""  # decoded so far
        self._released = 0  # characters of _text handed out
        self.stopped = False  # a stop string was found

    @property
    def text(self) -> str:
        """Everything released so far."""
        return self._text[: self._released]

    @property
    def decoded(self) -> int:
        """Characters decoded so far (released or held back): where the next token's
        text starts."""
        return len(self._text)

    def push(self, token_id: int) -> str:
        """Add one generated token; return the text it releases ('' if none)."""
        if self.stopped:
            return ""
        if token_id not in self._skip:
            self._text += self._decoder.decode(self._token_bytes(token_id))
        return self._release(final=False)

    def finish(self) -> str:
        """Generation ended (not at a stop string): release what was held back."""
        if self.stopped:
            return ""
        self._text += self._decoder.decode(b"", final=True)
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        text = self._text
        if self._stop:
            start = max(self._released - self._longest + 1, 0)
            hits = [i for i in (text.find(s, start) for s in self._stop) if i >= 0]
            if hits:
                self.stopped = True
                return self._upto(min(hits))
        end = len(text)
        if not final:
            end -= self._held_back(text)
        return self._upto(end)

    def _held_back(self, text: str) -> int:
        """Length of the longest end of ``text`` that starts some stop string."""
        for k in range(min(self._longest - 1, len(text) - self._released), 0, -1):
            tail = text[-k:]
            if any(s.startswith(tail) for s in self._stop):
                return k
        return 0

    def _upto(self, end: int) -> str:
        if end <= self._released:
            return ""
        out = self._text[self._released : end]
        self._released = end
        return out


__all__ = ["TextStream"]
