"""The interface every tokenizer shares, and what it can do on top of two methods.

A subclass supplies :meth:`Tokenizer.encode_bytes` (ordinary bytes to ids),
``_base_bytes`` (the bytes of each ordinary id) and ``_body_state`` (its part of
the saved state). Special tokens, text encoding, decoding, chat templates and
saving are common.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from operator import index
from types import MappingProxyType
from typing import Any, ClassVar

from riftco.text.chat import ChatEncoding, ChatTemplate, encode_chat
from riftco.text.errors import ChatTemplateError, DecodeError, EncodeError, SpecialTokenError
from riftco.text.special import SpecialTokens

FORMAT = "riftco-text/tokenizer"
FORMAT_VERSION = 1
MAX_VOCAB_SIZE = 1 << 20


class Tokenizer(ABC):
    """Text to ids and back; ids ``0 .. base_size - 1`` are ordinary, special ones follow."""

    method: ClassVar[str]

    def __init__(
        self,
        base_size: int,
        special_tokens: Sequence[str],
        eos_token: str | None,
        chat_template: ChatTemplate | None,
    ) -> None:
        self._special = SpecialTokens(special_tokens, base_size)
        self._base_size = base_size
        if base_size + len(self._special) > MAX_VOCAB_SIZE:
            raise SpecialTokenError(
                f"expected at most {MAX_VOCAB_SIZE} ids in all; found {base_size} ordinary "
                f"and {len(self._special)} special"
            )
        if eos_token is not None and eos_token not in self._special.ids:
            raise SpecialTokenError(
                f"expected eos_token among the special tokens {list(self._special.tokens)}; "
                f"found {eos_token!r} (pass eos_token=None for none)"
            )
        self._eos_token = eos_token
        self._id_bytes = self._base_bytes() + [t.encode() for t in self._special.tokens]
        self._chat_template = chat_template
        if chat_template is not None:
            self._check_chat_template(chat_template)

    # -- sizes and special tokens ------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Number of ids, special tokens included."""
        return self._base_size + len(self._special)

    @property
    def base_vocab_size(self) -> int:
        """Number of ordinary ids (bytes and merges); special ids start here."""
        return self._base_size

    @property
    def special_tokens(self) -> Mapping[str, int]:
        return MappingProxyType(self._special.ids)

    @property
    def eos_token(self) -> str | None:
        return self._eos_token

    @property
    def eos_id(self) -> int:
        """The end-of-text id; raises SpecialTokenError if the tokenizer has none."""
        if self._eos_token is None:
            raise SpecialTokenError(
                f"this tokenizer has no end-of-text token; its special tokens are "
                f"{list(self._special.tokens)}"
            )
        return self._special.ids[self._eos_token]

    @property
    def end_of_text_id(self) -> int:
        return self.eos_id

    @property
    def chat_template(self) -> ChatTemplate | None:
        return self._chat_template

    def stop_ids(self, chat: bool = False) -> tuple[int, ...]:
        """The ids that end generated text: end-of-text (when the tokenizer has one)
        and, with ``chat`` and a chat template, every special token the template
        writes: the assistant's end marker first, then the role markers (a reply ends
        where a new turn would begin). Generation, bundles and serving all stop here."""
        stops = [] if self._eos_token is None else [self.eos_id]
        template = self._chat_template
        if chat and template is not None:
            assistant = template.roles[template.assistant_role].suffix
            for text in (assistant, *template.template_strings().values()):
                stops += [i for _, i in self._special.split(text) if i is not None]
        return tuple(dict.fromkeys(stops))

    # -- encoding and decoding ---------------------------------------------------

    @abstractmethod
    def _encode(self, data: bytes, offset: int) -> list[int]:
        """Ordinary ids for ``data``, which starts at byte ``offset`` of the input."""

    @abstractmethod
    def _base_bytes(self) -> list[bytes]:
        """The bytes of each ordinary id, in id order."""

    def encode_bytes(self, data: bytes) -> list[int]:
        """Ordinary ids for ``data``; special tokens are never recognised here."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise EncodeError(f"expected bytes; found {type(data).__name__} (use encode)")
        return self._encode(bytes(data), 0)

    def encode(self, text: str, allow_special: bool = False) -> list[int]:
        """Ids for ``text``; special-token text is recognised only with ``allow_special``.

        Error positions are byte offsets into the UTF-8 encoding of ``text``.
        """
        if not isinstance(text, str):
            raise EncodeError(f"expected str; found {type(text).__name__} (use encode_bytes)")
        if not allow_special:
            return self._encode(_utf8(text), 0)
        ids: list[int] = []
        offset = 0
        for piece, special_id in self._special.split(text):
            data = _utf8(piece)
            if special_id is None:
                ids += self._encode(data, offset)
            else:
                ids.append(special_id)
            offset += len(data)
        return ids

    def decode_bytes(self, ids: Sequence[int], skip_special: bool = False) -> bytes:
        """The exact bytes of ``ids``; special tokens as their UTF-8 text unless skipped."""
        ids = list(ids)
        size = self.vocab_size
        try:
            valid = not ids or (min(ids) >= 0 and max(ids) < size)
            if valid:
                if skip_special:
                    ids = [i for i in ids if i < self._base_size]
                return b"".join(map(self._id_bytes.__getitem__, ids))
        except TypeError:
            pass
        for position, token_id in enumerate(ids):
            try:
                index(token_id)
            except TypeError:
                raise DecodeError(
                    f"expected integer ids; found {type(token_id).__name__} at position {position}"
                ) from None
            if not 0 <= token_id < size:
                raise DecodeError(
                    f"expected ids in [0, {size}); found {token_id} at position {position}"
                )
        raise AssertionError("unreachable")  # pragma: no cover

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Text of ``ids``; bytes that are not valid UTF-8 become U+FFFD."""
        return self.decode_bytes(ids, skip_special).decode("utf-8", "replace")

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one id stands for."""
        if not 0 <= token_id < self.vocab_size:
            raise DecodeError(f"expected an id in [0, {self.vocab_size}); found {token_id}")
        return self._id_bytes[token_id]

    def vocabulary_bytes(self) -> list[bytes]:
        """The bytes of every id, in id order (special tokens as their UTF-8 text)."""
        return list(self._id_bytes)

    # -- chat --------------------------------------------------------------------

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = False
    ) -> ChatEncoding:
        """A list of ``{"role", "content"}`` messages as ids, text and assistant mask."""
        if self._chat_template is None:
            raise ChatTemplateError("this tokenizer has no chat template")
        return encode_chat(self._chat_template, self.encode, messages, add_generation_prompt)

    def _check_chat_template(self, template: ChatTemplate) -> None:
        for where, text in template.template_strings().items():
            try:
                self.encode(text, allow_special=True)
            except EncodeError as exc:
                raise ChatTemplateError(f"chat template {where}: {exc}") from None
        for role, fmt in template.roles.items():
            if not any(special is not None for _, special in self._special.split(fmt.prefix)):
                raise ChatTemplateError(
                    f"chat template {role}.prefix: expected at least one special token, so that "
                    f"message content cannot forge it; found {fmt.prefix!r}"
                )

    # -- state -------------------------------------------------------------------

    @abstractmethod
    def _body_state(self) -> dict[str, Any]:
        """The subclass's part of the state: its vocabulary and options."""

    def to_state(self) -> dict[str, Any]:
        """The whole tokenizer as a JSON-ready dict; see :func:`tokenizer_from_state`."""
        template = self._chat_template
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "method": self.method,
            **self._body_state(),
            "special_tokens": [{"id": i, "content": t} for t, i in self._special.ids.items()],
            "eos_token": self._eos_token,
            "chat_template": None if template is None else template.to_state(),
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the state as JSON, atomically."""
        from riftco.text.state import save

        save(self, path)

    def __reduce__(self) -> tuple[Any, ...]:
        from riftco.text.state import tokenizer_from_state

        return (tokenizer_from_state, (self.to_state(),))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tokenizer):
            return NotImplemented
        return self.to_state() == other.to_state()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(vocab_size={self.vocab_size}, "
            f"special_tokens={len(self._special)})"
        )


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodeError(
            f"expected text that UTF-8 can encode; found an unpaired surrogate "
            f"{text[exc.start]!r} at index {exc.start}"
        ) from None
