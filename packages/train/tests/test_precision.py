"""``precision="bf16"`` (``--precision bf16``): a tiny run converges and stays close to
float32; bundles stay float32; the float32 run rounds nothing; a backend without
bfloat16 refuses the job before any data is read."""

import dataclasses
import io
import json

import numpy as np
import pytest
from train_helpers import tiny_pretrain_options, write_corpus

import riftco.tensor as rt
from riftco.interchange import read_bundle
from riftco.tensor.cpu import CpuBackend
from riftco.train.checkpoint import read_checkpoint
from riftco.train.commands import post_train_main, pretrain_main
from riftco.train.pretraining import pretrain
from riftco.train.stage import TrainingOptions

TINY_ARGS = ["--tokenizer", "byte", "--context", "16", "--d-model", "16", "--layers", "1"]
TINY_ARGS += ["--heads", "2", "--d-ff", "32", "--batch-size", "4", "--eval-batches", "1"]


def losses(result, phase):
    return [m.loss for m in result.history if m.phase == phase]


@pytest.fixture
def casts(monkeypatch):
    """Every dtype the CPU backend casts to during the test."""
    seen = []
    original = CpuBackend.astype

    def spy(self, x, shape, src, dst):
        seen.append(dst)
        return original(self, x, shape, src, dst)

    monkeypatch.setattr(CpuBackend, "astype", spy)
    return seen


def test_bf16_converges_and_stays_close_to_f32(tmp_path, casts):
    corpus = str(write_corpus(tmp_path))
    options = dataclasses.replace(tiny_pretrain_options(steps=24, eval_every=8), data=corpus)
    f32 = pretrain(options, tmp_path / "f32", progress=io.StringIO())
    assert rt.bfloat16 not in casts  # the default rounds nothing
    low = dataclasses.replace(
        options, training=dataclasses.replace(options.training, precision="bf16")
    )
    bf16 = pretrain(low, tmp_path / "bf16", progress=io.StringIO())
    assert rt.bfloat16 in casts
    validation = losses(bf16, "validation")
    assert validation[-1] < 0.8 * validation[0]
    assert losses(bf16, "train")[-1] < losses(bf16, "train")[0]
    assert validation == pytest.approx(losses(f32, "validation"), rel=0.02)
    assert losses(bf16, "train") != losses(f32, "train")
    bundle = read_bundle(bf16.bundle)
    assert all(w.dtype == np.float32 for w in bundle.tensors.values())
    assert bundle.artifact_id != read_bundle(f32.bundle).artifact_id


def test_the_option_is_checked_and_saved():
    with pytest.raises(ValueError, match="precision must be one of f32, bf16, found 'fp8'"):
        TrainingOptions(precision="fp8")
    saved = TrainingOptions(precision="bf16").to_dict()
    assert TrainingOptions.from_dict(saved).precision == "bf16"
    assert TrainingOptions.from_dict({}).precision == "f32"


def test_a_backend_without_bfloat16_refuses_the_job(tmp_path, monkeypatch):
    monkeypatch.setattr(CpuBackend, "dtypes", rt.BASE_DTYPES)
    options = tiny_pretrain_options(steps=2, precision="bf16")
    missing = tmp_path / "no-such-corpus.txt"
    with pytest.raises(rt.JobUnsupported, match="--precision bf16 needs bfloat16 tensors"):
        pretrain(dataclasses.replace(options, data=str(missing)), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_commands_take_precision(tmp_path, capsys):
    corpus = write_corpus(tmp_path)
    out = tmp_path / "base"
    argv = ["--data", str(corpus), "--out", str(out), "--steps", "3", "--sample", ""]
    assert pretrain_main([*argv, *TINY_ARGS, "--precision", "bf16"]) == 0
    saved = read_checkpoint(out / "pretraining.riftckpt").run["options"]["training"]
    assert saved["precision"] == "bf16"  # a resume trains on in bf16
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"prompt": "Say it.", "response": "It is."}) + "\n")
    chat = ["--base", str(out / "base.rift"), "--data", str(data), "--steps", "2"]
    chat += ["--batch-size", "2", "--validation-fraction", "0", "--out", str(tmp_path / "chat")]
    assert post_train_main([*chat, "--precision", "bf16", "--method", "lora"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        pretrain_main(["--precision", "fp16"])
