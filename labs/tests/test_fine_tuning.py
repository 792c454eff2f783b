"""The fine-tuning comparison's smoke profile: records for each method, and its report."""

import json

from lab_helpers import help_text, png_ink

from labs.fine_tuning.run import main


def test_help_runs_from_the_checkout():
    assert "--methods" in help_text("labs.fine_tuning.run")


def test_smoke_profile_compares_full_lora_and_qlora(tmp_path):
    assert main(["--profile", "smoke", "--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "records.json").read_text())
    runs = {r["method"]: r for r in document["runs"]}
    assert sorted(runs) == ["full", "lora", "qlora"]
    full, lora, qlora = runs["full"], runs["lora"], runs["qlora"]
    assert full["trainable_parameters"] == full["total_parameters"]
    assert lora["trainable_parameters"] == qlora["trainable_parameters"] < full["total_parameters"]
    # NF4: 4 bits a weight plus double-quantized block scales, against 32 bits
    assert full["base_weight_bytes"] == lora["base_weight_bytes"]
    assert qlora["base_weight_bytes"] < full["base_weight_bytes"] / 6
    for run in runs.values():
        assert run["generalization_gap"] == run["validation_loss"] - run["fixed_train_loss"]
        assert abs(run["bundle_validation_loss"] - run["validation_loss"]) < 1e-4
        assert [s for s, _ in run["validation_curve"]] == [0, 2, 4]
        assert run["validation_curve"][-1][1] < run["validation_curve"][0][1]
    # the same base and split for every method
    assert len({json.dumps(r["examples"]) for r in runs.values()}) == 1
    # LoRA starts as the base itself (B = 0); QLoRA from its NF4 rounding of it
    assert full["validation_curve"][0][1] == lora["validation_curve"][0][1]
    assert 0 < abs(qlora["validation_curve"][0][1] - full["validation_curve"][0][1]) < 0.05
    report = (tmp_path / "report.md").read_text()
    assert "| qlora | 1 |" in report
    for name in ("curves.png", "comparison.png"):
        assert png_ink(tmp_path / name) > 0.02


def test_unknown_method_is_refused(tmp_path):
    assert main(["--profile", "smoke", "--out", str(tmp_path), "--methods", "adapters"]) == 2
