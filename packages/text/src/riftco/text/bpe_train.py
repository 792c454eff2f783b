"""Fast BPE training: incremental pair counts over a linked list of positions.

The corpus is a list of chunks with weights (how often each chunk occurs); merges
never cross chunk ends. Every adjacent pair is counted, overlapping occurrences
included, and each count is weighted by its chunk's weight. A merge step takes
the pair with the highest count, ties going to the smallest ``(left, right)``,
and replaces its occurrences non-overlapping, left to right. Instead of
recounting, each replaced occurrence adjusts the counts of the pairs around it,
and a position index per pair lists where that pair may occur, so a step costs
time in proportion to the occurrences it replaces. A lazy max-heap of
``(-count, pair)`` finds the best pair; an entry whose count is out of date is
dropped when it surfaces.

Once a pair has been merged it never occurs again: new adjacencies always
contain the newest id, which is larger than any operand of an earlier merge.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable

ID_BITS = 20
MAX_ID = 1 << ID_BITS  # pairs are packed as left << ID_BITS | right
_RIGHT = MAX_ID - 1
NUM_BYTES = 256


def train_merges(
    chunks: Iterable[tuple[bytes, int]], num_merges: int, min_pair_frequency: int
) -> list[tuple[int, int]]:
    """Learn up to ``num_merges`` merges; merge ``k`` produces id ``256 + k``."""
    tokens: list[int] = []
    weight: list[int] = []
    ends: list[int] = []
    for chunk, count in chunks:
        if chunk:
            tokens.extend(chunk)
            weight.extend([count] * len(chunk))
            ends.append(len(tokens) - 1)
    n = len(tokens)
    nxt = list(range(1, n + 1))
    prv = list(range(-1, n - 1))
    for end in ends:
        nxt[end] = -1
        if end + 1 < n:
            prv[end + 1] = -1

    counts, where = _index_pairs(tokens, weight, nxt)
    heap = [(-count, key) for key, count in counts.items()]
    heapq.heapify(heap)
    merges: list[tuple[int, int]] = []
    while heap and len(merges) < num_merges:
        neg, key = heapq.heappop(heap)
        if counts.get(key) != -neg:
            continue  # out of date
        if -neg < min_pair_frequency:
            break
        new = NUM_BYTES + len(merges)
        left, right = key >> ID_BITS, key & _RIGHT
        changed = _apply_merge(
            left, right, new, sorted(set(where.pop(key))), tokens, weight, nxt, prv, counts, where
        )
        del counts[key]
        changed.discard(key)
        for other in changed:
            count = counts[other]
            if count > 0:
                heapq.heappush(heap, (-count, other))
            else:
                del counts[other]
        merges.append((left, right))
    return merges


def _index_pairs(
    tokens: list[int], weight: list[int], nxt: list[int]
) -> tuple[defaultdict[int, int], defaultdict[int, list[int]]]:
    counts: defaultdict[int, int] = defaultdict(int)
    where: defaultdict[int, list[int]] = defaultdict(list)
    for i, j in enumerate(nxt):
        if j >= 0:
            key = tokens[i] << ID_BITS | tokens[j]
            counts[key] += weight[i]
            where[key].append(i)
    return counts, where


def _apply_merge(
    left: int,
    right: int,
    new: int,
    positions: list[int],
    tokens: list[int],
    weight: list[int],
    nxt: list[int],
    prv: list[int],
    counts: defaultdict[int, int],
    where: defaultdict[int, list[int]],
) -> set[int]:
    """Replace the occurrences at ``positions`` (ascending); return the pairs touched."""
    changed: set[int] = set()
    for i in positions:
        if tokens[i] != left:
            continue
        j = nxt[i]
        if j < 0 or tokens[j] != right:
            continue  # stale, or consumed by the occurrence just before it
        w = weight[i]
        p = prv[i]
        if p >= 0:
            before = tokens[p] << ID_BITS
            old, fresh = before | left, before | new
            counts[old] -= w
            counts[fresh] += w
            where[fresh].append(p)
            changed.add(old)
            changed.add(fresh)
        k = nxt[j]
        if k >= 0:
            after = tokens[k]
            old, fresh = right << ID_BITS | after, new << ID_BITS | after
            counts[old] -= w
            counts[fresh] += w
            where[fresh].append(i)
            changed.add(old)
            changed.add(fresh)
            prv[k] = i
        tokens[i] = new
        tokens[j] = -1
        nxt[i] = k
    return changed
