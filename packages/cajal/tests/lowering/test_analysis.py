import itertools

import numpy as np
import pytest

from riftco.cajal.analysis import (
    PCA,
    RepresentationMatrix,
    paired_ablation,
    project_out_rows,
    replace_rows,
    representation_matrix,
    steer_rows,
)
from riftco.cajal.errors import ShapeError


def _rows(seed=0, n=200):
    rng = np.random.default_rng(seed)
    basis = rng.normal(size=(3, 6))
    return rng.normal(size=(n, 3)) * [5.0, 2.0, 0.5] @ basis + rng.normal(size=6)


def test_pca_matches_the_svd_and_is_bit_identical_run_to_run():
    x = _rows()
    a, b = PCA.fit(x, 3), PCA.fit(x.copy(), 3)
    for field in ("mean", "components", "explained_variance"):
        assert getattr(a, field).tobytes() == getattr(b, field).tobytes()
    centered = x - x.mean(axis=0)
    _, s, vt = np.linalg.svd(centered, full_matrices=False)
    np.testing.assert_allclose(a.explained_variance, s[:3] ** 2 / (len(x) - 1), rtol=1e-9)
    for row, reference in zip(a.components, vt[:3]):
        assert abs(abs(row @ reference) - 1) < 1e-9
        assert row[np.argmax(np.abs(row))] > 0
    np.testing.assert_allclose(a.components @ a.components.T, np.eye(3), atol=1e-12)
    assert a.explained_variance_ratio.sum() == pytest.approx(1.0, abs=1e-9)


def test_pca_reconstructs_and_ablates():
    x = _rows()
    full = PCA.fit(x)
    np.testing.assert_allclose(full.reconstruct(full.transform(x)), x, atol=1e-9)
    pca = PCA.fit(x, 2)
    ablated = pca.ablate(x, [0])
    assert np.allclose(pca.transform(ablated)[:, 0], 0, atol=1e-9)
    with pytest.raises(ShapeError, match="components"):
        PCA.fit(x, 7)
    with pytest.raises(ShapeError, match="at least 2 rows"):
        PCA.fit(x[:1])
    with pytest.raises(ShapeError, match="width"):
        pca.transform(x[:, :3])


def test_representation_matrices_from_traces():
    traces = {
        "seq": np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4),
        "vec": np.ones((2, 5)),
    }
    assert representation_matrix(traces, "vec").shape == (2, 5)
    assert representation_matrix(traces, "seq").shape == (6, 4)
    one = representation_matrix(traces, "seq", 1, labels=["a", "b"])
    np.testing.assert_array_equal(one.rows, traces["seq"][:, 1])
    assert representation_matrix(traces, "seq", [0, 2]).shape == (2, 8)
    assert one.select([False, True]).labels == ("b",)
    with pytest.raises(ShapeError, match="no trace named"):
        representation_matrix(traces, "nope")
    with pytest.raises(ShapeError, match="outside"):
        representation_matrix(traces, "seq", 3)
    with pytest.raises(ShapeError, match="labels"):
        RepresentationMatrix("m", np.ones((2, 2)), ("a",))


def test_row_interventions_touch_only_the_selected_rows():
    x = _rows(n=5)
    replaced = replace_rows(x, [1, 3], 0.0)
    assert not replaced[[1, 3]].any() and np.array_equal(replaced[[0, 2, 4]], x[[0, 2, 4]])
    direction = np.eye(6)[2]
    steered = steer_rows(x, direction, 3.0, rows=[0])
    np.testing.assert_allclose(steered[0] - x[0], 3 * direction)
    np.testing.assert_array_equal(steered[1:], x[1:])
    removed = project_out_rows(x, [direction * 2], rows=np.array([True, False, True, False, False]))
    assert np.allclose(removed[[0, 2], 2], 0) and np.array_equal(removed[1], x[1])
    with pytest.raises(ShapeError):
        steer_rows(x, direction[:3], 1.0)


def test_exact_permutation_statistics_match_brute_force():
    base = np.array([1, 1, 1, 0, 1, 1], float)
    ablated = np.array([0, 0.5, 0, 0, 0, 1], float)
    stats = paired_ablation(base, ablated, method="permutation")
    effects = ablated - base
    flips = [np.mean(np.array(s) * effects) for s in itertools.product([1, -1], repeat=6)]
    p = np.mean(np.abs(flips) >= abs(effects.mean()) - 1e-12)
    assert stats.p_value == pytest.approx(p)
    assert stats.mean_difference == pytest.approx(effects.mean())
    assert stats.low <= stats.mean_difference <= stats.high
    np.testing.assert_array_equal(stats.effects, effects)
    with pytest.raises(ShapeError, match="use method='bootstrap'"):
        paired_ablation(np.zeros(25), np.ones(25), method="permutation")


def test_bootstrap_statistics_are_seeded_and_cover_the_mean():
    rng = np.random.default_rng(0)
    base = rng.random(300)
    ablated = base - 0.3 + 0.05 * rng.normal(size=300)
    a = paired_ablation(base, ablated, seed=1)
    b = paired_ablation(base, ablated, seed=1)
    assert a.to_dict() == b.to_dict()
    assert a.low < -0.3 < a.high and a.high - a.low < 0.05 and a.p_value < 0.01
    null = paired_ablation(base, base + 0.05 * rng.normal(size=300), seed=1)
    assert null.low < 0 < null.high
    with pytest.raises(ShapeError, match="equal"):
        paired_ablation(base, base[:3])
