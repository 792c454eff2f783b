"""Token masks: which tokens of a vocabulary can continue a valid document.

The vocabulary's byte strings are kept in a trie; a mask is one walk of the trie
from the automaton's state, following a branch only while some parse survives
its bytes (a dead prefix prunes every token under it). Masks are cached per
automaton state, and the automaton caches its byte transitions, so a state met
again (inside a string, between array items) costs a dictionary lookup and an
unpack of the cached bits.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from operator import index
from typing import TYPE_CHECKING, Any

import numpy as np

from riftco.text.grammar.automaton import DEAD, ByteAutomaton, Config
from riftco.text.grammar.errors import GrammarError, TokenNotAllowed
from riftco.text.grammar.nodes import Graph, Stack, String
from riftco.text.grammar.schema import GrammarLimits, compile_schema

if TYPE_CHECKING:
    from riftco.text.base import Tokenizer

DEFAULT_MAX_WHITESPACE = 4


class Vocabulary:
    """A vocabulary prepared for masks: each token's bytes in a trie, the ids that end
    a document, the ids never allowed, and the string tables (see
    ``TokenGrammar._string_into``), which depend on the vocabulary alone and so are
    shared by every grammar compiled over it. Build it once per tokenizer."""

    def __init__(
        self,
        tokens: Sequence[bytes],
        *,
        eos_ids: Iterable[int],
        special_ids: Iterable[int] = (),
    ) -> None:
        if isinstance(tokens, (bytes, str)) or not isinstance(tokens, Sequence):
            raise GrammarError("vocabulary: expected a sequence of byte strings, one per id")
        self.size = len(tokens)
        self.eos_ids = _ids(eos_ids, self.size, "eos_ids")
        if not self.eos_ids:
            raise GrammarError("expected at least one end-of-sequence id in eos_ids; found none")
        excluded = set(self.eos_ids) | set(_ids(special_ids, self.size, "special_ids"))
        self.token_bytes: list[bytes] = []
        self.children: list[dict[int, int]] = [{}]
        self.tokens: list[list[int]] = [[]]
        for token_id, data in enumerate(tokens):
            if not isinstance(data, (bytes, bytearray)):
                raise GrammarError(
                    f"vocabulary: expected bytes for every token; found "
                    f"{type(data).__name__} at id {token_id}"
                )
            data = bytes(data)
            self.token_bytes.append(data)
            if token_id not in excluded and data:
                self._insert(token_id, data)
        self.excluded = frozenset(excluded)
        self.string_tables: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, list]] = {}

    @classmethod
    def of_tokenizer(cls, tokenizer: Tokenizer, chat: bool = False) -> Vocabulary:
        """The vocabulary of a riftco tokenizer: its stop ids (``stop_ids(chat)``) end a
        document, its other special tokens are never allowed. Cached per tokenizer."""
        key = (id(tokenizer), chat)
        with _CACHE_LOCK:
            found = _VOCABULARIES.get(key)
            if found is not None and found[0]() is tokenizer:
                _VOCABULARIES.move_to_end(key)
                return found[1]
        made = cls(
            tokenizer.vocabulary_bytes(),
            eos_ids=tokenizer.stop_ids(chat),
            special_ids=range(tokenizer.base_vocab_size, tokenizer.vocab_size),
        )
        with _CACHE_LOCK:
            _VOCABULARIES[key] = (weakref.ref(tokenizer), made)
            while len(_VOCABULARIES) > _MAX_CACHED_VOCABULARIES:
                _VOCABULARIES.popitem(last=False)
        return made

    def _insert(self, token_id: int, data: bytes) -> None:
        at = 0
        children = self.children
        for byte in data:
            nxt = children[at].get(byte)
            if nxt is None:
                nxt = len(children)
                children[at][byte] = nxt
                children.append({})
                self.tokens.append([])
            at = nxt
        self.tokens[at].append(token_id)


_CACHE_LOCK = threading.Lock()
_VOCABULARIES: OrderedDict[tuple[int, bool], tuple[weakref.ref[Any], Vocabulary]] = OrderedDict()
_MAX_CACHED_VOCABULARIES = 8


class TokenGrammar:
    """A compiled grammar over one vocabulary; :meth:`start` begins a document.

    A grammar's caches are not locked: use one grammar (and its states) from one
    thread at a time, e.g. one per request.
    """

    def __init__(
        self,
        graph: Graph,
        root: int,
        vocabulary: Vocabulary,
        *,
        limits: GrammarLimits | None = None,
    ) -> None:
        limits = GrammarLimits() if limits is None else limits
        self.limits = limits
        self.vocabulary = vocabulary
        self.vocab_size = vocabulary.size
        self.eos_ids = vocabulary.eos_ids
        self._token_bytes = vocabulary.token_bytes
        self._children = vocabulary.children
        self._tokens = vocabulary.tokens
        self._excluded = vocabulary.excluded
        self._strings = vocabulary.string_tables
        self.automaton = ByteAutomaton(
            graph, root, limits.max_depth, limits.max_stacks, limits.max_states
        )
        self._masks: OrderedDict[int, np.ndarray] = OrderedDict()
        self._relative: OrderedDict[int, tuple[np.ndarray, list[int]]] = OrderedDict()
        self._after_strings: OrderedDict[tuple[int, int], tuple] = OrderedDict()
        self._mask_generation = self.automaton.generation
        self._max_masks = max(1, limits.mask_cache_bytes // max(1, (self.vocab_size + 7) // 8))
        self._max_after = max(1, limits.mask_cache_bytes // (5 * max(1, self.vocab_size)))
        first = self.start()
        if not first.allowed().any():
            raise GrammarError("the vocabulary has no token that can begin a document")

    @classmethod
    def compile(
        cls,
        schema: Mapping[str, Any] | bool | None,
        vocabulary: Sequence[bytes] | Vocabulary,
        *,
        eos_ids: Iterable[int] | None = None,
        special_ids: Iterable[int] = (),
        limits: GrammarLimits | None = None,
        max_whitespace: int = DEFAULT_MAX_WHITESPACE,
    ) -> TokenGrammar:
        """The grammar of documents valid against ``schema``; ``None`` is any JSON object.

        ``vocabulary[i]`` is the bytes token ``i`` stands for; ``eos_ids`` end the
        output (allowed once the document is complete); ``special_ids`` are never
        allowed. A prepared :class:`Vocabulary` (which carries its own ids) saves
        building its trie again. Raises :class:`SchemaError` (and its
        :class:`GrammarLimitError`) for a schema outside the subset or the limits.
        """
        limits = GrammarLimits() if limits is None else limits
        if not isinstance(max_whitespace, int) or max_whitespace < 0:
            raise GrammarError(
                f"max_whitespace: expected a non-negative int; found {max_whitespace!r}"
            )
        if not isinstance(vocabulary, Vocabulary):
            if eos_ids is None:
                raise GrammarError("eos_ids: expected the ids that end a document; found none")
            vocabulary = Vocabulary(vocabulary, eos_ids=eos_ids, special_ids=special_ids)
        elif eos_ids is not None:
            raise GrammarError("eos_ids: a Vocabulary carries its own; pass it there")
        graph, root = compile_schema(schema, limits, max_whitespace)
        return cls(graph, root, vocabulary, limits=limits)

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
            Vocabulary.of_tokenizer(tokenizer, chat),
            limits=limits,
            max_whitespace=max_whitespace,
        )

    def start(self) -> GrammarState:
        """A state before the first token of a document."""
        return GrammarState(self, self.automaton.start_config)

    # -- used by GrammarState ----------------------------------------------------

    def _state_id(self, config: Config) -> int:
        automaton = self.automaton
        if automaton.trim() or self._mask_generation != automaton.generation:
            self._masks.clear()
            self._relative.clear()
            self._after_strings.clear()
            self._mask_generation = automaton.generation
        return automaton.intern(config)

    def _mask(self, state: int) -> np.ndarray:
        packed = self._masks.get(state)
        if packed is not None:
            self._masks.move_to_end(state)
            return np.unpackbits(packed, count=self.vocab_size).view(np.bool_)
        automaton = self.automaton
        nodes = automaton.graph.nodes
        mask = np.zeros(self.vocab_size, dtype=np.bool_)
        shallow = []
        for stack in automaton.configs[state]:
            node_id, sub = stack[-1]
            node = nodes[node_id]
            if isinstance(node, String) and sub[0] not in (String.OPEN, String.DONE):
                self._string_into(mask, stack, node)
            elif len(stack) == 1:
                shallow.append(stack)
            else:
                self._stack_into(mask, stack, 0)
        if shallow:
            allowed, _ = self._walk(automaton.intern(frozenset(shallow)), 0)
            mask[allowed] = True
        if automaton.accepting(state):
            mask[list(self.eos_ids)] = True
        self._masks[state] = np.packbits(mask)
        if len(self._masks) > self._max_masks:
            self._masks.popitem(last=False)
        return mask

    def _stack_into(self, mask: np.ndarray, stack: Stack, at: int) -> None:
        """Mark the tokens (under trie node ``at``) that one stack can read.

        The top frame is walked alone (over its context, see ``ByteAutomaton.relative``):
        what it reads without returning is the same wherever the frame sits, so from the
        trie root that part is cached per top frame and depth. Where the walk returns
        into the context, the frames below continue from that trie node.
        """
        automaton = self.automaton
        if len(stack) == 1:
            allowed, _ = self._walk(automaton.intern(frozenset({stack})), at)
            mask[allowed] = True
            return
        relative = automaton.relative(stack)
        if at == 0:
            entry = self._relative.get(relative)
            if entry is None:
                allowed, returns = self._walk(relative, 0)
                part = np.zeros(self.vocab_size, dtype=np.bool_)
                part[allowed] = True
                entry = (np.packbits(part), returns)
                self._relative[relative] = entry
                if len(self._relative) > self._max_masks:
                    self._relative.popitem(last=False)
            else:
                self._relative.move_to_end(relative)
            mask |= np.unpackbits(entry[0], count=self.vocab_size).view(np.bool_)
            returns = entry[1]
        else:
            allowed, returns = self._walk(relative, at)
            mask[allowed] = True
        below = stack[:-1]
        for node in returns:
            self._stack_into(mask, below, node)

    def _string_into(self, mask: np.ndarray, stack: Stack, node: String) -> None:
        """Mark the tokens a stack whose top is inside a string can read.

        What a string reads depends on its count of characters only through its
        length bounds, so one table per string phase (shared by every string node,
        position and depth) holds each token's verdict for an unbounded string, how
        many characters it adds, and whether it closes the string; the bounds are
        then a comparison over the vocabulary. After the closing quote the frames
        below continue, from the trie nodes the table lists.
        """
        phase, count = stack[-1][1]
        table = self._strings.get(phase)
        if table is None:
            table = self._strings[phase] = self._string_table(phase)
        allowed, chars, closes, returns = table
        low, high = node.min_length, node.max_length
        ok = allowed
        if high is not None:
            ok = ok & (chars <= high - count)
        if low > count:
            ok = ok & (~closes | (chars >= low - count))
        mask |= ok
        if len(stack) == 1:  # a document that is a string ends at its quote
            return
        below = stack[:-1]
        automaton = self.automaton
        context = (
            automaton.relative(below) if len(below) > 1 else automaton.intern(frozenset({below}))
        )
        key = (context, phase)
        entry = self._after_strings.get(key)
        if entry is None:
            entry = self._after_strings[key] = self._after_string(context, returns)
            if len(self._after_strings) > self._max_after:
                self._after_strings.popitem(last=False)
        else:
            self._after_strings.move_to_end(key)
        after, after_chars, deeper = entry
        ok = after
        if high is not None:
            ok = ok & (after_chars <= high - count)
        if low > count:
            ok = ok & (after_chars >= low - count)
        mask |= ok
        for at, added in deeper:
            if count + added >= low and (high is None or count + added <= high):
                self._stack_into(mask, below[:-1], at)

    def _after_string(
        self, context: int, returns: list[tuple[int, int]]
    ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
        """What the frame below a string reads after the closing quote, from every
        trie node a string table returns at: each token with the characters its string
        part had, and where the walk returns further down."""
        after = np.zeros(self.vocab_size, dtype=np.bool_)
        chars = np.zeros(self.vocab_size, dtype=np.int32)
        deeper: list[tuple[int, int]] = []
        for at, added in returns:
            allowed, further = self._walk(context, at)
            if allowed:
                after[allowed] = True
                chars[allowed] = added
            deeper += [(node, added) for node in further]
        return after, chars, deeper

    def _string_table(self, phase: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
        automaton = self.automaton
        free = automaton.graph.free_string
        start = automaton.intern(frozenset({((-1, ()), (free, (phase, 0)))}))
        allowed = np.zeros(self.vocab_size, dtype=np.bool_)
        chars = np.zeros(self.vocab_size, dtype=np.int32)
        closes = np.zeros(self.vocab_size, dtype=np.bool_)
        returns: list[tuple[int, int]] = []
        transitions = automaton.transitions
        step = automaton.step
        children = self._children
        tokens = self._tokens
        body: dict[int, bool] = {}
        todo = [(0, start, 0)]
        while todo:
            node, current, count = todo.pop()
            in_body = body.get(current)
            if in_body is None:
                (stack,) = automaton.configs[current]
                in_body = body[current] = stack[-1][1][0] == String.BODY
            row = transitions[current]
            for byte, child in children[node].items():
                nxt = row.get(byte)
                if nxt is None:
                    nxt = step(current, byte)
                if nxt == DEAD:
                    continue
                closing = in_body and byte == 0x22
                added = count + (in_body and not closing)
                found = tokens[child]
                if found:
                    allowed[found] = True
                    chars[found] = added
                    closes[found] = closing
                if children[child]:
                    if closing:
                        returns.append((child, added))
                    else:
                        todo.append((child, nxt, added))
        return allowed, chars, closes, returns

    def _walk(self, state: int, at: int) -> tuple[list[int], list[int]]:
        """Tokens below trie node ``at`` that ``state`` can read, and the trie nodes
        (with children) where a relative state returns into its context."""
        automaton = self.automaton
        transitions = automaton.transitions
        step = automaton.step
        underflows = automaton.underflows
        children = self._children
        tokens = self._tokens
        allowed: list[int] = []
        returns: list[int] = []
        if underflows(state) and children[at]:
            returns.append(at)
        todo = [(at, state)]
        while todo:
            node, current = todo.pop()
            row = transitions[current]
            for byte, child in children[node].items():
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
                    if underflows(nxt):
                        returns.append(child)
        return allowed, returns

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
