"""Deterministic, seeded train/validation/test splits over de-duplicated records.

Each record has an identity (its prompt by default, or the whole record). Records
whose identity was already seen are duplicates and dropped, so one prompt can never
land in two splits. The kept records are ordered by ``SHA-256(seed, identity)`` (a
seeded shuffle that does not depend on the input's order) and cut: the first
``round(n * test_fraction)`` go to test, the next ``round(n * validation_fraction)``
to validation, the rest to train. With stratification the cut is made within each
value of the field, so every split keeps the field's proportions. Within a split,
records keep their input order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SPLITS = ("train", "validation", "test")
IDENTITIES = ("prompt", "record")


@dataclass(frozen=True)
class SplitOptions:
    """Fractions of the kept records held out, the seed, the identity records are
    de-duplicated by, and an optional field to stratify by."""

    validation_fraction: float = 0.05
    test_fraction: float = 0.05
    seed: int = 0
    identity: str = "prompt"
    stratify: str | None = None

    def __post_init__(self) -> None:
        for name in ("validation_fraction", "test_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must lie in [0, 1); found {value!r}")
        if self.validation_fraction + self.test_fraction >= 1.0:
            raise ValueError(
                "validation_fraction + test_fraction must be below 1; found "
                f"{self.validation_fraction} + {self.test_fraction}"
            )
        if self.identity not in IDENTITIES:
            raise ValueError(f"identity must be one of {IDENTITIES}; found {self.identity!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "validation_fraction": self.validation_fraction,
            "test_fraction": self.test_fraction,
            "seed": self.seed,
            "identity": self.identity,
            "stratify": self.stratify,
        }


@dataclass(frozen=True)
class Keyed:
    """One kept record: its position in the input, identity, stratum and output."""

    position: int
    identity: str
    stratum: str | None
    output: Any


class Deduplicator:
    """Keeps the first record of each identity; counts the rest."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()
        self.kept: list[Keyed] = []
        self.duplicates = 0

    def add(self, identity: str, stratum: str | None, output: Any) -> bool:
        digest = hashlib.sha256(identity.encode("utf-8")).digest()
        if digest in self._seen:
            self.duplicates += 1
            return False
        self._seen.add(digest)
        self.kept.append(Keyed(len(self.kept), identity, stratum, output))
        return True


def split_key(seed: int, identity: str) -> bytes:
    return hashlib.sha256(f"{seed}\0{identity}".encode()).digest()


def assign_splits(records: Sequence[Keyed], options: SplitOptions) -> dict[str, list[Keyed]]:
    """The records of each split, each in input order."""
    strata: dict[str | None, list[Keyed]] = {}
    for record in records:
        strata.setdefault(record.stratum if options.stratify else None, []).append(record)
    out: dict[str, list[Keyed]] = {name: [] for name in SPLITS}
    for group in strata.values():
        shuffled = sorted(group, key=lambda r: split_key(options.seed, r.identity))
        n = len(shuffled)
        n_test = round(n * options.test_fraction)
        n_validation = round(n * options.validation_fraction)
        out["test"] += shuffled[:n_test]
        out["validation"] += shuffled[n_test : n_test + n_validation]
        out["train"] += shuffled[n_test + n_validation :]
    return {name: sorted(part, key=lambda r: r.position) for name, part in out.items()}


def stratum_counts(parts: Mapping[str, Iterable[Keyed]]) -> dict[str, dict[str, int]]:
    """For each stratum value, how many records each split holds."""
    counts: dict[str, dict[str, int]] = {}
    for name, part in parts.items():
        for record in part:
            row = counts.setdefault(str(record.stratum), dict.fromkeys(SPLITS, 0))
            row[name] += 1
    return dict(sorted(counts.items()))


__all__ = ["IDENTITIES", "SPLITS", "Deduplicator", "Keyed", "SplitOptions", "assign_splits"]
