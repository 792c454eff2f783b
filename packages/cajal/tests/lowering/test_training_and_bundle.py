import numpy as np
import pytest
from programs import LENGTH, SYMBOLS, conditional_reverse, config

from riftco.autograd import no_grad
from riftco.cajal.programmed import ProgrammedConfigError, ProgrammedDecoder, TimeRangeLoss
from riftco.cajal.programmed.bundle import load_programmed, save_programmed
from riftco.interchange.bundle import read_bundle, write_bundle
from riftco.optim import Adam, ConstantSchedule
from riftco.train import ExampleSampler, Trainer

SEPARATOR = SYMBOLS


def _examples(count, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        source = rng.integers(0, SYMBOLS, LENGTH)
        target = source[::-1] if source[0] < SYMBOLS // 2 else source
        rows.append(np.concatenate([source, [SEPARATOR], target]).astype(np.int64))
    return rows


def test_the_engine_trains_the_learned_parts_around_a_frozen_program():
    program = conditional_reverse()
    model = ProgrammedDecoder(config(), program, seed=0)
    frozen = model.program_branch.program.coefficient_tensor().numpy().copy()
    rows = _examples(64)
    weights = [np.r_[np.zeros(LENGTH, np.float32), np.ones(LENGTH + 1, np.float32)] for _ in rows]
    source = ExampleSampler(rows, context=2 * LENGTH, batch_size=16, seed=0, weights=weights)
    optimizer = Adam(model.parameters(), lr=0.02, max_grad_norm=None)
    trainer = Trainer(
        model,
        optimizer,
        ConstantSchedule(0.02),
        source,
        stage="pretraining",
        total_steps=60,
        loss_function=TimeRangeLoss(LENGTH, 2 * LENGTH),
    )
    trainer.run()
    losses = [m.loss for m in trainer.history if m.phase == "train"]
    assert np.mean(losses[-10:]) < 0.6 * np.mean(losses[:10])
    np.testing.assert_array_equal(model.program_branch.program.coefficient_tensor().numpy(), frozen)


def test_a_bundle_round_trip_keeps_the_logits_and_records_the_program(tmp_path):
    program = conditional_reverse()
    model = ProgrammedDecoder(config(), program, seed=3)
    path = tmp_path / "programmed.rift"
    symbols = [*"abcd", "|"]
    manifest = save_programmed(path, model, symbols=symbols, metadata={"note": "test"})
    record = manifest["config"]["program"]
    assert record["map_sha256"] == program.map.digest()
    assert record["context"].startswith("x: ") and record["source"].startswith("case c of")
    loaded, bundle = load_programmed(path)
    assert bundle.artifact_id == manifest["artifact_id"]
    assert bundle.tokenizer_state["symbols"] == symbols
    ids = np.random.default_rng(0).integers(0, SYMBOLS + 1, (3, 2 * LENGTH))
    with no_grad():
        np.testing.assert_array_equal(loaded(ids).numpy(), model(ids).numpy())
    with pytest.raises(ProgrammedConfigError, match="symbols"):
        save_programmed(tmp_path / "x.rift", model, symbols=["a"])


def test_a_bundle_whose_program_no_longer_matches_its_digest_is_refused(tmp_path):
    program = conditional_reverse()
    model = ProgrammedDecoder(config(), program, seed=3)
    path = tmp_path / "programmed.rift"
    save_programmed(path, model)
    bundle = read_bundle(path)
    config_dict = dict(bundle.config)
    config_dict["program"] = dict(config_dict["program"], map_sha256="0" * 64)
    tampered = tmp_path / "tampered.rift"
    write_bundle(tampered, config_dict, dict(bundle.tensors), bundle.tokenizer_state)
    with pytest.raises(ProgrammedConfigError, match="digest"):
        load_programmed(tampered)


def test_a_bundle_that_is_not_a_programmed_model_is_refused(tmp_path):
    model = ProgrammedDecoder(config(), conditional_reverse(), seed=0)
    path = tmp_path / "programmed.rift"
    save_programmed(path, model)
    bundle = read_bundle(path)
    for change, message in (
        ({"format": "riftco-interchange/bundle"}, "expected a 'riftco-cajal/programmed'"),
        ({"program": {"source": 1}}, "program record"),
    ):
        other = tmp_path / "other.rift"
        write_bundle(other, {**bundle.config, **change}, dict(bundle.tensors), {})
        with pytest.raises(ProgrammedConfigError, match=message):
            load_programmed(other)
    stripped = {k: v for k, v in bundle.config.items() if k != "model"}
    write_bundle(tmp_path / "stripped.rift", stripped, dict(bundle.tensors), {})
    with pytest.raises(ProgrammedConfigError, match="lacks"):
        load_programmed(tmp_path / "stripped.rift")
