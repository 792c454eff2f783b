"""The rank sweep's smoke profile: the shape of its records and its report."""

import json

from lab_helpers import help_text, png_ink

from labs.common import TARGET_SETS
from labs.lora_rank.run import main


def test_help_runs_from_the_checkout():
    assert "--profile" in help_text("labs.lora_rank.run")


def test_smoke_profile_records_every_rank_target_set_and_seed(tmp_path):
    assert main(["--profile", "smoke", "--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "records.json").read_text())
    runs = document["runs"]
    assert len(runs) == 2 * 2
    assert {(r["target_set"], r["rank"], r["seed"]) for r in runs} == {
        (t, r, 0) for t in ("attention", "attention+ff") for r in (1, 4)
    }
    # LoRA adds rank * (in + out) per adapted layer; D=32, FF=64, one block:
    # attention 4 x (32 + 32); feed-forward expand and project 2 x (32 + 64) more
    per_rank = {"attention": 4 * 64, "attention+ff": 4 * 64 + 2 * 96}
    for run in runs:
        assert run["method"] == "lora" and run["alpha"] == 2.0 * run["rank"]
        assert run["trainable_parameters"] == run["rank"] * per_rank[run["target_set"]]
        assert [s for s, _ in run["validation_curve"]] == [0, 2, 4]
        assert len(run["train_curve"]) == 4 and run["step_seconds"] > 0
        assert abs(run["bundle_validation_loss"] - run["validation_loss"]) < 1e-4
        assert run["trainable_parameters"] < run["total_parameters"]
    assert document["options"]["target_sets"] == {k: list(v) for k, v in TARGET_SETS.items()}
    report = (tmp_path / "report.md").read_text()
    assert "| attention+ff | 4 | 1 |" in report
    for name in ("held_out_vs_rank.png", "loss_vs_parameters.png"):
        assert png_ink(tmp_path / name) > 0.02


def test_bad_grids_are_refused(tmp_path, capsys):
    assert main(["--profile", "smoke", "--out", str(tmp_path), "--targets", "mlp"]) == 2
    assert main(["--profile", "smoke", "--out", str(tmp_path), "--ranks", "0"]) == 2
    assert "expected ranks" in capsys.readouterr().err


def test_a_dataset_made_by_prepare_data_feeds_the_sweep(tmp_path):
    from riftco.train.prepare import open_source, prepare_data

    rows = [
        {"instruction": f"Spell {i}.", "input": "", "output": f"{i} is spelt {i}."}
        for i in range(60)
    ]
    source = tmp_path / "alpaca.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    prepared = prepare_data(open_source(str(source)), tmp_path / "data")
    out = tmp_path / "sweep"
    argv = ["--profile", "smoke", "--out", str(out), "--ranks", "2", "--targets", "attention"]
    assert main([*argv, "--data", str(prepared.files["train"])]) == 0
    document = json.loads((out / "records.json").read_text())
    assert document["options"]["data"] == str(prepared.files["train"])
    (run,) = document["runs"]
    assert (
        run["examples"]["train"] + run["examples"]["validation"]
        == prepared.counts["splits"]["train"]
    )
