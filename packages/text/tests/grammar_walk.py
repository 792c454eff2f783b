"""Helpers for the grammar tests: a small vocabulary and a random walk to completion."""

from __future__ import annotations

import random

from riftco.text.grammar import GrammarState

# Every byte, a few multi-byte tokens that cross JSON structure, two specials.
PIECES = [
    b'{"',
    b'":',
    b'": ',
    b'","',
    b'"}',
    b"},",
    b"}]",
    b'"]',
    b"true",
    b"null",
    b"12",
    b", ",
    b"\n  ",
    b'\\"',
    b"\\u00e9",
    "é".encode(),
    b'a"',
    b'", "',
    b'[{"',
    b"0.5",
    b"-1",
    b"e+",
]
VOCAB = [bytes([i]) for i in range(256)] + PIECES + [b"<|endoftext|>", b"<|user|>"]
EOS = len(VOCAB) - 2
SPECIAL = len(VOCAB) - 1

# Bytes that move a document towards its end, in order of preference.
FINISH = [b'"', b"}", b"]", b"0", b"a", b"[", b"{", b"n"]


def walk(state: GrammarState, rng: random.Random, vocab=VOCAB, eos=EOS, budget=60) -> bytes:
    """Random allowed tokens for ``budget`` steps, then the ones that finish soonest."""
    ends = {eos} if isinstance(eos, int) else set(eos)
    out = b""
    for step in range(budget + 400):
        allowed = state.allowed().nonzero()[0].tolist()
        assert allowed, f"no token allowed after {out!r}"
        choices = [i for i in allowed if i not in ends]
        if len(choices) < len(allowed) and (step >= budget or rng.random() < 0.1 or not choices):
            state.advance(min(set(allowed) & ends))
            return out
        if step < budget:
            token = rng.choice(choices)
        else:
            token = _finishing(choices, vocab, rng)
        state.advance(token)
        out += vocab[token]
    raise AssertionError(f"the walk did not finish: {out[-200:]!r}")


def _finishing(choices: list[int], vocab, rng: random.Random) -> int:
    by_bytes = {vocab[i]: i for i in choices}
    for data in FINISH if rng.random() < 0.7 else ():  # sometimes a random byte: patterns
        if data in by_bytes:
            return by_bytes[data]
    singles = [i for i in choices if len(vocab[i]) == 1]
    return rng.choice(singles or choices)
