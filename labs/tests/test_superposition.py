"""The superposition lab: geometry against exact results, the command, the self-test."""

import json

import numpy as np
import pytest
from lab_helpers import help_text, png_ink

from labs.superposition import geometry as g
from labs.superposition.run import main

KNOBS = ["--dimension", "64", "--features", "96", "--active", "4", "--theta", "55"]
KNOBS += ["--tolerance", "0.6", "--seed", "7"]


def test_help_lists_the_original_knobs():
    text = help_text("labs.superposition.run")
    for flag in (
        "--dimension",
        "--features",
        "--active",
        "--theta",
        "--tolerance",
        "--seed",
        "--save",
        "--no-show",
        "--self-test",
        "--serve",
        "--profile",
    ):
        assert flag in text


@pytest.mark.parametrize("dimension", g.DIMENSIONS)
def test_the_angle_density_integrates_to_one(dimension):
    grid = np.linspace(0.0, 180.0, 200001)
    assert np.trapezoid(g.angle_density(grid, dimension), grid) == pytest.approx(1.0, abs=1e-6)


def test_band_and_query_mode():
    assert g.expected_band_fraction(60.0, 3) == pytest.approx(0.5, abs=1e-6)
    assert g.expected_band_fraction(90.0, 64) == 0.0
    v = g.unit_vectors(10, 8, 0)
    assert g.query_angles(v, 2).shape == (9,)
    assert g.pairwise_angles(v).shape == (45,)
    with pytest.raises(ValueError, match="theta"):
        g.band(95.0)
    with pytest.raises(ValueError, match="query index"):
        g.query_angles(v, 10)


def test_readout_is_one_plus_interference():
    r = g.superpose(32, 40, 3, 0.5, 1)
    directions = g.unit_vectors(40, 32, 1)
    x = directions[list(r.active)].sum(axis=0)
    assert np.allclose(r.values, directions @ x)
    assert r.decoded == tuple(np.flatnonzero(r.values > 0.5))


def test_smoke_profile_with_the_original_knobs_saves_png_and_records(tmp_path, capsys):
    argv = [*KNOBS, "--profile", "smoke", "--save", "--no-show", "--out", str(tmp_path)]
    assert main(argv) == 0
    record = json.loads((tmp_path / "records.json").read_text())
    assert [d["dimension"] for d in record["dimensions"]] == list(g.DIMENSIONS)
    spreads = [d["sd"] for d in record["dimensions"]]
    assert spreads == sorted(spreads, reverse=True)
    for item in record["dimensions"]:
        assert len(item["histogram"]) == 90 and abs(item["mean"] - 90) < 3
    assert record["superposition"]["features"] == 96 and len(record["superposition"]["active"]) == 4
    assert record["options"]["theta"] == 55.0 and record["mode"]["mode"] == "pairs"
    assert [c["active"] for c in record["recovery"]] == list(range(1, 9))
    assert png_ink(tmp_path / "superposition.png") > 0.03
    report = (tmp_path / "report.md").read_text()
    assert "| 4096 |" in report and "96 features in 64 dimensions" in report
    assert "96 features, 4 active" in capsys.readouterr().out


def test_query_mode_and_bad_options(tmp_path):
    argv = ["--profile", "smoke", "--mode", "query", "--query-index", "5", "--dimensions", "3,8"]
    assert main([*argv, "--save", "--no-show", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "records.json").read_text())
    assert record["mode"]["count"] == 119 and record["mode"]["query_index"] == 5
    assert main(["--theta", "0", "--no-show"]) == 2
    assert main(["--active", "10", "--features", "5", "--no-show"]) == 2


def test_self_test_passes():
    assert main(["--self-test"]) == 0
