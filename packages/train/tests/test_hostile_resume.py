"""Hostile ``--resume``: checkpoints edited and re-hashed (as anyone can: the identity is
a hash over the manifest) so that one field of the run or of the engine's state is
wrong. Each is refused with a ``CheckpointError`` naming the field, before a model is
built; a lone surrogate in a post-training response is refused when the data is read."""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pytest
from train_helpers import tiny_pretrain_options, write_corpus

from riftco.core import RiftcoError
from riftco.interchange import (
    canonical_json,
    content_id,
    read_safetensors,
    tensors_digest,
    write_safetensors,
)
from riftco.train.checkpoint import METADATA_KEY, read_checkpoint
from riftco.train.errors import CheckpointError, DataError, TrainError
from riftco.train.instructions import load_instructions
from riftco.train.pretraining import pretrain
from riftco.train.stage import check_resume


@pytest.fixture(scope="module")
def paused(tmp_path_factory):
    """A pretraining run of 4 steps stopped after its first, and its options."""
    root = tmp_path_factory.mktemp("resume")
    options = dataclasses.replace(tiny_pretrain_options(steps=4), data=str(write_corpus(root)))
    result = pretrain(options, root / "run", progress=io.StringIO(), stop=lambda: True)
    assert result.outcome == "interrupted"
    return result.checkpoint, options


def _edited(source, target, change=None, drop=()):
    """``source`` with ``change`` applied to its manifest and the tensors ``drop`` left
    out, the digest and identity recomputed to match."""
    stored = read_safetensors(source)
    manifest = json.loads(stored.metadata[METADATA_KEY])
    if change is not None:
        change(manifest)
    arrays = {n: np.array(a) for n, a in stored.arrays().items() if n not in drop}
    manifest["tensors"] = {
        "sha256": tensors_digest(arrays),
        "count": len(arrays),
        "elements": sum(int(a.size) for a in arrays.values()),
    }
    manifest["checkpoint_id"] = content_id(manifest, exclude="checkpoint_id")
    write_safetensors(target, arrays, {METADATA_KEY: canonical_json(manifest).decode()})
    return target


def _options(m):
    return m["run"]["options"]


def _engine(m):
    return m["state"]["engine"]


#: (name, change to the manifest, the field the error must name)
CASES = [
    ("run without options", lambda m: m["run"].pop("options"), "'options'"),
    ("steps as a string", lambda m: _options(m)["training"].update(steps="x"), "steps"),
    ("an unknown option", lambda m: _options(m).update(colour="red"), "colour"),
    ("windows: nope", lambda m: _options(m).update(windows="nope"), "windows"),
    (
        "moving_average a string",
        lambda m: _engine(m).update(moving_average="bad"),
        "moving_average",
    ),
    (
        "moving_average value a string",
        lambda m: _engine(m)["moving_average"].update(value="x"),
        "moving_average.value",
    ),
    (
        "moving_average decay 1",
        lambda m: _engine(m)["moving_average"].update(decay=1.0),
        "decay",
    ),
    ("engine step 10**12", lambda m: _engine(m).update(step=10**12), "state.engine.step"),
    ("engine step -1", lambda m: _engine(m).update(step=-1), "state.engine.step"),
    ("engine step a string", lambda m: _engine(m).update(step="x"), "state.engine.step"),
    ("engine step a float", lambda m: _engine(m).update(step=1.0), "state.engine.step"),
    (
        "both steps 10**12",
        lambda m: (m.update(step=10**12), _engine(m).update(step=10**12)),
        "step",
    ),
    (
        "total steps beyond the options",
        lambda m: _engine(m).update(total_steps=10**9),
        "total_steps",
    ),
    ("tokens a string", lambda m: _engine(m).update(tokens="x"), "tokens"),
    ("seconds a string", lambda m: _engine(m).update(seconds="x"), "seconds"),
    ("evaluated_at later than step", lambda m: _engine(m).update(evaluated_at=99), "evaluated"),
    ("no engine state", lambda m: m["state"].pop("engine"), "state.engine"),
    ("schedule a list", lambda m: _engine(m).update(schedule=[]), "schedule"),
    (
        "dropout counter a string",
        lambda m: _engine(m)["dropout"].update({k: "x" for k in _engine(m)["dropout"]}),
        "dropout",
    ),
    (
        "optimizer step 10**12",
        lambda m: m["state"]["optimizer"].update(step=10**12),
        "optimizer.step",
    ),
    ("run without a tokenizer", lambda m: m["run"].pop("tokenizer"), "'tokenizer'"),
    ("tokenizer state a list", lambda m: m["run"].update(tokenizer=[1]), "run.tokenizer"),
    (
        "tokenizer state broken",
        lambda m: m["run"]["tokenizer"].update(method="unigram"),
        "run.tokenizer",
    ),
    ("model option a string", lambda m: _options(m)["model"].update(d_model="x"), "d_model"),
    ("training options an int", lambda m: _options(m).update(training=3), "training"),
    ("options a list", lambda m: m["run"].update(options=[1]), "run.options"),
    ("precision unknown", lambda m: _options(m)["training"].update(precision="f8"), "precision"),
    ("a huge integer option", lambda m: _options(m).update(vocab_size=10**30), "vocab_size"),
]


@pytest.mark.parametrize(("change", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_edited_checkpoint_is_refused_on_resume(tmp_path, paused, change, field):
    checkpoint, options = paused
    edited = _edited(checkpoint, tmp_path / "edited.riftckpt", change)
    with pytest.raises(CheckpointError) as caught:
        pretrain(options, tmp_path / "run", resume=edited, progress=io.StringIO())
    assert field in str(caught.value)
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_checkpoint_missing_a_moment_tensor(tmp_path, paused):
    checkpoint, options = paused
    edited = _edited(checkpoint, tmp_path / "edited.riftckpt", drop={"optimizer.0.exp_avg"})
    with pytest.raises(CheckpointError, match=r"optimizer moments: .*optimizer\.0\.exp_avg"):
        read_checkpoint(edited)
    with pytest.raises(CheckpointError, match="optimizer moments"):
        pretrain(options, tmp_path / "run", resume=edited, progress=io.StringIO())


def test_checkpoint_with_a_stray_moment_tensor(tmp_path, paused):
    checkpoint, _ = paused
    stored = read_safetensors(checkpoint)
    manifest = json.loads(stored.metadata[METADATA_KEY])
    arrays = {n: np.array(a) for n, a in stored.arrays().items()}
    arrays["optimizer.999.exp_avg"] = np.zeros(2, np.float32)
    manifest["tensors"] = {
        "sha256": tensors_digest(arrays),
        "count": len(arrays),
        "elements": sum(int(a.size) for a in arrays.values()),
    }
    manifest["checkpoint_id"] = content_id(manifest, exclude="checkpoint_id")
    path = tmp_path / "stray.riftckpt"
    write_safetensors(path, arrays, {METADATA_KEY: canonical_json(manifest).decode()})
    with pytest.raises(CheckpointError, match=r"unexpected \['optimizer\.999\.exp_avg'\]"):
        read_checkpoint(path)


def test_unedited_checkpoint_still_resumes(tmp_path, paused):
    checkpoint, options = paused
    copy = _edited(checkpoint, tmp_path / "same.riftckpt")
    check_resume(read_checkpoint(copy), "pretraining")
    result = pretrain(options, tmp_path / "run", resume=copy, progress=io.StringIO())
    assert result.outcome == "finished" and result.summary["steps"] == 4


def test_checkpoint_of_an_unknown_stage_is_refused_by_name(tmp_path, paused):
    checkpoint, _ = paused
    edited = _edited(
        checkpoint,
        tmp_path / "edited.riftckpt",
        lambda m: (m.update(stage="other"), _engine(m).update(stage="other")),
    )
    with pytest.raises(CheckpointError, match="stage: expected one of"):
        check_resume(read_checkpoint(edited), "other")


@pytest.mark.parametrize(
    "line",
    [
        r'{"prompt": "hello", "response": "a lone \ud800 surrogate"}',
        r'{"prompt": "hello", "response": "\udfff"}',
        r'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "\udc00x"}]}',
        r'{"prompt": "a lone \ud800", "response": "fine"}',
        r'{"prompt": "fine", "response": "fine", "system": "\ud83d"}',
    ],
)
def test_lone_surrogate_in_instructions_is_refused(tmp_path, line):
    path = tmp_path / "data.jsonl"
    path.write_text('{"prompt": "ok", "response": "ok"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"data\.jsonl:2: .*lone surrogate") as caught:
        load_instructions(path)
    assert isinstance(caught.value, TrainError) and isinstance(caught.value, RiftcoError)


def test_a_surrogate_pair_escape_is_text(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text(r'{"prompt": "hi", "response": "\ud83d\ude00"}' + "\n", encoding="utf-8")
    assert load_instructions(path)[0].response == "\U0001f600"
