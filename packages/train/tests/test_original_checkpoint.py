"""Training continues from checkpoints the original riftco-transformer 0.6.1 wrote.

``original/make_checkpoints.py`` made the fixtures with the original package and
recorded what it did next: the logits at the checkpoint, the loss of the next batch
and the trained values and Adam moments after one more step. The ``seed-parity``
tox env regenerates them with random configurations (``RIFTCO_ORIGINAL_CHECKPOINTS``).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from riftco.autograd import no_grad
from riftco.interchange import canonical_json
from riftco.nn import QuantizedLinear, cross_entropy
from riftco.train import CheckpointError
from riftco.train.original_checkpoint import continue_original, read_original_checkpoint

FIXTURES = Path(
    os.environ.get("RIFTCO_ORIGINAL_CHECKPOINTS") or Path(__file__).parent / "original" / "fixtures"
)
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


def _ours(name: str) -> str:
    return name[: -len(".scale")] + ".weight" if name.endswith("norm.scale") else name


@pytest.mark.parametrize("method", sorted(EXPECTED))
def test_continuation_matches_the_originals_next_step(method: str) -> None:
    entry = EXPECTED[method]
    checkpoint = read_original_checkpoint(FIXTURES / f"{method}.riftckpt")
    assert checkpoint.method == method and checkpoint.checkpoint_id == entry["checkpoint_id"]
    run = continue_original(checkpoint)
    model, optimizer = run.model, run.optimizer
    assert run.parameters == [_ours(n) for n in entry["after"]["names"]]
    if method == "qlora":
        assert any(isinstance(m, QuantizedLinear) for m in model.modules())
    with no_grad():
        model.eval()
        logits = model(np.array(entry["probe"])).numpy()
    want = np.array(entry["logits"]).reshape(logits.shape)
    assert np.abs(logits - want).max() <= 1e-5

    model.train(True)
    tokens = np.array(entry["batch"]["tokens"])
    targets = np.array(entry["batch"]["targets"])
    loss = cross_entropy(model(tokens), targets)
    assert abs(float(loss.numpy()) - entry["loss"]) <= 1e-5
    loss.backward()
    optimizer.step()
    assert optimizer.step_count == entry["after"]["step"]

    # A key bias adds the same score at every position, so its true gradient is zero and
    # both sides hold only rounding noise (~1e-9), which Adam's normalization magnifies.
    named = dict(model.named_parameters())
    keep = np.concatenate(
        [np.full(named[n].value.numpy().size, not n.endswith("key.bias")) for n in run.parameters]
    )
    values = np.concatenate([named[n].value.numpy().reshape(-1) for n in run.parameters])
    assert np.abs(values - np.array(entry["after"]["values"]))[keep].max() <= 1e-5
    state = optimizer.state_dict()["state"]
    first = np.concatenate([state[i]["exp_avg"].reshape(-1) for i in range(len(run.parameters))])
    second = np.concatenate(
        [state[i]["exp_avg_sq"].reshape(-1) for i in range(len(run.parameters))]
    )
    assert np.allclose(first, entry["after"]["first_moments"], rtol=1e-4, atol=1e-7)
    assert np.allclose(second, entry["after"]["second_moments"], rtol=1e-4, atol=1e-9)


def test_only_the_originally_trained_parameters_train() -> None:
    run = continue_original(read_original_checkpoint(FIXTURES / "lora.riftckpt"))
    trainable = sorted(n for n, p in run.model.named_parameters() if p.requires_grad)
    assert trainable == sorted(run.parameters)
    assert all("lora_" in n for n in trainable)


# -- damaged files ------------------------------------------------------------------------


def _rewrite(src: Path, dst: Path, change) -> Path:
    with zipfile.ZipFile(src) as archive:
        members = {i.filename: archive.read(i) for i in archive.infolist()}
    manifest = json.loads(members.pop("manifest.json"))
    manifest, members = change(manifest, members)
    with zipfile.ZipFile(dst, "w") as archive:
        archive.writestr("manifest.json", canonical_json(manifest))
        for name, data in members.items():
            archive.writestr(name, data)
    return dst


def _reseal(manifest: dict, members: dict) -> dict:
    for name, data in members.items():
        entry = manifest["members"][name]
        entry.update(size=len(data), count=len(data) // 4, sha256=hashlib.sha256(data).hexdigest())
    body = {k: v for k, v in manifest.items() if k != "checkpoint_id"}
    manifest["checkpoint_id"] = hashlib.sha256(canonical_json(body)).hexdigest()
    return manifest


def test_truncated_and_changed_checkpoints(tmp_path: Path) -> None:
    raw = (FIXTURES / "qlora.riftckpt").read_bytes()
    for cut in (10, len(raw) // 3, len(raw) - 20):
        path = tmp_path / f"cut{cut}.riftckpt"
        path.write_bytes(raw[:cut])
        with pytest.raises(CheckpointError):
            read_original_checkpoint(path)

    def step(manifest, members):
        manifest["global_step"] += 1
        return manifest, members

    with pytest.raises(CheckpointError, match="checkpoint_id"):
        read_original_checkpoint(
            _rewrite(FIXTURES / "full.riftckpt", tmp_path / "id.riftckpt", step)
        )

    def flip(manifest, members):
        data = bytearray(members["adam-first-moments.f32le"])
        data[0] ^= 1
        members["adam-first-moments.f32le"] = bytes(data)
        return manifest, members

    with pytest.raises(CheckpointError, match="SHA-256"):
        read_original_checkpoint(
            _rewrite(FIXTURES / "full.riftckpt", tmp_path / "sha.riftckpt", flip)
        )


def test_hostile_packed_state(tmp_path: Path) -> None:
    def huge(manifest, members):
        data = bytearray(members["model-nf4.rtnf4"])
        data[16:24] = (2).to_bytes(8, "little")  # rank
        data[32:40] = (2**60).to_bytes(8, "little")  # packed code count
        members["model-nf4.rtnf4"] = bytes(data)
        return _reseal(manifest, members), members

    with pytest.raises(CheckpointError, match="packed weight"):
        read_original_checkpoint(
            _rewrite(FIXTURES / "qlora.riftckpt", tmp_path / "nf4.riftckpt", huge)
        )

    def short(manifest, members):
        members["model.f32le"] = members["model.f32le"][:-4]
        return _reseal(manifest, members), members

    with pytest.raises(CheckpointError, match="bytes"):
        read_original_checkpoint(
            _rewrite(FIXTURES / "qlora.riftckpt", tmp_path / "s.riftckpt", short)
        )


def test_the_training_engine_continues_an_original_qlora_run() -> None:
    from riftco.optim import ConstantSchedule
    from riftco.train import RandomWindows, Trainer

    checkpoint = read_original_checkpoint(FIXTURES / "qlora.riftckpt")
    run = continue_original(checkpoint)
    vocab = checkpoint.config.vocab_size
    stream = np.arange(200) % vocab
    source = RandomWindows(stream, checkpoint.config.context_length, 2, seed=0)
    lr = checkpoint.optimizer["learning_rate"]
    trainer = Trainer(
        run.model, run.optimizer, ConstantSchedule(lr), source, stage="post_training", total_steps=3
    )
    before = {n: p.value.numpy().copy() for n, p in run.model.named_parameters()}
    for _ in range(3):
        metric = trainer.train_step()
        assert np.isfinite(metric.loss)
    assert run.optimizer.step_count == checkpoint.optimizer["step_count"] + 3
    after = dict(run.model.named_parameters())
    changed = {n for n in before if not np.array_equal(before[n], after[n].value.numpy())}
    assert changed == set(run.parameters)  # only the adapters move; the NF4 base stays


def test_post_training_an_original_base_says_why_it_cannot(tmp_path: Path) -> None:
    from riftco.train import DataError, PostTrainOptions, post_train

    base = (
        Path(__file__).parent.parent.parent / "interchange/tests/original/fixtures/byte-base.rift"
    )
    with pytest.raises(DataError, match="chat template"):
        post_train(PostTrainOptions(), base, tmp_path)
