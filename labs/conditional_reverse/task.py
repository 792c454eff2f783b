"""The conditional-reversal task: ``source|target``, where the target is the source
reversed when its first symbol is a trigger and the source itself otherwise.

Token ids: the alphabet's letters are ``0 .. n-1`` in alphabet order, the separator
``|`` is ``n``. An example is ``2L + 1`` tokens; the model reads the first ``2L`` and
predicts the next token at each position, and only positions ``L .. 2L-1`` (the
separator and the target's first ``L - 1`` symbols, predicting the ``L`` target symbols)
count toward the loss and the metrics.

Splits are source-disjoint: every source appears in at most one split. The first
symbol is a trigger with probability 1/2 (then uniform among the triggers, else
uniform among the other letters), so both branches are equally represented; the other
symbols are uniform over the alphabet.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

SPLITS = ("train", "probe", "validation", "test")


@dataclass(frozen=True)
class Profile:
    name: str
    length: int
    alphabet: str
    triggers: str
    d_model: int
    attention_branches: int
    heads: int
    d_ff: int
    split_sizes: tuple[int, int, int, int]
    split_seed: int
    batch_size: int
    lr: float
    epochs: int | None
    steps: int | None
    eval_every: int
    max_grad_norm: float | None = None

    @property
    def symbols(self) -> int:
        return len(self.alphabet)

    @property
    def separator(self) -> int:
        return len(self.alphabet)

    @property
    def vocab(self) -> list[str]:
        return [*self.alphabet, "|"]

    def total_steps(self) -> int:
        if self.steps is not None:
            return self.steps
        per_epoch = -(-self.split_sizes[0] // self.batch_size)
        return per_epoch * (self.epochs or 1)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["split_sizes"] = dict(zip(SPLITS, self.split_sizes))
        data["total_steps"] = self.total_steps()
        return data


PROFILES = {
    "paper": Profile(
        name="paper",
        length=15,
        alphabet="abcdefghijklmnopqrstuvwxyz",
        triggers="aeiou",
        d_model=20,
        attention_branches=2,
        heads=2,
        d_ff=80,
        split_sizes=(10_000, 5_000, 1_000, 1_000),
        split_seed=42,
        batch_size=128,
        lr=0.01,
        epochs=10,
        steps=None,
        eval_every=79,
    ),
    "quick": Profile(
        name="quick",
        length=3,
        alphabet="abcdefghij",
        triggers="ae",
        d_model=8,
        attention_branches=2,
        heads=2,
        d_ff=24,
        split_sizes=(128, 64, 64, 64),
        split_seed=42,
        batch_size=16,
        lr=0.01,
        epochs=None,
        steps=64,
        eval_every=8,
    ),
}


@dataclass(frozen=True)
class Split:
    """``sources [N, L]`` (letter ids), ``triggered [N]`` and the full rows ``[N, 2L+1]``."""

    name: str
    sources: np.ndarray
    triggered: np.ndarray
    rows: np.ndarray

    @property
    def inputs(self) -> np.ndarray:
        return self.rows[:, :-1]

    @property
    def targets(self) -> np.ndarray:
        return self.rows[:, 1:]

    def __len__(self) -> int:
        return len(self.sources)


def target_of(source: np.ndarray, triggers: np.ndarray) -> np.ndarray:
    """Reverse each source whose first symbol is a trigger; copy the others."""
    triggered = np.isin(source[:, 0], triggers)
    return np.where(triggered[:, None], source[:, ::-1], source)


def make_splits(profile: Profile) -> dict[str, Split]:
    """The four source-disjoint splits, drawn with PCG64(``profile.split_seed``)."""
    rng = np.random.Generator(np.random.PCG64(profile.split_seed))
    total = sum(profile.split_sizes)
    alphabet = profile.symbols
    triggers = np.array([profile.alphabet.index(t) for t in profile.triggers])
    others = np.setdiff1d(np.arange(alphabet), triggers)
    per_branch = min(len(triggers), len(others)) * alphabet ** (profile.length - 1)
    if total > 1.8 * per_branch:  # keeps rejection sampling of distinct sources quick
        raise ValueError(
            f"profile {profile.name}: {total} distinct sources asked for, at most "
            f"{int(1.8 * per_branch)} allowed"
        )
    seen: set[bytes] = set()
    sources: list[np.ndarray] = []
    while len(sources) < total:
        trigger = rng.random() < 0.5
        first = rng.choice(triggers if trigger else others)
        rest = rng.integers(0, alphabet, profile.length - 1)
        source = np.concatenate([[first], rest]).astype(np.int64)
        key = source.tobytes()
        if key not in seen:
            seen.add(key)
            sources.append(source)
    stacked = np.stack(sources)
    splits, start = {}, 0
    for name, size in zip(SPLITS, profile.split_sizes):
        part = stacked[start : start + size]
        start += size
        target = target_of(part, triggers)
        separator = np.full((size, 1), profile.separator, dtype=np.int64)
        rows = np.concatenate([part, separator, target], axis=1)
        splits[name] = Split(name, part, np.isin(part[:, 0], triggers), rows)
    return splits


def control_predictions(split: Split, kind: str) -> np.ndarray:
    """The target a control predicts: ``copy`` (always the source) or ``reverse``."""
    if kind == "copy":
        return split.sources
    if kind == "reverse":
        return split.sources[:, ::-1]
    raise ValueError(f"control: expected 'copy' or 'reverse', found {kind!r}")
