"""The byte-level automaton: a recursive transition network of JSON value nodes.

A grammar is a list of nodes. A node is one JSON construct (an object with
declared properties, a free-form object, an array, a string, a number, a set of
literal byte strings, a sequence of literals and values, or a union of other
nodes). A running parse is a stack of frames ``(node id, sub-state)``; a node
reads bytes through ``step`` and enters a child value through ``calls`` (an
epsilon move that pushes the child's frame and leaves the parent's frame at its
return point). A frame whose sub-state is ``final`` may pop. Unions never sit on
the stack: a call to a union pushes each of its alternatives, so a parse is a
set of stacks (a union, or an optional property whose key shares a prefix with
the next one, runs its candidates side by side until the bytes tell them apart).

Depth is bounded: every node knows the least number of frames it needs to
finish (its *height*), and a child is entered only if it can finish within
``max_depth`` frames, so every live parse can always be completed.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

INF = 1 << 30

WHITESPACE = frozenset(b" \t\n\r")
DIGITS = frozenset(b"0123456789")
HEX = frozenset(b"0123456789abcdefABCDEF")

# JSON kinds, for oneOf's disjointness check.
OBJECT, ARRAY, STRING, NUMBER, BOOLEAN, NULL = (
    "object",
    "array",
    "string",
    "number",
    "boolean",
    "null",
)

Sub = tuple[int, ...]
Frame = tuple[int, Sub]
Stack = tuple[Frame, ...]

# Digits a generated number may have: long enough for any float or 64-bit
# integer, short enough that a model cannot emit digits forever; the exponent
# stays within two digits so every number is a finite float.
MAX_INT_DIGITS = 20
MAX_FRACTION_DIGITS = 20
MAX_EXPONENT_DIGITS = 2


class Graph:
    """The nodes of one grammar, their heights, and the whitespace rule."""

    def __init__(self, max_whitespace: int) -> None:
        self.nodes: list[Node] = []
        self.heights: list[int] = []
        self.max_whitespace = max_whitespace
        self.free_string = -1  # an unbounded string node, for string mask tables

    def add(self, node: Node) -> int:
        node.graph = self
        self.nodes.append(node)
        return len(self.nodes) - 1

    def alternatives(self, node_id: int) -> list[int]:
        """The concrete nodes a call to ``node_id`` may push (unions flattened)."""
        node = self.nodes[node_id]
        if not isinstance(node, Union):
            return [node_id]
        return node.flat

    def finish(self, max_depth: int, max_width: int) -> None:
        """Flatten unions; compute heights (capped at ``max_depth + 1``: deeper cannot be
        entered anyway), first bytes, and widths (capped at ``max_width + 1``).

        Each is a fixpoint over a worklist; a node's value moves monotonically and at
        most cap times, so the work is bounded by the number of edges times the cap.
        """
        if self.free_string < 0:
            self.free_string = self.add(String())
        nodes = self.nodes
        for node in nodes:
            if isinstance(node, Union):
                node.flat = self._flatten(node)
        parents: list[list[int]] = [[] for _ in nodes]
        for index, node in enumerate(nodes):
            for child in node.children():
                parents[child].append(index)

        heights = [INF] * len(nodes)
        cap = max_depth + 1

        def lower(index: int) -> bool:
            value = nodes[index].height(heights)
            value = INF if value >= INF else min(value, cap)
            if value < heights[index]:
                heights[index] = value
                return True
            return False

        _fixpoint(len(nodes), parents, lower)
        self.heights = heights

        firsts: list[frozenset[int]] = [frozenset()] * len(nodes)

        def grow(index: int) -> bool:
            value = nodes[index].first(firsts)
            if value != firsts[index]:
                firsts[index] = value | firsts[index]
                return True
            return False

        _fixpoint(len(nodes), parents, grow)
        self.firsts = firsts

        widths = [1] * len(nodes)
        most = max_width + 1

        def widen(index: int) -> bool:
            value = min(nodes[index].width(widths, firsts), most)
            if value > widths[index]:
                widths[index] = value
                return True
            return False

        _fixpoint(len(nodes), parents, widen)
        self.widths = widths

    def _flatten(self, union: Union) -> list[int]:
        seen: set[int] = set()
        out: list[int] = []
        todo = list(reversed(union.options))
        while todo:
            node_id = todo.pop()
            if node_id in seen:
                continue
            seen.add(node_id)
            node = self.nodes[node_id]
            if isinstance(node, Union):
                todo.extend(reversed(node.options))
            else:
                out.append(node_id)
        return out

    def fits(self, node_id: int, room: int) -> bool:
        return self.heights[node_id] <= room

    def enter(self, node_id: int, room: int) -> Iterable[Frame]:
        """The frames a call to ``node_id`` pushes when ``room`` frames are left."""
        for alt in self.alternatives(node_id):
            if self.heights[alt] <= room:
                yield alt, self.nodes[alt].start()


def _fixpoint(count: int, parents: list[list[int]], update: Callable[[int], bool]) -> None:
    """Run ``update`` until nothing changes, revisiting the parents of what changed."""
    todo = deque(range(count))
    queued = [True] * count
    while todo:
        index = todo.popleft()
        queued[index] = False
        if update(index):
            for parent in parents[index]:
                if not queued[parent]:
                    queued[parent] = True
                    todo.append(parent)


class Node:
    """One JSON construct; see the module docstring."""

    graph: Graph
    kinds: frozenset[str] = frozenset()

    def start(self) -> Sub:
        raise NotImplementedError

    def step(self, sub: Sub, byte: int, room: int) -> list[Sub]:
        """The sub-states after reading ``byte``; ``room``: frames left above this one."""
        raise NotImplementedError

    def calls(self, sub: Sub, room: int) -> Sequence[tuple[Sub, int]]:
        """``(return sub-state, child node)`` pairs this sub-state may enter."""
        return ()

    def final(self, sub: Sub) -> bool:
        raise NotImplementedError

    def height(self, heights: list[int]) -> int:
        return 1

    def first(self, firsts: list[frozenset[int]]) -> frozenset[int]:
        """The bytes this node's text may begin with."""
        raise NotImplementedError

    def width(self, widths: list[int], firsts: list[frozenset[int]]) -> int:
        """An upper bound on the parses this node keeps side by side (for the limits)."""
        return max((widths[c] for c in self.children()), default=1)

    def children(self) -> list[int]:
        return []

    def _ws(self, ws: int) -> bool:
        return ws < self.graph.max_whitespace


class Union(Node):
    """Any of ``options`` (never on the stack; calls push its alternatives)."""

    def __init__(self, options: list[int]) -> None:
        self.options = options
        self.flat: list[int] = []

    def height(self, heights: list[int]) -> int:
        return min((heights[o] for o in self.options), default=INF)

    def first(self, firsts: list[frozenset[int]]) -> frozenset[int]:
        return frozenset().union(*(firsts[o] for o in self.options))

    def width(self, widths: list[int], firsts: list[frozenset[int]]) -> int:
        # alternatives that begin with different bytes never run side by side
        by_byte: dict[int, int] = {}
        for alt in self.flat:
            for byte in firsts[alt]:
                by_byte[byte] = by_byte.get(byte, 0) + widths[alt]
        return max(by_byte.values(), default=1)

    def children(self) -> list[int]:
        return list(self.options)


class Literals(Node):
    """One of a set of byte strings (``true``, ``null``, an enum's values)."""

    def __init__(self, values: Iterable[bytes], kinds: Iterable[str]) -> None:
        self.next: list[dict[int, int]] = [{}]
        self.terminal: list[bool] = [False]
        self.values = sorted(set(values))
        self.kinds = frozenset(kinds)
        for value in self.values:
            at = 0
            for byte in value:
                nxt = self.next[at].get(byte)
                if nxt is None:
                    nxt = len(self.next)
                    self.next[at][byte] = nxt
                    self.next.append({})
                    self.terminal.append(False)
                at = nxt
            self.terminal[at] = True

    def start(self) -> Sub:
        return (0,)

    def step(self, sub: Sub, byte: int, room: int) -> list[Sub]:
        nxt = self.next[sub[0]].get(byte)
        return [] if nxt is None else [(nxt,)]

    def final(self, sub: Sub) -> bool:
        return self.terminal[sub[0]]

    def height(self, heights: list[int]) -> int:
        return 1 if self.values else INF

    def first(self, firsts: list[frozenset[int]]) -> frozenset[int]:
        return frozenset(self.next[0])


class String(Node):
    """A JSON string of ``min_length`` to ``max_length`` characters (code points).

    Raw bytes must form well-formed UTF-8 (no surrogates, no overlong forms); raw
    control characters are refused as JSON requires; escapes are the JSON ones,
    with ``\\uXXXX`` outside the surrogate range so each escape is one character.
    """

    kinds = frozenset({STRING})
    # phases
    OPEN, BODY, ESCAPE, U1, U2, U2D, U3, U4, DONE = range(9)
    # UTF-8 continuation phases: (low, high) of the next byte and the phase after it
    CONT: ClassVar[dict[int, tuple[int, int, int]]] = {
        10: (0x80, 0xBF, 1),
        11: (0x80, 0xBF, 10),
        12: (0x80, 0xBF, 11),
        13: (0xA0, 0xBF, 10),
        14: (0x80, 0x9F, 10),
        15: (0x90, 0xBF, 11),
        16: (0x80, 0x8F, 11),
    }

    def __init__(self, min_length: int = 0, max_length: int | None = None) -> None:
        self.min_length = min_length
        self.max_length = max_length

    def start(self) -> Sub:
        return (self.OPEN, 0)

    def _more(self, count: int) -> bool:
        return self.max_length is None or count < self.max_length

    def _count(self, count: int) -> int:
        count += 1
        if self.max_length is None:
            count = min(count, self.min_length)
        return count

    def step(self, sub: Sub, byte: int, room: int) -> list[Sub]:
        phase, count = sub
        if phase == self.BODY:
            if byte == 0x22:  # "
                return [(self.DONE, count)] if count >= self.min_length else []
            if not self._more(count):
                return []
            if byte == 0x5C:  # backslash
                return [(self.ESCAPE, self._count(count))]
            if 0x20 <= byte < 0x80:
                return [(self.BODY, self._count(count))]
            lead = _utf8_lead(byte)
            return [] if lead is None else [(lead, self._count(count))]
        if phase == self.OPEN:
            return [(self.BODY, 0)] if byte == 0x22 else []
        if phase == self.ESCAPE:
            if byte in b'"\\/bfnrt':
                return [(self.BODY, count)]
            return [(self.U1, count)] if byte == 0x75 else []  # u
        if phase == self.U1:
            if byte in b"dD":
                return [(self.U2D, count)]
            return [(self.U2, count)] if byte in HEX else []
        if phase == self.U2D:
            return [(self.U3, count)] if byte in b"01234567" else []
        if phase in (self.U2, self.U3):
            return [(phase + 1 if phase == self.U3 else self.U3, count)] if byte in HEX else []
        if phase == self.U4:
            return [(self.BODY, count)] if byte in HEX else []
        if phase in self.CONT:
            low, high, after = self.CONT[phase]
            return [(after, count)] if low <= byte <= high else []
        return []

    def final(self, sub: Sub) -> bool:
        return sub[0] == self.DONE

    def first(self, firsts: list[frozenset[int]]) -> frozenset[int]:
        return frozenset({0x22})


class PatternString(Node):
    """A JSON string whose characters wholly match a pattern's DFA (see ``regex``),
    with ``min_length`` to ``max_length`` characters.

    Bytes are decoded as they come: a character written as UTF-8 or as an escape is
    checked when complete, and while incomplete the code points it may still become
    (a range) must include one the DFA accepts, so no prefix is a dead end.
    """

    kinds = frozenset({STRING})
    OPEN, BODY, ESCAPE, HEX, DONE = 0, 1, 2, 3, 9
    REMAINING: ClassVar[dict[int, int]] = {10: 1, 11: 2, 12: 3, 13: 2, 14: 2, 15: 3, 16: 3}
    # the code points a lead byte may begin, for the leads with a narrowed first byte
    LEAD_RANGES: ClassVar[dict[int, tuple[int, int]]] = {
        0xE0: (0x800, 0xFFF),
        0xED: (0xD000, 0xD7FF),
        0xF0: (0x10000, 0x3FFFF),
        0xF4: (0x100000, 0x10FFFF),
    }
    ESCAPES: ClassVar[dict[int, int]] = {
        0x22: 0x22,
        0x5C: 0x5C,
        0x2F: 0x2F,
        0x62: 0x08,
        0x66: 0x0C,
        0x6E: 0x0A,
        0x72: 0x0D,
        0x74: 0x09,
    }

    def __init__(self, dfa: Any, min_length: int = 0, max_length: int | None = None) -> None:
        self.dfa = dfa
        self.min_length = min_length
        self.max_length = max_length
        self.reach = None if max_length is None else dfa.lengths(max_length)
        self._live: dict[tuple[int, int], tuple[list[int], list[int]]] = {}

    def possible(self) -> bool:
        """Whether some string matches the pattern within the length bounds."""
        return self._good(0, 0)

    def start(self) -> Sub:
        return (self.OPEN, 0, 0, 0, 0)

    def _count(self, count: int) -> int:
        count += 1
        return min(count, self.min_length) if self.max_length is None else count

    def _good(self, state: int, count: int) -> bool:
        """Whether, ``count`` characters in, ``state`` can still end within the bounds."""
        if self.reach is None:
            return bool(self.dfa.longest[state] >= self.min_length - count)
        assert self.max_length is not None
        low, high = max(0, self.min_length - count), self.max_length - count
        return high >= low and (self.reach[state] >> low) & ((1 << (high - low + 1)) - 1) != 0

    def _char(self, count: int, state: int, code: int) -> list[Sub]:
        nxt = self.dfa.next(state, code)
        count = self._count(count)
        if nxt < 0 or not self._good(nxt, count):
            return []
        return [(self.BODY, count, nxt, 0, 0)]

    def _alive(self, state: int, count: int, low: int, high: int) -> bool:
        """Whether a character in ``[low, high]`` may come next (the rest of a partly
        written character can still be one the pattern and the bounds accept)."""
        key = (state, count)
        live = self._live.get(key)
        if live is None:
            dfa = self.dfa
            bounds = [*dfa.starts[1:], 0x110000]
            after = self._count(count)
            starts: list[int] = []
            ends: list[int] = []
            for k, target in enumerate(dfa.table[state]):
                if target >= 0 and self._good(target, after):
                    if ends and dfa.starts[k] == ends[-1] + 1:
                        ends[-1] = bounds[k] - 1
                    else:
                        starts.append(dfa.starts[k])
                        ends.append(bounds[k] - 1)
            live = self._live[key] = (starts, ends)
        starts, ends = live
        index = bisect_right(starts, high) - 1
        return index >= 0 and ends[index] >= low

    def step(self, sub: Sub, byte: int, room: int) -> list[Sub]:
        phase, count, state, value, digits = sub
        dfa = self.dfa
        if phase == self.BODY:
            if byte == 0x22:
                ok = count >= self.min_length and dfa.accepting[state]
                return [(self.DONE, count, state, 0, 0)] if ok else []
            if self.max_length is not None and count >= self.max_length:
                return []
            if byte == 0x5C:  # an escape writes some character of the first plane
                alive = self._alive(state, count, 0, 0xFFFF)
                return [(self.ESCAPE, count, state, 0, 0)] if alive else []
            if 0x20 <= byte < 0x80:
                return self._char(count, state, byte)
            lead = _utf8_lead(byte)
            if lead is None:
                return []
            remaining = self.REMAINING[lead]
            low, high = self.LEAD_RANGES.get(byte, (0, 0))
            prefix = byte & (0x3F >> remaining)
            if not low:
                low, high = prefix << (6 * remaining), ((prefix + 1) << (6 * remaining)) - 1
            return [(lead, count, state, prefix, 0)] if self._alive(state, count, low, high) else []
        if phase == self.OPEN:
            return [(self.BODY, 0, 0, 0, 0)] if byte == 0x22 else []
        if phase == self.ESCAPE:
            if byte in self.ESCAPES:
                return self._char(count, state, self.ESCAPES[byte])
            if byte != 0x75 or not self._alive(state, count, 0, 0xFFFF):
                return []
            return [(self.HEX, count, state, 0, 0)]
        if phase == self.HEX:
            if byte not in HEX:
                return []
            value = value * 16 + int(chr(byte), 16)
            digits += 1
            if digits == 4:
                if 0xD800 <= value <= 0xDFFF:
                    return []
                return self._char(count, state, value)
            low, high = value << (4 * (4 - digits)), ((value + 1) << (4 * (4 - digits))) - 1
            return (
                [(self.HEX, count, state, value, digits)]
                if self._alive(state, count, low, high)
                else []
            )
        if phase in String.CONT:
            low_byte, high_byte, after = String.CONT[phase]
            if not low_byte <= byte <= high_byte:
                return []
            value = (value << 6) | (byte & 0x3F)
            remaining = self.REMAINING[phase] - 1
            if remaining == 0:
                return self._char(count, state, value)
            low, high = value << (6 * remaining), ((value + 1) << (6 * remaining)) - 1
            return [(after, count, state, value, 0)] if self._alive(state, count, low, high) else []
        return []

    def final(self, sub: Sub) -> bool:
        return sub[0] == self.DONE

    def first(self, firsts: list[frozenset[int]]) -> frozenset[int]:
        return frozenset({0x22})


def _utf8_lead(byte: int) -> int | None:
    """The continuation phase after a UTF-8 lead byte (None: not a valid lead)."""
    if 0xC2 <= byte <= 0xDF:
        return 10
    if byte == 0xE0:
        return 13
    if byte == 0xED:
        return 14
    if 0xE1 <= byte <= 0xEF:
        return 11
    if byte == 0xF0:
        return 15
    if 0xF1 <= byte <= 0xF3:
        return 12
    if byte == 0xF4:
        return 16
    return None


class Number(Node):
    """A JSON number (``integer``: no fraction or exponent), of bounded length."""

    kinds = frozenset({NUMBER})
    START, MINUS, INT, ZERO, DOT, FRAC, EXP, EXP_SIGN, EXP_DIGITS = range(9)

    def __init__(self, integer: bool) -> None:
        self.integer = integer

    def start(self) -> Sub:
        return (self.START, 0)

    def step(self, sub: Sub, byte: int, room: int) -> list[Sub]:
        phase, digits = sub
        if phase in (self.START, self.MINUS):
            if byte == 0x30:
                return [(self.ZERO, 1)]
            if 0x31 <= byte <= 0x39:
                return [(self.INT, 1)]
            return [(self.MINUS, 0)] if byte == 0x2D and phase == self.START else []
        if phase == self.INT and byte in DIGITS:
            return [(self.INT, digits + 1)] if digits < MAX_INT_DIGITS else []
        if phase in (self.INT, self.ZERO):
            if self.integer:
                return []
            if byte == 0x2E:
                return [(self.DOT, 0)]
            return [(self.EXP, 0)] if byte in b"eE" else []
        if phase in (self.DOT, self.FRAC):
            if byte in DIGITS:
                return [(self.FRAC, digits + 1)] if digits < MAX_FRACTION_DIGITS else []
            return [(self.EXP, 0)] if phase == self.FRAC and byte in b"eE" else []
        if phase in (self.EXP, self.EXP_SIGN, self.EXP_DIGITS):
            if byte in DIGITS:
                return [(self.EXP_DIGITS, digits + 1)] if digits < MAX_EXPONENT_DIGITS else []
            return [(self.EXP_SIGN, 0)] if phase == self.EXP and byte in b"+-" else []
        return []

    def final(self, sub: Sub) -> bool:
        return sub[0] in (self.INT, self.ZERO, self.FRAC, self.EXP_DIGITS)

    def first(self, firsts: list[frozenset[int]]) -> frozenset[int]:
        return frozenset(b"-0123456789")


class Object(Node):
    """An object with declared properties, written in declaration order.

    ``properties`` holds ``(key, value node, required)`` with ``key`` the property
    name as JSON bytes (quotes included). Required properties always appear;
    optional ones may be left out; no other key is written.
    """

    kinds = frozenset({OBJECT})
    OPEN, FIRST, KEY, COLON, VALUE, AFTER, DONE, NEXT = range(8)

    def __init__(self, properties: list[tuple[bytes, int, bool]]) -> None:
        self.properties = properties
        count = len(properties)
        # optional_from[i]: every property from i on is optional
        self.optional_from = [True] * (count + 1)
        for index in range(count - 1, -1, -1):
            self.optional_from[index] = self.optional_from[index + 1] and not properties[index][2]

    def start(self) -> Sub:
        return (self.OPEN, 0, 0, 0)

    def _candidates(self, first: int, room: int) -> list[Sub]:
        out: list[Sub] = []
        for index in range(first, len(self.properties)):
            _, child, required = self.properties[index]
            if self.graph.fits(child, room):
                out.append((self.KEY, index, 0, 1))
            if required:
                break
        return out

    def step(self, sub: Sub, byte: int, room: int) -> list[Sub]:
        phase, index, ws, offset = sub
        if phase == self.KEY:
            key = self.properties[index][0]
            if byte != key[offset]:
                return []
            if offset + 1 == len(key):
                return [(self.COLON, index, 0, 0)]
            return [(self.KEY, index, 0, offset + 1)]
        if phase == self.OPEN:
            return [(self.FIRST, 0, 0, 0)] if byte == 0x7B else []
        if byte in WHITESPACE:
            return [(phase, index, ws + 1, 0)] if self._ws(ws) and phase != self.DONE else []
        if phase in (self.FIRST, self.NEXT):
            if byte == 0x22:
                return self._candidates(index, room)
            if byte == 0x7D and phase == self.FIRST and self.optional_from[0]:
                return [(self.DONE, 0, 0, 0)]
            return []
        if phase == self.COLON:
            return [(self.VALUE, index, 0, 0)] if byte == 0x3A else []
        if phase == self.AFTER:
            if byte == 0x2C and self._candidates(index + 1, room):
                return [(self.NEXT, index + 1, 0, 0)]
            if byte == 0x7D and self.optional_from[index + 1]:
                return [(self.DONE, 0, 0, 0)]
        return []

    def calls(self, sub: Sub, room: int) -> Sequence[tuple[Sub, int]]:
        if sub[0] == self.VALUE:
            return [((self.AFTER, sub[1], 0, 0), self.properties[sub[1]][1])]
        return ()

    def final(self, sub: Sub) -> bool:
        return sub[0] == self.DONE

    def height(self, heights: list[int]) -> int:
        need = [heights[child] for _, child, required in self.properties if required]
        return 1 + max(need, default=0)

    def first(self, firsts: list[frozenset[int]]) -> frozenset[int]:
        return frozenset({0x7B})

    def width(self, widths: list[int], firsts: list[frozenset[int]]) -> int:
        # optional properties in a row are candidates for the same key at once
        run = most = 1
        for _, _, required in self.properties:
            run = 1 if required else run + 1
            most = max(most, run)
        return max(most, super().width(widths, firsts))

    def children(self) -> list[int]:
        return [child for _, child, _ in self.properties]


class Map(Node):
    """An object with any keys (``key`` node) and values of one node."""

    kinds = frozenset({OBJECT})
    OPEN, FIRST, COLON, VALUE, AFTER, DONE, NEXT = range(7)

    def __init__(self, key: int, value: int) -> None:
        self.key = key
        self.value = value

    def start(self) -> Sub:
        return (self.OPEN, 0)

    def step(self, sub: Sub, byte: int, room: int) -> list[Sub]:
        phase, ws = sub
        if phase == self.OPEN:
            return [(self.FIRST, 0)] if byte == 0x7B else []
        if phase == self.DONE:
            return []
        if byte in WHITESPACE:
            return [(phase, ws + 1)] if self._ws(ws) else []
        if phase == self.FIRST and byte == 0x7D:
            return [(self.DONE, 0)]
        if phase == self.COLON and byte == 0x3A:
            return [(self.VALUE, 0)]
        if phase == self.AFTER:
            if byte == 0x2C and self._entry_fits(room):
                return [(self.NEXT, 0)]
            if byte == 0x7D:
                return [(self.DONE, 0)]
        return []

    def _entry_fits(self, room: int) -> bool:
        return self.graph.fits(self.key, room) and self.graph.fits(self.value, room)

    def calls(self, sub: Sub, room: int) -> Sequence[tuple[Sub, int]]:
        phase = sub[0]
        if phase in (self.FIRST, self.NEXT) and self._entry_fits(room):
            return [((self.COLON, 0), self.key)]
        if phase == self.VALUE:
            return [((self.AFTER, 0), self.value)]
        return ()

    def final(self, sub: Sub) -> bool:
        return sub[0] == self.DONE

    def children(self) -> list[int]:
        return [self.key, self.value]

    def first(self, firsts: list[frozenset[int]]) -> frozenset[int]:
        return frozenset({0x7B})


class List(Node):
    """``open item (sep item)* close`` with ``min_items`` to ``max_items`` items.

    A JSON array is ``List(item, b"[", b",", b"]")`` with whitespace between
    tokens; the tool-call grammar reuses it with other delimiters.
    """

    OPEN, FIRST, AFTER, SEP, NEXT, CLOSE, DONE = range(7)

    def __init__(
        self,
        item: int,
        min_items: int = 0,
        max_items: int | None = None,
        delimiters: tuple[bytes, bytes, bytes] = (b"[", b",", b"]"),
        whitespace: bool = True,
        kinds: Iterable[str] = (ARRAY,),
    ) -> None:
        self.item = item
        self.min_items = min_items
        self.max_items = max_items
        self.open, self.sep, self.close = delimiters
        self.whitespace = whitespace
        self.kinds = frozenset(kinds)

    def start(self) -> Sub:
        return (self.OPEN, 0, 0, 0) if self.open else (self.FIRST, 0, 0, 0)

    def _more(self, count: int) -> bool:
        return self.max_items is None or count < self.max_items

    def _count(self, count: int) -> int:
        count += 1
        return min(count, self.min_items) if self.max_items is None else count

    def _literal(self, text: bytes, phase: int, count: int, offset: int, after: int) -> Sub:
        if offset == len(text):
            return (after, count, 0, 0)
        return (phase, count, 0, offset)

    def step(self, sub: Sub, byte: int, room: int) -> list[Sub]:
        phase, count, ws, offset = sub
        if phase == self.OPEN:
            if byte != self.open[offset]:
                return []
            return [self._literal(self.open, self.OPEN, count, offset + 1, self.FIRST)]
        if phase == self.SEP:
            if byte != self.sep[offset]:
                return []
            return [self._literal(self.sep, self.SEP, count, offset + 1, self.NEXT)]
        if phase == self.CLOSE:
            if byte != self.close[offset]:
                return []
            return [self._literal(self.close, self.CLOSE, count, offset + 1, self.DONE)]
        if phase == self.DONE:
            return []
        if byte in WHITESPACE and self.whitespace:
            return [(phase, count, ws + 1, 0)] if self._ws(ws) else []
        out: list[Sub] = []
        may_close = (phase == self.FIRST and self.min_items == 0) or (
            phase == self.AFTER and count >= self.min_items
        )
        if may_close and self.close and byte == self.close[0]:
            out.append(self._literal(self.close, self.CLOSE, count, 1, self.DONE))
        if (
            phase == self.AFTER
            and self.sep
            and byte == self.sep[0]
            and self._more(count)
            and self.graph.fits(self.item, room)
        ):
            out.append(self._literal(self.sep, self.SEP, count, 1, self.NEXT))
        return out

    def calls(self, sub: Sub, room: int) -> Sequence[tuple[Sub, int]]:
        phase, count = sub[0], sub[1]
        enter = phase in (self.FIRST, self.NEXT) or (phase == self.AFTER and not self.sep)
        if enter and self._more(count):
            return [((self.AFTER, self._count(count), 0, 0), self.item)]
        return ()

    def final(self, sub: Sub) -> bool:
        phase, count = sub[0], sub[1]
        if phase == self.DONE:
            return True
        if self.close:
            return False
        return (phase == self.FIRST and self.min_items == 0) or (
            phase == self.AFTER and count >= self.min_items
        )

    def height(self, heights: list[int]) -> int:
        return 1 + (heights[self.item] if self.min_items > 0 else 0)

    def first(self, firsts: list[frozenset[int]]) -> frozenset[int]:
        out = firsts[self.item] if not self.open else frozenset({self.open[0]})
        if not self.open and self.min_items == 0 and self.close:
            out = out | {self.close[0]}
        return out

    def children(self) -> list[int]:
        return [self.item]


class Sequence_(Node):
    """Literal byte strings and values in a fixed order (a tool call's wrapper)."""

    def __init__(self, parts: list[bytes | int], kinds: Iterable[str] = ()) -> None:
        self.parts = [p for p in parts if not (isinstance(p, bytes) and not p)]
        self.kinds = frozenset(kinds)

    def start(self) -> Sub:
        return (0, 0)

    def step(self, sub: Sub, byte: int, room: int) -> list[Sub]:
        part, offset = sub
        if part >= len(self.parts):
            return []
        text = self.parts[part]
        if not isinstance(text, bytes) or byte != text[offset]:
            return []
        return [(part + 1, 0)] if offset + 1 == len(text) else [(part, offset + 1)]

    def calls(self, sub: Sub, room: int) -> Sequence[tuple[Sub, int]]:
        part = sub[0]
        if part < len(self.parts):
            child = self.parts[part]
            if isinstance(child, int):
                return [((part + 1, 0), child)]
        return ()

    def final(self, sub: Sub) -> bool:
        return sub[0] >= len(self.parts)

    def height(self, heights: list[int]) -> int:
        return 1 + max((heights[p] for p in self.parts if isinstance(p, int)), default=0)

    def first(self, firsts: list[frozenset[int]]) -> frozenset[int]:
        if not self.parts:
            return frozenset()
        head = self.parts[0]
        return frozenset({head[0]}) if isinstance(head, bytes) else firsts[head]

    def children(self) -> list[int]:
        return [p for p in self.parts if isinstance(p, int)]


class Text(Node):
    """Free text in which ``marker`` starts a ``body`` value, after which text resumes.

    Text may end anywhere outside a body. The marker is found the way a string
    search finds it (a failure table), so text without the marker is free; after
    ``max_bodies`` bodies the text may no longer contain the marker.
    """

    def __init__(self, marker: bytes, body: int, max_bodies: int | None = None) -> None:
        self.marker = marker
        self.body = body
        self.max_bodies = max_bodies
        self.table = _failure_table(marker)

    def start(self) -> Sub:
        return (0, 0)

    def step(self, sub: Sub, byte: int, room: int) -> list[Sub]:
        matched, bodies = sub
        if matched == len(self.marker):
            return []
        matched = self.table[matched].get(byte, 0)
        if matched == len(self.marker):
            if self.max_bodies is not None and bodies >= self.max_bodies:
                return []
            if not self.graph.fits(self.body, room):
                return []
        return [(matched, bodies)]

    def calls(self, sub: Sub, room: int) -> Sequence[tuple[Sub, int]]:
        if sub[0] == len(self.marker):
            bodies = sub[1] + 1 if self.max_bodies is not None else 0
            return [((0, bodies), self.body)]
        return ()

    def final(self, sub: Sub) -> bool:
        return sub[0] < len(self.marker)

    def first(self, firsts: list[frozenset[int]]) -> frozenset[int]:
        return frozenset(range(256))

    def children(self) -> list[int]:
        return [self.body]


def _failure_table(marker: bytes) -> list[dict[int, int]]:
    """``table[k][byte]``: bytes of ``marker`` matched after ``byte`` with ``k`` matched."""
    fail = [0] * (len(marker) + 1)
    k = 0
    for i in range(1, len(marker)):
        while k and marker[i] != marker[k]:
            k = fail[k]
        if marker[i] == marker[k]:
            k += 1
        fail[i + 1] = k
    table: list[dict[int, int]] = []
    for matched in range(len(marker)):
        row: dict[int, int] = {}
        for byte in set(marker):
            k = matched
            while k and marker[k] != byte:
                k = fail[k]
            row[byte] = k + 1 if marker[k] == byte else 0
        table.append(row)
    return table
