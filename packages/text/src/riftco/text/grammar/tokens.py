"""Token masks: which tokens of a vocabulary can continue a valid document.

The vocabulary's byte strings are kept in a trie; a mask is one walk of the trie
from the automaton's state, following a branch only while some parse survives
its bytes (a dead prefix prunes every token under it). Masks are cached per
automaton state, and the automaton caches its byte transitions, so a state met
again (inside a string, between array items) costs a dictionary lookup and an
unpack of the cached bits.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from operator import index
from typing import TYPE_CHECKING, Any

import numpy as np

from riftco.text.grammar.automaton import DEAD, ByteAutomaton, Config
from riftco.text.grammar.errors import GrammarError, TokenNotAllowed
from riftco.text.grammar.nodes import Graph
from riftco.text.grammar.schema import GrammarLimits, compile_schema

if TYPE_CHECKING:
    from riftco.text.base import Tokenizer

DEFAULT_MAX_WHITESPACE = 4


class TokenGrammar:
    """A compiled grammar over one vocabulary; :meth:`start` begins a document."""

    def __init__(
        self,
        graph: Graph,
        root: int,
        vocabulary: Sequence[bytes],
        *,
        eos_ids: Iterable[int],
        special_ids: Iterable[int] = (),
        limits: GrammarLimits | None = None,
    ) -> None:
        limits = GrammarLimits() if limits is None else limits
        self.limits = limits
        self.vocab_size = len(vocabulary)
        self.eos_ids = _ids(eos_ids, self.vocab_size, "eos_ids")
        if not self.eos_ids:
            raise GrammarError("expected at least one end-of-sequence id in eos_ids; found none")
        excluded = set(self.eos_ids) | set(_ids(special_ids, self.vocab_size, "special_ids"))
        self._token_bytes: list[bytes] = []
        self._children: list[dict[int, int]] = [{}]
        self._tokens: list[list[int]] = [[]]
        for token_id, data in enumerate(vocabulary):
            if not isinstance(data, (bytes, bytearray)):
                raise GrammarError(
                    f"vocabulary: expected bytes for every token; found "
                    f"{type(data).__name__} at id {token_id}"
                )
            data = bytes(data)
            self._token_bytes.append(data)
            if token_id not in excluded and data:
                self._insert(token_id, data)
        self._excluded = frozenset(excluded)
        self.automaton = ByteAutomaton(
            graph, root, limits.max_depth, limits.max_stacks, limits.max_states
        )
        self._masks: OrderedDict[int, np.ndarray] = OrderedDict()
        self._mask_generation = self.automaton.generation
        self._max_masks = max(1, limits.mask_cache_bytes // max(1, (self.vocab_size + 7) // 8))
        first = self.start()
        if not first.allowed().any():
            raise GrammarError("the vocabulary has no token that can begin a document")

    @classmethod
    def compile(
        cls,
        schema: Mapping[str, Any] | bool | None,
        vocabulary: Sequence[bytes],
        *,
        eos_ids: Iterable[int],
        special_ids: Iterable[int] = (),
        limits: GrammarLimits | None = None,
        max_whitespace: int = DEFAULT_MAX_WHITESPACE,
    ) -> TokenGrammar:
        """The grammar of documents valid against ``schema``; ``None`` is any JSON object.

        ``vocabulary[i]`` is the bytes token ``i`` stands for; ``eos_ids`` end the
        output (allowed once the document is complete); ``special_ids`` are never
        allowed. Raises :class:`SchemaError` (and its :class:`GrammarLimitError`)
        for a schema outside the subset or the limits.
        """
        limits = GrammarLimits() if limits is None else limits
        if not isinstance(max_whitespace, int) or max_whitespace < 0:
            raise GrammarError(
                f"max_whitespace: expected a non-negative int; found {max_whitespace!r}"
            )
        graph, root = compile_schema(schema, limits, max_whitespace)
        return cls(graph, root, vocabulary, eos_ids=eos_ids, special_ids=special_ids, limits=limits)

    @classmethod
    def for_tokenizer(
        cls,
        schema: Mapping[str, Any] | bool | None,
        tokenizer: Tokenizer,
        *,
        chat: bool = False,
        limits: GrammarLimits | None = None,
        max_whitespace: int = DEFAULT_MAX_WHITESPACE,
    ) -> TokenGrammar:
        """:meth:`compile` over a riftco tokenizer: its stop ids end the document
        (``tokenizer.stop_ids(chat)``), its other special tokens are never allowed."""
        return cls.compile(
            schema,
            tokenizer.vocabulary_bytes(),
            eos_ids=tokenizer.stop_ids(chat),
            special_ids=range(tokenizer.base_vocab_size, tokenizer.vocab_size),
            limits=limits,
            max_whitespace=max_whitespace,
        )

    def _insert(self, token_id: int, data: bytes) -> None:
        at = 0
        children = self._children
        for byte in data:
            nxt = children[at].get(byte)
            if nxt is None:
                nxt = len(children)
                children[at][byte] = nxt
                children.append({})
                self._tokens.append([])
            at = nxt
        self._tokens[at].append(token_id)

    def start(self) -> GrammarState:
        """A state before the first token of a document."""
        return GrammarState(self, self.automaton.start_config)

    # -- used by GrammarState ----------------------------------------------------

    def _state_id(self, config: Config) -> int:
        automaton = self.automaton
        if automaton.trim() or self._mask_generation != automaton.generation:
            self._masks.clear()
            self._mask_generation = automaton.generation
        return automaton.intern(config)

    def _mask(self, state: int) -> np.ndarray:
        packed = self._masks.get(state)
        if packed is not None:
            self._masks.move_to_end(state)
            return np.unpackbits(packed, count=self.vocab_size).view(np.bool_)
        mask = np.zeros(self.vocab_size, dtype=np.bool_)
        allowed = self._walk(state)
        if allowed:
            mask[allowed] = True
        if self.automaton.accepting(state):
            mask[list(self.eos_ids)] = True
        self._masks[state] = np.packbits(mask)
        if len(self._masks) > self._max_masks:
            self._masks.popitem(last=False)
        return mask

    def _walk(self, state: int) -> list[int]:
        automaton = self.automaton
        transitions = automaton.transitions
        step = automaton.step
        children = self._children
        tokens = self._tokens
        allowed: list[int] = []
        todo = [(0, state)]
        while todo:
            at, current = todo.pop()
            row = transitions[current]
            for byte, child in children[at].items():
                nxt = row.get(byte)
                if nxt is None:
                    nxt = step(current, byte)
                if nxt == DEAD:
                    continue
                found = tokens[child]
                if found:
                    allowed += found
                if children[child]:
                    todo.append((child, nxt))
        return allowed

    def _feed(self, state: int, token_id: int) -> int:
        step = self.automaton.step
        for byte in self._token_bytes[token_id]:
            state = step(state, byte)
            if state == DEAD:
                break
        return state


class GrammarState:
    """Where one document stands: the constraint a sampler applies each step.

    ``allowed()`` is the mask of tokens that keep the document valid (end of
    sequence only once it is complete); ``advance(id)`` takes one of them.
    """

    __slots__ = ("_config", "_done", "_grammar")

    def __init__(self, grammar: TokenGrammar, config: Config, done: bool = False) -> None:
        self._grammar = grammar
        self._config = config
        self._done = done

    @property
    def grammar(self) -> TokenGrammar:
        return self._grammar

    def allowed(self) -> np.ndarray:
        """A fresh ``bool`` array of the vocabulary's length: True where a token may follow."""
        grammar = self._grammar
        if self._done:
            return np.zeros(grammar.vocab_size, dtype=np.bool_)
        return grammar._mask(grammar._state_id(self._config))

    def allows(self, token_id: int) -> bool:
        """Whether ``token_id`` may follow (without building the whole mask)."""
        return self._next(token_id) is not None

    def advance(self, token_id: int) -> None:
        """Take ``token_id``; :class:`TokenNotAllowed` if the grammar does not allow it."""
        nxt = self._next(token_id)
        if nxt is None:
            raise TokenNotAllowed(self._refusal(token_id))
        if isinstance(nxt, frozenset):
            self._config = nxt
        else:
            self._done = True

    def _next(self, token_id: int) -> Config | bool | None:
        grammar = self._grammar
        try:
            token_id = index(token_id)
        except TypeError:
            return None
        if self._done or not 0 <= token_id < grammar.vocab_size:
            return None
        state = grammar._state_id(self._config)
        if token_id in grammar.eos_ids:
            return True if grammar.automaton.accepting(state) else None
        if token_id in grammar._excluded or not grammar._token_bytes[token_id]:
            return None
        nxt = grammar._feed(state, token_id)
        return None if nxt == DEAD else grammar.automaton.configs[nxt]

    def _refusal(self, token_id: Any) -> str:
        grammar = self._grammar
        if self._done:
            return f"the document has ended; found token {token_id!r} after end of sequence"
        try:
            token_id = index(token_id)
        except TypeError:
            return f"expected an integer token id; found {type(token_id).__name__}"
        if not 0 <= token_id < grammar.vocab_size:
            return f"expected a token id in [0, {grammar.vocab_size}); found {token_id}"
        if token_id in grammar.eos_ids:
            return f"end of sequence (token {token_id}) before the document is complete"
        if token_id in grammar._excluded:
            return f"token {token_id} is a special token, which the grammar never allows"
        data = grammar._token_bytes[token_id]
        return f"token {token_id} ({data!r:.60}) cannot continue the document here"

    def is_accepting(self) -> bool:
        """Whether the document is complete (end of sequence would be allowed)."""
        if self._done:
            return True
        grammar = self._grammar
        return grammar.automaton.accepting(grammar._state_id(self._config))

    def is_done(self) -> bool:
        """Whether end of sequence was taken."""
        return self._done

    def copy(self) -> GrammarState:
        return GrammarState(self._grammar, self._config, self._done)


def _ids(values: Iterable[int], size: int, name: str) -> tuple[int, ...]:
    out: list[int] = []
    for value in values:
        try:
            value = index(value)
        except TypeError:
            raise GrammarError(
                f"{name}: expected integer ids; found {type(value).__name__}"
            ) from None
        if not 0 <= value < size:
            raise GrammarError(f"{name}: expected ids in [0, {size}); found {value}")
        out.append(value)
    return tuple(dict.fromkeys(out))
