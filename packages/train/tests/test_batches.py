import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riftco.train.batches import (
    DocumentWindows,
    ExampleSampler,
    RandomWindows,
    fixed_examples,
    fixed_windows,
)
from riftco.train.errors import DataError, ResumeMismatch

STREAM = np.arange(1000, dtype=np.int64) % 97
DOCS = [np.arange(n, dtype=np.int64) + 100 * i for i, n in enumerate([5, 40, 12, 3, 70])]


def sources(seed=3):
    return [
        RandomWindows(STREAM, 16, 4, seed=seed),
        DocumentWindows(DOCS, 8, 3, seed=seed),
        ExampleSampler(DOCS, 8, 3, seed=seed, weights=[np.arange(len(d)) % 2 for d in DOCS]),
    ]


def same(a, b):
    return all(
        np.array_equal(getattr(a, f), getattr(b, f)) for f in ("inputs", "targets", "weights")
    )


@pytest.mark.parametrize("index", range(3))
def test_same_seed_same_batches(index):
    a, b = sources()[index], sources()[index]
    for _ in range(10):
        assert same(a.next_batch(), b.next_batch())


@pytest.mark.parametrize("index", range(3))
def test_state_restores_the_exact_position(index):
    source = sources()[index]
    for _ in range(7):
        source.next_batch()
    state = source.state_dict()
    expected = [source.next_batch() for _ in range(9)]
    fresh = sources()[index]
    fresh.load_state_dict(state)
    assert fresh.position == 7
    assert all(same(e, fresh.next_batch()) for e in expected)


def test_targets_are_inputs_shifted():
    batch = RandomWindows(STREAM, 16, 4, seed=0).next_batch()
    assert batch.inputs.shape == batch.targets.shape == (4, 16)
    assert np.array_equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    assert batch.weights.min() == 1.0


def test_document_windows_never_cross_a_boundary():
    source = DocumentWindows(DOCS, 8, 64, seed=1, pad_id=-1)
    for _ in range(5):
        batch = source.next_batch()
        for row, target, weight in zip(batch.inputs, batch.targets, batch.weights):
            real = weight > 0
            docs = {int(t) // 100 for t in np.concatenate([row[real], target[real]])}
            assert len(docs) == 1
            assert np.all(target[~real] == -1)


def test_example_sampler_visits_each_example_once_per_epoch():
    source = ExampleSampler(DOCS, 100, 1, seed=5)
    firsts = [int(source.next_batch().inputs[0, 0]) // 100 for _ in range(10)]
    assert sorted(firsts[:5]) == sorted(firsts[5:]) == [0, 1, 2, 3, 4]
    assert source.epoch == 1


def test_example_rows_are_truncated_and_masked():
    weights = [np.r_[np.zeros(3), np.ones(len(d) - 3)] for d in DOCS]
    batch = ExampleSampler(DOCS, 8, 5, seed=0, weights=weights).next_batch()
    for w in batch.weights:
        assert np.count_nonzero(w) <= 8 and w[:2].sum() == 0


def test_resume_on_other_data_fails():
    state = RandomWindows(STREAM, 16, 4).state_dict()
    other = RandomWindows(STREAM[::-1].copy(), 16, 4)
    with pytest.raises(ResumeMismatch, match="data differ"):
        other.load_state_dict(state)
    with pytest.raises(ResumeMismatch, match="context differs"):
        RandomWindows(STREAM, 8, 4).load_state_dict(state)


def test_too_little_data():
    with pytest.raises(DataError, match="at least context"):
        RandomWindows(np.arange(5), 16, 2)
    with pytest.raises(DataError, match="at least one example"):
        ExampleSampler([], 8, 2)


def test_fixed_batches_are_fixed():
    a = fixed_windows(STREAM, 16, 4, max_batches=3)
    assert len(a) == 3 and all(b.inputs.shape == (4, 16) for b in a)
    assert all(same(x, y) for x, y in zip(a, fixed_windows(STREAM, 16, 4, max_batches=3)))
    assert fixed_windows(np.arange(5), 16, 4, 3) == []
    examples = fixed_examples(DOCS, None, 8, 2, max_batches=10)
    assert [b.inputs.shape[0] for b in examples] == [2, 2, 1]


@settings(max_examples=40, deadline=None)
@given(
    index=st.integers(0, 2),
    seed=st.integers(0, 2**63),
    before=st.integers(0, 12),
    after=st.integers(1, 6),
)
def test_any_split_point_resumes_exactly(index, seed, before, after):
    def make():
        return sources(seed)[index]

    uninterrupted = make()
    expected = [uninterrupted.next_batch() for _ in range(before + after)]
    first = make()
    for _ in range(before):
        first.next_batch()
    second = make()
    second.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert all(same(e, second.next_batch()) for e in expected[before:])
