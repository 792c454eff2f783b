"""The grammar's pushdown automaton over bytes, determinized lazily.

A configuration is a set of stacks (see :mod:`nodes`). Configurations met while
parsing are interned as small integers with a transition table each, so that
reading a byte already read from the same configuration is a dictionary lookup:
the automaton becomes, on the fly, the part of an equivalent DFA that parsing
actually visits. The table is bounded; when it fills up it is dropped and
rebuilt on demand, between operations (a ``GrammarState`` keeps its
configuration, not just its number, and re-interns it after a drop).
"""

from __future__ import annotations

from riftco.text.grammar.errors import GrammarLimitError
from riftco.text.grammar.nodes import Graph, Stack

Config = frozenset[Stack]

DEAD = -1


class ByteAutomaton:
    """Reads bytes from configurations of one grammar; see the module docstring."""

    def __init__(
        self, graph: Graph, root: int, max_depth: int, max_stacks: int, max_states: int
    ) -> None:
        self.graph = graph
        self.root = root
        self.max_depth = max_depth
        self.max_stacks = max_stacks
        self.max_states = max_states
        self.generation = 0
        self._reset()
        start = frozenset((frame,) for frame in graph.enter(root, max_depth))
        self.start_config: Config = start

    def _reset(self) -> None:
        self.generation += 1
        self.edges = 0
        self._ids: dict[Config, int] = {}
        self.configs: list[Config] = []
        self.transitions: list[dict[int, int]] = []
        self._ready: list[list[Stack] | None] = []
        self._accepting: list[bool | None] = []
        self._underflow: list[bool | None] = []

    def intern(self, config: Config) -> int:
        found = self._ids.get(config)
        if found is not None:
            return found
        state = len(self.configs)
        self._ids[config] = state
        self.configs.append(config)
        self.transitions.append({})
        self._ready.append(None)
        self._accepting.append(None)
        self._underflow.append(None)
        return state

    def _close(self, state: int) -> list[Stack]:
        """Every stack reachable by calls and returns, ready to read a byte."""
        ready = self._ready[state]
        if ready is not None:
            return ready
        graph = self.graph
        nodes = graph.nodes
        limit = self.max_depth
        seen: set[Stack] = set()
        out: list[Stack] = []
        accepting = underflow = False
        todo = list(self.configs[state])
        while todo:
            stack = todo.pop()
            if stack in seen:
                continue
            seen.add(stack)
            if len(seen) > 4 * self.max_stacks + 64:  # compile bounds widths; a safety net
                raise GrammarLimitError(
                    f"expected at most {self.max_stacks} parses side by side "
                    "(GrammarLimits.max_stacks); this grammar's unions overlap more",
                    keyword="anyOf",
                )
            node_id, sub = stack[-1]
            if node_id < 0:  # popped into the unknown context of a relative stack
                underflow = True
                continue
            out.append(stack)
            node = nodes[node_id]
            room = limit - len(stack)
            if stack[0][0] < 0:
                room += stack[0][0] + 1
            for ret, child in node.calls(sub, room):
                base = stack[:-1] + ((node_id, ret),)
                for frame in graph.enter(child, room):
                    todo.append(base + (frame,))
            if node.final(sub):
                if len(stack) == 1:
                    accepting = True
                else:
                    todo.append(stack[:-1])
        self._ready[state] = out
        self._accepting[state] = accepting
        self._underflow[state] = underflow
        return out

    def accepting(self, state: int) -> bool:
        self._close(state)
        return bool(self._accepting[state])

    def underflows(self, state: int) -> bool:
        """Whether a relative stack of ``state`` can return into its context here."""
        self._close(state)
        return bool(self._underflow[state])

    def relative(self, stack: Stack) -> int:
        """The state of ``stack``'s top frame alone, over a context of the frames below.

        The context is a pseudo-frame ``(-d, ())`` standing for ``d`` frames (so room
        is counted as in the full stack); returning into it is an *underflow*
        (:meth:`underflows`), after which the full stack's lower frames decide.
        """
        return self.intern(frozenset({((-(len(stack) - 1), ()), stack[-1])}))

    def step(self, state: int, byte: int) -> int:
        """The state after ``byte`` (``DEAD`` if no parse survives)."""
        found = self.transitions[state].get(byte)
        if found is not None:
            return found
        nodes = self.graph.nodes
        limit = self.max_depth
        out: set[Stack] = set()
        for stack in self._close(state):
            node_id, sub = stack[-1]
            room = limit - len(stack)
            if stack[0][0] < 0:
                room += stack[0][0] + 1
            for nsub in nodes[node_id].step(sub, byte, room):
                out.add(stack[:-1] + ((node_id, nsub),))
        result = self.intern(frozenset(out)) if out else DEAD
        self.transitions[state][byte] = result
        self.edges += 1
        return result

    def trim(self) -> bool:
        """Drop the table if it outgrew ``max_states`` (or 64 cached byte transitions per
        state on average); True if it did (state ids are then stale)."""
        if len(self.configs) < self.max_states and self.edges < 64 * self.max_states:
            return False
        self._reset()
        return True
