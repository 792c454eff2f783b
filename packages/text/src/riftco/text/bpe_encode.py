"""BPE encoding: merges applied in learned order, per piece, with a cache.

The contract: apply merge 0 to the whole sequence (non-overlapping, left to
right), then merge 1, and so on. Two facts make that fast without changing it.

A merge creates only pairs that contain its new id, and every merge using that
id has a higher rank. So a piece needs only the ranks present in it, taken in
increasing order, plus those that become present as ids are created (see
:meth:`BpeEncoder.merge_chars`); a merged pair never reappears.

Pieces come from pre-tokenization, or, with ``none``, from cutting the input
between two bytes ``x y`` that no token contains as adjacent bytes: no merge can
produce a token spanning such a cut, and a left-to-right sweep never pairs
across it, so the pieces encode independently to the same ids as the whole.
Those byte pairs are exactly the junctions ``(last byte of left, first byte of
right)`` of the merges.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from heapq import heapify, heappop, heappush
from itertools import repeat
from operator import add

from riftco.text.bpe_train import NUM_BYTES
from riftco.text.pretokenize import GPT2_REGEX

_NO_RANK = 1 << 62
CACHE_LIMIT = 200_000


class BpeEncoder:
    """Encodes bytes with a fixed list of merges; merge ``k`` produces ``256 + k``."""

    def __init__(self, merges: Sequence[tuple[int, int]], pretokenize: str) -> None:
        self.merges = [(int(left), int(right)) for left, right in merges]
        self.pretokenize = pretokenize
        self._pair_chars = [chr(left) + chr(right) for left, right in self.merges]
        self._rank_of = {pair: k for k, pair in enumerate(self._pair_chars)}
        self._new_chars = [chr(NUM_BYTES + k) for k in range(len(self.merges))]
        # the merges that take the id made by merge k as an operand, in rank order
        self._uses: list[list[tuple[int, str]]] = [[] for _ in self.merges]
        for k, (left, right) in enumerate(self.merges):
            for operand in {left, right}:
                if operand >= NUM_BYTES:
                    self._uses[operand - NUM_BYTES].append((k, self._pair_chars[k]))
        self.token_bytes = [bytes([b]) for b in range(NUM_BYTES)]
        for left, right in self.merges:
            self.token_bytes.append(self.token_bytes[left] + self.token_bytes[right])
        self._cut = _cut_pattern(self.merges, self.token_bytes)
        self._cache: dict[str | bytes, list[int]] = {}

    def encode_bytes(self, data: bytes) -> list[int]:
        if self.pretokenize == "gpt2":
            text = data.decode("utf-8", "surrogateescape")  # exact for any bytes
            return self._encode_pieces(GPT2_REGEX.findall(text))
        return self._encode_pieces(self._cut.findall(data))

    def _encode_pieces(self, pieces: list[str] | list[bytes]) -> list[int]:
        cache = self._cache
        if len(cache) > CACHE_LIMIT:
            cache.clear()
        out: list[int] = []
        for piece in pieces:
            ids = cache.get(piece)
            if ids is None:
                raw = (
                    piece if isinstance(piece, bytes) else piece.encode("utf-8", "surrogateescape")
                )
                ids = cache[piece] = list(map(ord, self.merge_chars(raw.decode("latin-1"))))
            out += ids
        return out

    def merge_chars(self, chars: str) -> str:
        """Apply every merge, in learned order, to ids written as characters ``chr(id)``.

        The ranks present are collected with one pass of builtins into a min-heap
        and applied in increasing order with ``str.replace`` (exactly a
        non-overlapping, left-to-right replacement). A pair can only appear when
        one of its ids is created, so after each replacement that fires, the
        merges using the new id that are now present join the heap; their ranks
        are higher than the current one. Every rank present at its turn is thus
        applied, and the result is that of applying all merges in learned order.
        """
        pairs, fresh, uses = self._pair_chars, self._new_chars, self._uses
        heap = list(set(map(self._rank_of.get, map(add, chars, chars[1:]), repeat(_NO_RANK))))
        heapify(heap)
        last = -1
        while heap:
            rank = heappop(heap)
            if rank == last:
                continue
            if rank == _NO_RANK:
                break
            last = rank
            size = len(chars)
            chars = chars.replace(pairs[rank], fresh[rank])
            if len(chars) != size:
                for use, pair in uses[rank]:
                    if pair in chars:
                        heappush(heap, use)
        return chars


def _cut_pattern(merges: list[tuple[int, int]], token_bytes: list[bytes]) -> re.Pattern[bytes]:
    """A pattern whose matches are the pieces between safe cuts (see the module doc)."""
    followers: dict[int, set[int]] = {}
    for left, right in merges:
        followers.setdefault(token_bytes[left][-1], set()).add(token_bytes[right][0])
    branches = [
        re.escape(bytes([x]))
        + b"(?=["
        + b"".join(re.escape(bytes([y])) for y in sorted(ys))
        + b"])"
        for x, ys in followers.items()  # earliest merges first: the most frequent bytes
    ]
    if not branches:
        return re.compile(b".", re.DOTALL)
    return re.compile(b"(?:" + b"|".join(branches) + b")*.", re.DOTALL)
