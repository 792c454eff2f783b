"""A small regular-expression subset for JSON Schema's ``pattern``, as a DFA over code points.

Supported: literal characters and escapes (``\\t \\n \\r \\f \\v \\0 \\xHH \\uHHHH``,
escaped punctuation), ``.`` (any character but line terminators), classes
``[...]`` and ``[^...]`` with ranges, ``\\d \\w \\s`` and their negations (ASCII
meanings, as in ECMAScript without the ``u`` flag's Unicode classes), groups
``(...)`` and ``(?:...)``, ``|``, the quantifiers ``? * + {m} {m,} {m,n}`` (lazy
forms mean the same language), ``^`` at the start and ``$`` at the end. Anything
else (backreferences, lookaround, word boundaries, anchors elsewhere) is refused.

Where ECMAScript and Python (which ``jsonschema`` uses) read a class differently,
the generated set is the part both accept: ``\\d \\w \\s`` are ASCII, and their
negations, like a negated class that contains one, are ASCII too (Python's
``\\D`` excludes the world's other digits, ECMAScript's does not).

A generated string matches the *whole* pattern, anchored or not: an unanchored
pattern is satisfied by any string containing a match, and a whole match is one.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from riftco.text.grammar.errors import GrammarLimitError, SchemaError

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
LINE_TERMINATORS = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]
DIGIT = [(0x30, 0x39)]
WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
SPACE = [(0x09, 0x0D), (0x20, 0x20)]  # ASCII: what ECMAScript and Python both call space
SIMPLE_ESCAPES = {"t": 0x09, "n": 0x0A, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00}
MAX_PATTERN_CHARS = 1000
MAX_NFA_STATES = 20_000

Ranges = list[tuple[int, int]]


def _normalize(ranges: Ranges) -> Ranges:
    """Sorted, merged, surrogates removed."""
    out: Ranges = []
    for lo, hi in sorted(ranges):
        for a, b in ((lo, min(hi, SURROGATES[0] - 1)), (max(lo, SURROGATES[1] + 1), hi)):
            if a > b:
                continue
            if out and a <= out[-1][1] + 1:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
    return out


def _complement(ranges: Ranges) -> Ranges:
    out: Ranges = []
    at = 0
    for lo, hi in _normalize(ranges):
        if lo > at:
            out.append((at, lo - 1))
        at = hi + 1
    if at <= MAX_CODE_POINT:
        out.append((at, MAX_CODE_POINT))
    return _normalize(out)


def _ascii(ranges: Ranges) -> Ranges:
    return [(lo, min(hi, 0x7F)) for lo, hi in ranges if lo <= 0x7F]


class _Parser:
    def __init__(self, pattern: str, fail: type[SchemaError], path: str) -> None:
        self.text = pattern
        self.at = 0
        self.fail = fail
        self.path = path
        self.narrow = False

    def error(self, what: str) -> SchemaError:
        return self.fail(
            f"pattern {self.text!r:.80}: {what} at offset {self.at}",
            keyword="pattern",
            path=self.path,
        )

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        if not char:
            raise self.error("unexpected end")
        self.at += 1
        return char

    # grammar: alternation := concat ('|' concat)*; concat := repeat*; repeat := atom quantifier?
    def alternation(self) -> tuple:
        branches = [self.concat()]
        while self.peek() == "|":
            self.at += 1
            branches.append(self.concat())
        return ("alt", branches) if len(branches) > 1 else branches[0]

    def concat(self) -> tuple:
        items = []
        while self.peek() and self.peek() not in "|)":
            items.append(self.repeat())
        return ("seq", items)

    def repeat(self) -> tuple:
        atom = self.atom()
        char = self.peek()
        if char in ("*", "+", "?"):
            self.at += 1
            counts: dict[str, tuple[int, int | None]] = {
                "*": (0, None),
                "+": (1, None),
                "?": (0, 1),
            }
            low, high = counts[char]
        elif char == "{" and self._counted():
            low, high = self._counts()
        else:
            return atom
        if self.peek() == "?":  # lazy: the same language
            self.at += 1
        if self.peek() in ("*", "+", "?", "{") and self.peek():
            if self.peek() != "{" or self._counted():
                raise self.error("a quantifier after a quantifier")
        return ("repeat", atom, low, high)

    def _counted(self) -> bool:
        rest = self.text[self.at :]
        close = rest.find("}")
        body = rest[1:close] if close > 0 else ""
        parts = body.split(",")
        return (
            close > 0
            and len(parts) <= 2
            and parts[0].isdigit()
            and all(p.isdigit() or p == "" for p in parts[1:])
        )

    def _counts(self) -> tuple[int, int | None]:
        close = self.text.index("}", self.at)
        body = self.text[self.at + 1 : close]
        self.at = close + 1
        high: int | None
        if "," not in body:
            low = high = int(body)
        else:
            first, second = body.split(",")
            low, high = int(first), (int(second) if second else None)
        if high is not None and high < low:
            raise self.error(f"{{{body}}}: the larger count comes first")
        if low > 1000 or (high or 0) > 1000:
            raise self.error(f"{{{body}}}: counts above 1000")
        return low, high

    def atom(self) -> tuple:
        char = self.take()
        if char == "(":
            if self.text.startswith("?:", self.at):
                self.at += 2
            elif self.peek() == "?":
                raise self.error("lookaround and named groups are not supported")
            inner = self.alternation()
            if self.take() != ")":
                raise self.error("expected )")
            return inner
        if char == "[":
            return ("set", self._class())
        if char == ".":
            return ("set", _complement(LINE_TERMINATORS))
        if char == "\\":
            return ("set", self._escape(in_class=False))
        if char in "^$":
            raise self.error(f"{char} anchors only at the start (^) and the end ($)")
        if char in ")*+?{}|":
            if char in "{}" and not (char == "{" and self._counted()):
                return ("set", [(ord(char), ord(char))])
            raise self.error(f"unexpected {char!r}")
        return ("set", [(ord(char), ord(char))])

    def _escape(self, in_class: bool) -> Ranges:
        char = self.take()
        shorthands = {"d": DIGIT, "w": WORD, "s": SPACE}
        if char in shorthands:
            self.narrow = True
            return shorthands[char]
        if char.lower() in shorthands:
            self.narrow = True
            return _ascii(_complement(shorthands[char.lower()]))
        if char in SIMPLE_ESCAPES:
            value = SIMPLE_ESCAPES[char]
            return [(value, value)]
        if char in "xu":
            digits = 2 if char == "x" else 4
            code = self.text[self.at : self.at + digits]
            if len(code) != digits or any(c not in "0123456789abcdefABCDEF" for c in code):
                raise self.error(f"\\{char} needs {digits} hex digits")
            self.at += digits
            value = int(code, 16)
            return [(value, value)]
        if char == "b" and in_class:
            return [(0x08, 0x08)]
        if char.isalnum():
            raise self.error(f"\\{char} is not supported")
        return [(ord(char), ord(char))]

    def _class(self) -> Ranges:
        negate = self.peek() == "^"
        if negate:
            self.at += 1
        self.narrow = False
        ranges: Ranges = []
        first = True
        while True:
            char = self.take()
            if char == "]" and not first:
                break
            first = False
            if char == "\\":
                item = self._escape(in_class=True)
            else:
                item = [(ord(char), ord(char))]
            if self.peek() == "-" and self.text[self.at + 1 : self.at + 2] not in ("]", ""):
                if len(item) != 1 or item[0][0] != item[0][1]:
                    raise self.error("a range from a class shorthand")
                self.at += 1
                end_char = self.take()
                end = self._escape(in_class=True) if end_char == "\\" else [(ord(end_char),) * 2]
                if len(end) != 1 or end[0][0] != end[0][1] or end[0][0] < item[0][0]:
                    raise self.error("a bad range")
                item = [(item[0][0], end[0][0])]
            ranges += item
        if negate:
            out = _complement(ranges)
            return _ascii(out) if self.narrow else out
        return _normalize(ranges)


class _Nfa:
    def __init__(self, fail: type[SchemaError], path: str) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[int, int, int]]] = []
        self.fail = fail
        self.path = path

    def state(self) -> int:
        if len(self.eps) >= MAX_NFA_STATES:
            raise GrammarLimitError(
                f"pattern: expands to more than {MAX_NFA_STATES} automaton states",
                keyword="pattern",
                path=self.path,
            )
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def build(self, node: tuple) -> tuple[int, int]:
        """A fragment ``(start, end)`` for ``node``."""
        kind = node[0]
        if kind == "set":
            start, end = self.state(), self.state()
            for lo, hi in _normalize(node[1]):
                self.edges[start].append((lo, hi, end))
            return start, end
        if kind == "seq":
            start = end = self.state()
            for item in node[1]:
                a, b = self.build(item)
                self.eps[end].append(a)
                end = b
            return start, end
        if kind == "alt":
            start, end = self.state(), self.state()
            for branch in node[1]:
                a, b = self.build(branch)
                self.eps[start].append(a)
                self.eps[b].append(end)
            return start, end
        _, atom, low, high = node
        start = end = self.state()
        for _ in range(low):
            a, b = self.build(atom)
            self.eps[end].append(a)
            end = b
        if high is None:
            a, b = self.build(atom)
            self.eps[end].append(a)
            self.eps[b].append(a)
            out = self.state()
            self.eps[end].append(out)
            self.eps[b].append(out)
            return start, out
        for _ in range(high - low):
            a, b = self.build(atom)
            out = self.state()
            self.eps[end].append(a)
            self.eps[end].append(out)
            self.eps[b].append(out)
            end = out
        return start, end

    def closure(self, states: set[int]) -> frozenset[int]:
        todo = list(states)
        seen = set(states)
        while todo:
            for nxt in self.eps[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return frozenset(seen)


INF = 1 << 30


@dataclass
class Dfa:
    """A DFA over code points: intervals ``starts`` partition the code points; every
    state can still reach an accepting one (transitions to others are removed)."""

    starts: list[int]
    table: list[list[int]]  # table[state][interval] -> state or -1
    accepting: list[bool]
    shortest: list[int]  # fewest characters from a state to acceptance
    longest: list[int]  # most characters (INF past a cycle)

    def next(self, state: int, code: int) -> int:
        return self.table[state][bisect_right(self.starts, code) - 1]

    def lengths(self, limit: int) -> list[int]:
        """Per state, the bit set of the numbers of characters (up to ``limit``) that
        lead from it to acceptance."""
        mask = (1 << (limit + 1)) - 1
        reach = [int(a) for a in self.accepting]
        for _ in range(limit + 1):
            changed = False
            for state, row in enumerate(self.table):
                bits = reach[state]
                for target in set(row):
                    if target >= 0:
                        bits |= (reach[target] << 1) & mask
                if bits != reach[state]:
                    reach[state] = bits
                    changed = True
            if not changed:
                break
        return reach


def compile_pattern(pattern: str, max_states: int, path: str = "#") -> Dfa:
    """The DFA of strings that wholly match ``pattern`` (the subset above)."""
    if not isinstance(pattern, str):
        raise SchemaError("pattern: expected a string", keyword="pattern", path=path)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise GrammarLimitError(
            f"pattern: expected at most {MAX_PATTERN_CHARS} characters; found {len(pattern)}",
            keyword="pattern",
            path=path,
        )
    body = pattern[1:] if pattern.startswith("^") else pattern
    if body.endswith("$") and not body.endswith("\\$"):
        body = body[:-1]
    parser = _Parser(body, SchemaError, path)
    tree = parser.alternation()
    if parser.at != len(body):
        raise parser.error("unbalanced )")
    nfa = _Nfa(SchemaError, path)
    start, end = nfa.build(tree)
    points = {0, MAX_CODE_POINT + 1}
    for edges in nfa.edges:
        for lo, hi, _ in edges:
            points.add(lo)
            points.add(hi + 1)
    starts = sorted(points)[:-1]
    first = nfa.closure({start})
    ids = {first: 0}
    order = [first]
    table: list[list[int]] = []
    index = 0
    while index < len(order):
        current = order[index]
        index += 1
        row = []
        targets: list[set[int]] = [set() for _ in starts]
        for state in current:
            for lo, hi, nxt in nfa.edges[state]:
                k = bisect_right(starts, lo) - 1
                while k < len(starts) and starts[k] <= hi:
                    targets[k].add(nxt)
                    k += 1
        for target in targets:
            if not target:
                row.append(-1)
                continue
            closed = nfa.closure(target)
            found = ids.get(closed)
            if found is None:
                if len(order) >= max_states:
                    raise GrammarLimitError(
                        f"pattern {pattern!r:.80}: more than {max_states} automaton states "
                        "(GrammarLimits.max_pattern_states)",
                        keyword="pattern",
                        path=path,
                    )
                found = ids[closed] = len(order)
                order.append(closed)
            row.append(found)
        table.append(row)
    accepting = [end in states for states in order]
    shortest, longest = _distances(table, accepting)
    if shortest[0] >= INF:
        raise SchemaError(
            f"pattern {pattern!r:.80} matches no string", keyword="pattern", path=path
        )
    for row in table:  # states that cannot reach acceptance are dead ends
        for k, goes in enumerate(row):
            if goes >= 0 and shortest[goes] >= INF:
                row[k] = -1
    return Dfa(starts, table, accepting, shortest, longest)


def _distances(table: list[list[int]], accepting: list[bool]) -> tuple[list[int], list[int]]:
    """Fewest and most characters from each state to acceptance (INF: none / unbounded)."""
    count = len(table)
    reverse: list[set[int]] = [set() for _ in range(count)]
    for state, row in enumerate(table):
        for target in row:
            if target >= 0:
                reverse[target].add(state)
    shortest = [INF] * count
    frontier = [s for s in range(count) if accepting[s]]
    for s in frontier:
        shortest[s] = 0
    while frontier:
        nxt = []
        for s in frontier:
            for p in reverse[s]:
                if shortest[p] >= INF:
                    shortest[p] = shortest[s] + 1
                    nxt.append(p)
        frontier = nxt
    useful = [shortest[s] < INF for s in range(count)]
    successors = [{t for t in row if t >= 0 and useful[t]} for row in table]
    reach: list[set[int]] = []
    for state in range(count):  # states reachable in one step or more
        seen: set[int] = set()
        todo = list(successors[state])
        while todo:
            t = todo.pop()
            if t not in seen:
                seen.add(t)
                todo.extend(successors[t])
        reach.append(seen)
    cyclic = [state in reach[state] for state in range(count)]
    longest = [0] * count
    done = [False] * count

    def visit(state: int) -> int:
        # iterative post-order over the acyclic part
        stack = [(state, iter(sorted(successors[state])))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                best = 0 if accepting[node] else -INF
                for t in successors[node]:
                    best = max(best, longest[t] + 1)
                longest[node] = best
                done[node] = True
            elif not done[child]:
                stack.append((child, iter(sorted(successors[child]))))
        return longest[state]

    for state in range(count):
        if not useful[state]:
            continue
        if cyclic[state] or any(cyclic[t] for t in reach[state]):
            longest[state] = INF
            done[state] = True
    for state in range(count):
        if useful[state] and not done[state]:
            visit(state)
    return shortest, [max(v, 0) if useful[s] else 0 for s, v in enumerate(longest)]
