"""Fitting a chat into the context: drop the oldest turns, keep the system prompt.

A request opts in (``truncation: "auto"``; the chat page always does). The
system messages stay; the other turns are dropped oldest first, so that what
remains starts at a user turn and leaves room for a reply. The newest message is
always kept: when it and the system prompt alone do not fit, the request fails
as one without truncation would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from riftco.serve.engine import ChatMessage
from riftco.serve.errors import RequestError


def reply_room(context: int, max_new_tokens: int) -> int:
    """Tokens kept free for the reply when turns are dropped: ``max_new_tokens``, at
    most a quarter of the context (generation slides its window past that)."""
    return max(0, min(max_new_tokens, context // 4))


def fit_chat(
    messages: Sequence[ChatMessage],
    encode: Callable[[Sequence[ChatMessage]], list[int]],
    context: int,
    max_new_tokens: int,
) -> tuple[list[int], int]:
    """The prompt ids of the newest turns that fit, and how many messages were dropped.

    A chat whose prompt fits ``context - reply_room(...)`` is kept whole. Otherwise the
    longest suffix of non-system turns that starts at a user turn (or is the newest
    message alone) and fits is kept, found by bisection (each candidate is encoded
    once, about log2(turns) encodings)."""
    ids = encode(messages)
    budget = context - reply_room(context, max_new_tokens)
    if len(ids) <= budget:
        return ids, 0
    system = [m for m in messages if m.role == "system"]
    turns = [m for m in messages if m.role != "system"]
    starts = [k for k, m in enumerate(turns) if m.role == "user" and k > 0]
    if len(turns) > 1 and (not starts or starts[-1] != len(turns) - 1):
        starts.append(len(turns) - 1)
    candidates: dict[int, list[int]] = {}

    def ids_from(k: int) -> list[int]:
        if k not in candidates:
            candidates[k] = encode([*system, *turns[k:]])
        return candidates[k]

    if not starts or len(ids_from(starts[-1])) > budget:
        if len(ids) <= context:  # nothing dropped would make room for the reply
            return ids, 0
        newest = starts[-1] if starts else 0
        shortest = ids_from(newest) if starts else ids
        if len(shortest) <= context:
            return shortest, newest
        raise RequestError(
            f"The system prompt and the newest message alone take {len(shortest)} tokens; "
            f"this model's context holds {context}",
            param="messages",
            code="context_length_exceeded",
        )
    lo, hi = 0, len(starts) - 1  # bisect for the first start that fits the budget
    while lo < hi:
        mid = (lo + hi) // 2
        if len(ids_from(starts[mid])) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return ids_from(starts[lo]), starts[lo]


__all__ = ["fit_chat", "reply_room"]
