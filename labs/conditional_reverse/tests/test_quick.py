"""The quick profile end to end: split disjointness, the oracle, and F beating I."""

import json

import numpy as np
import pytest

from labs.conditional_reverse import metrics
from labs.conditional_reverse.programs import conditional_reverse, reverse
from labs.conditional_reverse.run import main
from labs.conditional_reverse.task import PROFILES, make_splits, target_of
from riftco.cajal import decode, encode, enumerate_values

QUICK = PROFILES["quick"]


@pytest.fixture(scope="module")
def splits():
    return make_splits(QUICK)


def test_splits_are_source_disjoint_sized_and_deterministic(splits):
    seen = set()
    for name, size in zip(("train", "probe", "validation", "test"), QUICK.split_sizes):
        keys = {row.tobytes() for row in splits[name].sources}
        assert len(splits[name]) == size and len(keys) == size
        assert not keys & seen
        seen |= keys
    again = make_splits(QUICK)
    assert all(np.array_equal(splits[k].rows, again[k].rows) for k in splits)
    rows = splits["train"].rows
    assert (rows[:, QUICK.length] == QUICK.separator).all()
    triggers = np.array([QUICK.alphabet.index(t) for t in QUICK.triggers])
    np.testing.assert_array_equal(
        rows[:, QUICK.length + 1 :], target_of(rows[:, : QUICK.length], triggers)
    )
    assert 0.2 < splits["train"].triggered.mean() < 0.8


def test_the_oracle_is_exact_and_the_programs_match_the_interpreter(splits):
    oracle = metrics.oracle(QUICK, splits["test"])
    assert oracle["all_token"] == 1.0 and oracle["all_exact"] == 1.0
    program = conditional_reverse(QUICK.length, QUICK.symbols)
    seq_type, bool_type = (t for _, t in program.context)
    values = list(enumerate_values(seq_type))
    for x in values[:: len(values) // 25]:
        for flag in enumerate_values(bool_type):
            out = program.run([x, flag])
            assert encode(out) == program.map(encode(x), encode(flag))
    unary = reverse(QUICK.length, QUICK.symbols)
    x = values[7]
    blocks = np.array(encode(x)).reshape(QUICK.length, -1)
    assert encode(decode(unary.output_type, unary.map(encode(x)))) == tuple(
        blocks[::-1].reshape(-1)
    )


def test_the_controls_score_each_branch_perfectly(splits):
    test = splits["test"]
    controls = metrics.controls(test, QUICK.length)
    assert controls["copy"]["no_trigger_exact"] == 1.0
    assert controls["reverse"]["trigger_exact"] == 1.0


def test_quick_run_f_beats_i_and_writes_a_record_and_report(tmp_path):
    output = tmp_path / "quick.json"
    assert (
        main(["--profile", "quick", "--variants", "F,I", "--output", str(output), "--quiet"]) == 0
    )
    record = json.loads(output.read_text())
    assert record["source_disjoint"] is True
    (f_run,) = [r for r in record["runs"] if r["variant"] == "F"]
    (i_run,) = [r for r in record["runs"] if r["variant"] == "I"]
    assert f_run["test"]["all_token"] > i_run["test"]["all_token"] + 0.1
    assert f_run["ablations"]["layer0.program"]["mean_difference"] < -0.3
    assert 1 <= f_run["selected_step"] <= QUICK.steps
    report = (tmp_path / "quick.md").read_text()
    assert "| F |" in report and "Exact oracle" in report
    assert (tmp_path / "quick-accuracy.png").exists()
    (tmp_path / "quick.md").unlink()
    assert main(["--render", str(output)]) == 0
    assert "Compared with the original" in (tmp_path / "quick.md").read_text()


def test_the_command_refuses_unknown_variants(capsys):
    with pytest.raises(SystemExit):
        main(["--variants", "F,X"])
    assert "expected some of F,P,T,I" in capsys.readouterr().err
