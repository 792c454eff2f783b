import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest
from train_helpers import tiny_pretrain_options, write_corpus

from riftco.interchange import read_bundle
from riftco.train.errors import DataError, ResumeMismatch
from riftco.train.metrics import read_metrics
from riftco.train.post_training import PostTrainOptions, post_train, split_examples
from riftco.train.pretraining import pretrain
from riftco.train.stage import TrainingOptions


def untimed(metrics):
    return [m.without_timing() for m in metrics]


@pytest.fixture
def corpus(tmp_path):
    return str(write_corpus(tmp_path))


def post_options(data=None, steps=6, **kw):
    training = TrainingOptions(
        steps=steps,
        batch_size=4,
        learning_rate=5e-3,
        min_learning_rate=5e-4,
        warmup_steps=1,
        eval_every=3,
        eval_batches=2,
        checkpoint_every=0,
    )
    return PostTrainOptions(data=data, training=training, **kw)


def test_pretraining_makes_a_base_bundle(tmp_path, corpus):
    options = dataclasses.replace(tiny_pretrain_options(), data=corpus)
    result = pretrain(options, tmp_path / "run", progress=io.StringIO())
    assert result.outcome == "finished"
    bundle = read_bundle(result.bundle)
    assert bundle.stage == "pretraining" and bundle.parent_id is None
    assert bundle.artifact_id == result.artifact_id
    training = bundle.metadata["training"]
    assert training["steps"] == 12 and training["data"] == corpus
    assert training["validation_loss"] < training["unigram_validation_loss"] * 1.5
    logged = read_metrics(result.metrics)
    assert [m.step for m in logged if m.phase == "validation"] == [0, 4, 8, 12]
    assert untimed(logged) == untimed(result.history)


def test_same_seed_same_run_same_artifact(tmp_path, corpus):
    options = dataclasses.replace(tiny_pretrain_options(), data=corpus)
    a = pretrain(options, tmp_path / "a", progress=io.StringIO())
    b = pretrain(options, tmp_path / "b", progress=io.StringIO())
    assert untimed(a.history) == untimed(b.history)
    assert a.artifact_id == b.artifact_id
    other = dataclasses.replace(
        options, training=dataclasses.replace(options.training, data_seed=1)
    )
    c = pretrain(other, tmp_path / "c", progress=io.StringIO())
    assert c.artifact_id != a.artifact_id


def test_pretraining_resume_is_bit_identical(tmp_path, corpus):
    options = dataclasses.replace(tiny_pretrain_options(steps=10), data=corpus)
    quiet = io.StringIO()
    whole = pretrain(options, tmp_path / "whole", progress=quiet)
    stops = iter(range(100))
    first = pretrain(options, tmp_path / "split", progress=quiet, stop=lambda: next(stops) == 3)
    assert first.outcome == "interrupted" and first.bundle is None
    second = pretrain(
        dataclasses.replace(options), tmp_path / "split", resume=first.checkpoint, progress=quiet
    )
    assert second.outcome == "finished"
    whole_weights = read_bundle(whole.bundle).tensors
    split_weights = read_bundle(second.bundle).tensors
    assert all(np.array_equal(whole_weights[k], split_weights[k]) for k in whole_weights)
    assert second.artifact_id == whole.artifact_id
    assert untimed(read_metrics(second.metrics)) == untimed(read_metrics(whole.metrics))


def test_resume_on_different_text_fails(tmp_path, corpus):
    options = dataclasses.replace(tiny_pretrain_options(steps=6), data=corpus)
    quiet = io.StringIO()
    first = pretrain(options, tmp_path / "run", progress=quiet, stop=lambda: True)
    other = tmp_path / "other.txt"
    other.write_text(Path(corpus).read_text().replace("statement", "clause"))
    with pytest.raises(ResumeMismatch, match="other data"):
        pretrain(
            dataclasses.replace(options, data=str(other)),
            tmp_path / "run",
            resume=first.checkpoint,
            progress=quiet,
        )


def write_chat(folder):
    data = folder / "chat.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": f"Say {w}.", "response": f"{w} is it."}) + "\n"
            for w in ("yes", "no", "for", "while", "if", "else", "try", "with", "pass", "del")
        )
    )
    return str(data)


def test_post_training_lineage(tmp_path, corpus):
    quiet = io.StringIO()
    base = pretrain(
        dataclasses.replace(tiny_pretrain_options(steps=4), data=corpus), tmp_path, progress=quiet
    )
    child = post_train(post_options(write_chat(tmp_path)), base.bundle, tmp_path, progress=quiet)
    bundle = read_bundle(child.bundle)
    assert bundle.stage == "post_training" and bundle.parent_id == base.artifact_id
    assert bundle.metadata["training"]["loss_on"] == "response"
    assert child.artifact_id != base.artifact_id


def test_post_training_resume_needs_no_base(tmp_path, corpus):
    quiet = io.StringIO()
    base = pretrain(
        dataclasses.replace(tiny_pretrain_options(steps=4), data=corpus), tmp_path, progress=quiet
    )
    options = post_options(write_chat(tmp_path))
    whole = post_train(options, base.bundle, tmp_path / "whole", progress=quiet)
    calls = iter(range(100))
    first = post_train(
        options, base.bundle, tmp_path / "split", progress=quiet, stop=lambda: next(calls) == 2
    )
    assert first.outcome == "interrupted"
    second = post_train(options, None, tmp_path / "split", resume=first.checkpoint, progress=quiet)
    assert second.artifact_id == whole.artifact_id
    assert read_bundle(second.bundle).parent_id == base.artifact_id


def test_default_instructions_split_keeps_shared_replies_together():
    from riftco.train.instructions import default_instructions

    train, validation = split_examples(default_instructions(), 0.1)
    assert 10 < len(validation) < 60
    assert not {e.response for e in train} & {e.response for e in validation}


def test_empty_text_file(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    options = dataclasses.replace(tiny_pretrain_options(), data=str(empty))
    with pytest.raises(DataError, match="empty.txt: expected text; the file is empty"):
        pretrain(options, tmp_path / "run")
