"""Deterministic batch sources.

Every source draws from its own ``numpy`` PCG64 generator, seeded on its own (never
shared with model initialization), so the data order of a run depends only on the
data and the data seed. ``state_dict()`` reports the exact position (batches drawn,
and for epochs the cursor) and the generator state; ``load_state_dict()`` restores
them, so the next batch after a resume is the one an uninterrupted run would draw.
``fingerprint`` is a SHA-256 of the token data (and loss weights) a source draws from;
a checkpoint keeps it so that a resume on different data fails loudly.

A batch holds ``inputs`` and ``targets`` (int64 ``[B, T]``, targets shifted by one)
and ``weights`` (float32 ``[B, T]``): 1 where a target counts toward the loss, 0 on
padding and, in post-training, on prompt tokens.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from riftco.train.errors import DataError, ResumeMismatch

STATE_VERSION = 1


@dataclass(frozen=True)
class Batch:
    inputs: np.ndarray
    targets: np.ndarray
    weights: np.ndarray

    @property
    def tokens(self) -> int:
        """Input positions in the batch (``B * T``): what tokens/s counts."""
        return int(self.inputs.size)

    @property
    def loss_tokens(self) -> int:
        """Targets that count toward the loss."""
        return int(np.count_nonzero(self.weights))


class BatchSource(Protocol):
    kind: str
    context: int
    batch_size: int

    @property
    def fingerprint(self) -> str: ...

    @property
    def position(self) -> int: ...

    def next_batch(self, rows: Sequence[int] | None = None) -> Batch: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def _generator_state(rng: np.random.Generator) -> dict[str, Any]:
    state = rng.bit_generator.state
    inner = state["state"]
    # 128-bit integers as decimal strings: JSON readers other than Python's lose precision
    return {
        "bit_generator": state["bit_generator"],
        "state": str(inner["state"]),
        "inc": str(inner["inc"]),
        "has_uint32": int(state["has_uint32"]),
        "uinteger": int(state["uinteger"]),
    }


def _restore_generator(saved: dict[str, Any]) -> np.random.Generator:
    try:
        if saved["bit_generator"] != "PCG64":
            raise ValueError(f"expected a PCG64 generator, found {saved['bit_generator']!r}")
        bits = np.random.PCG64()
        bits.state = {
            "bit_generator": "PCG64",
            "state": {"state": int(saved["state"]), "inc": int(saved["inc"])},
            "has_uint32": int(saved["has_uint32"]),
            "uinteger": int(saved["uinteger"]),
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise ResumeMismatch(f"batch source: unusable generator state ({exc})") from None
    return np.random.Generator(bits)


def _digest(arrays: Sequence[np.ndarray]) -> str:
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.data.cast("B"))
    return digest.hexdigest()


class _Source:
    kind = "?"

    def __init__(self, context: int, batch_size: int, seed: int, pad_id: int) -> None:
        for name, value in (("context", context), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{self.kind}: {name} must be a positive int, found {value!r}")
        self.context, self.batch_size, self.seed, self.pad_id = context, batch_size, seed, pad_id
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self._position = 0
        self._fingerprint = ""

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def position(self) -> int:
        """Batches drawn so far."""
        return self._position

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "kind": self.kind,
            "context": self.context,
            "batch_size": self.batch_size,
            "fingerprint": self.fingerprint,
            "position": self._position,
            "generator": _generator_state(self._rng),
            **self._extra_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()``; checks everything first and changes nothing on error."""
        for key in ("kind", "context", "batch_size", "fingerprint"):
            ours, theirs = getattr(self, key), state.get(key)
            if ours != theirs:
                what = "the data differ" if key == "fingerprint" else f"{key} differs"
                raise ResumeMismatch(
                    f"batch source: {what}: the checkpoint has {key} {theirs!r}, "
                    f"this run has {ours!r}"
                )
        position = state.get("position")
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ResumeMismatch(f"batch source: position must be an int >= 0, found {position!r}")
        rng = _restore_generator(state.get("generator", {}))
        extra = self._check_extra(state)
        self._rng, self._position = rng, position
        self._load_extra(extra)

    def next_batch(self, rows: Sequence[int] | None = None) -> Batch:
        """The next batch; with ``rows``, only those rows of it, in that order. The
        generator advances as for the whole batch, so the ranks of a data-parallel run
        draw the same global batch and each materializes only its own shard."""
        if self._per_row:
            drawn = [self._next_row() for _ in range(self.batch_size)]
            picked = drawn if rows is None else [drawn[i] for i in rows]
            batch = _stack(picked, self.context, self.pad_id)
        else:
            batch = self._batch(rows)
        self._position += 1
        return batch

    _per_row = True

    # A source defines one of these two hooks: rows one at a time (``_per_row``)
    # or whole batches.
    def _next_row(self) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError(f"{type(self).__name__} defines no _next_row (a per-row source)")

    def _batch(self, rows: Sequence[int] | None) -> Batch:
        raise NotImplementedError(f"{type(self).__name__} defines no _batch (a per-batch source)")

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _check_extra(self, state: dict[str, Any]) -> Any:
        return None

    def _load_extra(self, extra: Any) -> None:
        pass


def _stack(rows: list[tuple[np.ndarray, np.ndarray]], context: int, pad_id: int) -> Batch:
    """Rows of up to ``context + 1`` tokens (and per-token weights) as a padded batch."""
    b = len(rows)
    inputs = np.full((b, context), pad_id, dtype=np.int64)
    targets = np.full((b, context), pad_id, dtype=np.int64)
    weights = np.zeros((b, context), dtype=np.float32)
    for i, (ids, w) in enumerate(rows):
        n = len(ids) - 1
        inputs[i, :n] = ids[:-1]
        targets[i, :n] = ids[1:]
        weights[i, :n] = w[1:]
    return Batch(inputs, targets, weights)


class RandomWindows(_Source):
    """Windows of ``context + 1`` tokens at uniform random offsets of one token stream,
    drawn with replacement; every target counts."""

    kind = "random_windows"
    _per_row = False

    def __init__(self, stream: np.ndarray, context: int, batch_size: int, seed: int = 0) -> None:
        super().__init__(context, batch_size, seed, pad_id=0)
        self.stream = np.ascontiguousarray(stream, dtype=np.int64)
        if self.stream.ndim != 1 or len(self.stream) < context + 1:
            raise DataError(
                f"random windows need at least context + 1 = {context + 1} tokens; "
                f"the training data has {self.stream.size}"
            )
        self._fingerprint = _digest([self.stream])
        self._offsets = np.arange(context + 1, dtype=np.int64)

    def _batch(self, rows: Sequence[int] | None) -> Batch:
        starts = self._rng.integers(0, len(self.stream) - self.context, size=self.batch_size)
        if rows is not None:
            starts = starts[np.asarray(rows, dtype=np.int64)]
        windows = self.stream[starts[:, None] + self._offsets]
        weights = np.ones((len(starts), self.context), dtype=np.float32)
        return Batch(windows[:, :-1].copy(), windows[:, 1:].copy(), weights)


class _SequenceSource(_Source):
    def __init__(
        self,
        sequences: Sequence[np.ndarray],
        context: int,
        batch_size: int,
        seed: int,
        weights: Sequence[np.ndarray] | None,
        pad_id: int,
    ) -> None:
        super().__init__(context, batch_size, seed, pad_id)
        self.sequences = [np.ascontiguousarray(s, dtype=np.int64) for s in sequences]
        if weights is None:
            weights = [np.ones(len(s), dtype=np.float32) for s in self.sequences]
        self.weights = [np.ascontiguousarray(w, dtype=np.float32) for w in weights]
        if not self.sequences:
            raise DataError(f"{self.kind}: expected at least one example; found none")
        for i, (s, w) in enumerate(zip(self.sequences, self.weights)):
            if s.ndim != 1 or s.shape != w.shape or len(s) < 2:
                raise DataError(
                    f"{self.kind}: example {i} has {s.size} tokens and {w.size} weights; "
                    "expected equal counts of at least 2"
                )
        lengths = np.array([len(s) for s in self.sequences], dtype=np.int64)
        self._fingerprint = _digest([lengths, *self.sequences, *self.weights])


class DocumentWindows(_SequenceSource):
    """Windows that never cross an example boundary: a start is drawn uniformly among
    every (example, offset) whose window of ``context + 1`` tokens fits in the example,
    so long examples are sampled in proportion to their length; an example shorter than
    that is one padded window."""

    kind = "document_windows"

    def __init__(
        self,
        sequences: Sequence[np.ndarray],
        context: int,
        batch_size: int,
        seed: int = 0,
        weights: Sequence[np.ndarray] | None = None,
        pad_id: int = 0,
    ) -> None:
        super().__init__(sequences, context, batch_size, seed, weights, pad_id)
        starts = [max(len(s) - context, 1) for s in self.sequences]
        self._cumulative = np.cumsum(np.array(starts, dtype=np.int64))

    def _next_row(self) -> tuple[np.ndarray, np.ndarray]:
        draw = int(self._rng.integers(0, int(self._cumulative[-1])))
        index = int(np.searchsorted(self._cumulative, draw, side="right"))
        offset = draw - (int(self._cumulative[index - 1]) if index else 0)
        end = offset + self.context + 1
        return self.sequences[index][offset:end], self.weights[index][offset:end]


class ExampleSampler(_SequenceSource):
    """Each example equally likely, whatever its length: examples in a freshly shuffled
    order each epoch; a row is an example's first ``context + 1`` tokens, padded."""

    kind = "example_uniform"

    def __init__(
        self,
        sequences: Sequence[np.ndarray],
        context: int,
        batch_size: int,
        seed: int = 0,
        weights: Sequence[np.ndarray] | None = None,
        pad_id: int = 0,
    ) -> None:
        super().__init__(sequences, context, batch_size, seed, weights, pad_id)
        self._epoch, self._cursor = 0, 0
        self._epoch_generator = _generator_state(self._rng)
        self._order = self._rng.permutation(len(self.sequences))

    @property
    def epoch(self) -> int:
        return self._epoch

    def _next_row(self) -> tuple[np.ndarray, np.ndarray]:
        if self._cursor == len(self._order):
            self._epoch, self._cursor = self._epoch + 1, 0
            self._epoch_generator = _generator_state(self._rng)
            self._order = self._rng.permutation(len(self.sequences))
        index = int(self._order[self._cursor])
        self._cursor += 1
        end = self.context + 1
        return self.sequences[index][:end], self.weights[index][:end]

    def _extra_state(self) -> dict[str, Any]:
        return {
            "epoch": self._epoch,
            "cursor": self._cursor,
            "epoch_generator": self._epoch_generator,
        }

    def _check_extra(self, state: dict[str, Any]) -> Any:
        epoch, cursor = state.get("epoch"), state.get("cursor")
        for name, value in (("epoch", epoch), ("cursor", cursor)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ResumeMismatch(f"batch source: {name} must be an int >= 0, found {value!r}")
        assert isinstance(cursor, int)  # checked above
        if cursor > len(self.sequences):
            raise ResumeMismatch(
                f"batch source: cursor {cursor} exceeds {len(self.sequences)} examples"
            )
        replay = _restore_generator(state.get("epoch_generator", {}))
        order = replay.permutation(len(self.sequences))
        if _generator_state(replay) != state["generator"]:
            raise ResumeMismatch(
                "batch source: the epoch's generator state does not lead to the saved one"
            )
        return epoch, cursor, state["epoch_generator"], order

    def _load_extra(self, extra: Any) -> None:
        self._epoch, self._cursor, self._epoch_generator, self._order = extra


def fixed_windows(
    stream: np.ndarray, context: int, batch_size: int, max_batches: int
) -> list[Batch]:
    """Held-out batches: non-overlapping windows of ``context + 1`` tokens (stride
    ``context``), evenly spread over ``stream`` when there are more than fit in
    ``max_batches``; the same batches every time."""
    stream = np.asarray(stream, dtype=np.int64)
    count = (len(stream) - 1) // context
    if count < 1:
        return []
    starts = np.arange(count, dtype=np.int64) * context
    limit = max_batches * batch_size
    if count > limit:
        starts = starts[np.linspace(0, count - 1, limit).round().astype(np.int64)]
    rows = [(stream[s : s + context + 1], np.ones(context + 1, np.float32)) for s in starts]
    return [_stack(rows[i : i + batch_size], context, 0) for i in range(0, len(rows), batch_size)]


def fixed_examples(
    sequences: Sequence[np.ndarray],
    weights: Sequence[np.ndarray] | None,
    context: int,
    batch_size: int,
    max_batches: int,
    pad_id: int = 0,
) -> list[Batch]:
    """Held-out batches of whole examples (their first ``context + 1`` tokens), in order."""
    if weights is None:
        weights = [np.ones(len(s), np.float32) for s in sequences]
    rows = [
        (np.asarray(s, np.int64)[: context + 1], np.asarray(w, np.float32)[: context + 1])
        for s, w in zip(sequences, weights)
        if len(s) >= 2
    ][: max_batches * batch_size]
    return [
        _stack(rows[i : i + batch_size], context, pad_id) for i in range(0, len(rows), batch_size)
    ]


__all__ = [
    "Batch",
    "BatchSource",
    "DocumentWindows",
    "ExampleSampler",
    "RandomWindows",
    "fixed_examples",
    "fixed_windows",
]
