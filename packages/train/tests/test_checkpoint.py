import numpy as np
import pytest
from train_helpers import STREAM, bigram_trainer

from riftco.train.batches import fixed_windows
from riftco.train.checkpoint import read_checkpoint, restore, save_checkpoint
from riftco.train.errors import CheckpointError, ResumeMismatch


def untimed(metrics):
    return [m.without_timing() for m in metrics]


def test_pause_save_resume_is_exact(tmp_path):
    validation = fixed_windows(STREAM[:400], 16, 4, 2)
    whole = bigram_trainer(validation=validation, eval_every=7)
    assert whole.run() == "finished"
    first = bigram_trainer(validation=validation, eval_every=7)
    path = tmp_path / "run.riftckpt"
    assert (
        first.run(until=12, checkpoint=lambda t: save_checkpoint(path, t, {"seed": 0})) == "paused"
    )
    second = bigram_trainer(validation=validation, eval_every=7)
    restore(second, read_checkpoint(path))
    assert second.step == 12
    second.run()
    assert np.array_equal(whole.weights()["table"], second.weights()["table"])
    assert untimed(whole.history) == untimed(first.history + second.history)


def test_checkpoint_identity_and_run(tmp_path):
    trainer = bigram_trainer()
    trainer.run(until=3)
    manifest = save_checkpoint(tmp_path / "a.riftckpt", trainer, {"model": {"d": 1}})
    loaded = read_checkpoint(tmp_path / "a.riftckpt")
    assert loaded.checkpoint_id == manifest["checkpoint_id"] and len(loaded.checkpoint_id) == 64
    assert loaded.run == {"model": {"d": 1}} and loaded.step == 3 and loaded.stage == "pretraining"


def corrupt(path, where):
    data = bytearray(path.read_bytes())
    if where == "truncate":
        path.write_bytes(bytes(data[: len(data) - 100]))
        return
    if where == "weights":
        data[-5] ^= 0x01
    else:  # a digit in the manifest
        key = b'\\"step\\":'  # the manifest is a JSON string inside the JSON header
        index = data.index(key) + len(key)
        data[index] = ord("9") if data[index] != ord("9") else ord("8")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["truncate", "weights", "manifest"])
def test_damaged_checkpoint_is_refused_before_any_change(tmp_path, where):
    path = tmp_path / "run.riftckpt"
    saved = bigram_trainer()
    saved.run(until=5)
    save_checkpoint(path, saved, {})
    corrupt(path, where)
    trainer = bigram_trainer()
    before = (trainer.weights()["table"].copy(), trainer.state_dict())
    with pytest.raises(CheckpointError):
        restore(trainer, read_checkpoint(path))
    assert np.array_equal(before[0], trainer.weights()["table"])
    assert trainer.state_dict() == before[1] and trainer.step == 0


def test_resume_on_other_data_fails_clearly(tmp_path):
    path = tmp_path / "run.riftckpt"
    saved = bigram_trainer()
    saved.run(until=5)
    save_checkpoint(path, saved, {})
    other = bigram_trainer(stream=STREAM[::-1].copy())
    with pytest.raises(ResumeMismatch, match="other data"):
        restore(other, read_checkpoint(path))
    assert other.step == 0


def test_not_a_checkpoint(tmp_path):
    path = tmp_path / "junk.riftckpt"
    path.write_bytes(b"\x00" * 3)
    with pytest.raises(CheckpointError, match="truncated"):
        read_checkpoint(path)


@pytest.mark.parametrize(
    ("tail", "match"), [(',"step":5}', "duplicate key 'step'"), (',"x":NaN}', "standard JSON")]
)
def test_manifest_json_is_strict(tmp_path, tail, match):
    from riftco.interchange import read_safetensors, write_safetensors
    from riftco.train.checkpoint import METADATA_KEY

    path = tmp_path / "run.riftckpt"
    saved = bigram_trainer()
    saved.run(until=2)
    save_checkpoint(path, saved, {})
    stored = read_safetensors(path)
    metadata = dict(stored.metadata)
    metadata[METADATA_KEY] = metadata[METADATA_KEY][:-1] + tail
    write_safetensors(path, stored.arrays(copy=True), metadata)
    with pytest.raises(CheckpointError, match=match):
        read_checkpoint(path)
