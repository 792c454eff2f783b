import argparse
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from train_helpers import write_corpus

from riftco.train.commands import (
    INTERRUPTED,
    post_train_main,
    post_train_parser,
    pretrain_main,
    pretrain_parser,
)
from riftco.train.metrics import read_metrics

TINY = [
    "--tokenizer",
    "byte",
    "--context",
    "16",
    "--d-model",
    "16",
    "--layers",
    "1",
    "--heads",
    "2",
    "--d-ff",
    "32",
    "--batch-size",
    "4",
    "--eval-batches",
    "1",
]


@pytest.mark.parametrize("make", [pretrain_parser, post_train_parser])
def test_help_documents_every_flag(make):
    parser = make()
    for action in parser._actions:
        assert action.help and action.help != argparse.SUPPRESS, action.option_strings
    text = parser.format_help()
    assert "--resume" in text and "--steps" in text


def test_pretrain_then_post_train(tmp_path, capsys):
    corpus = write_corpus(tmp_path)
    args = [
        "--data",
        str(corpus),
        "--out",
        str(tmp_path),
        "--steps",
        "6",
        "--eval-every",
        "3",
        *TINY,
    ]
    assert pretrain_main(args) == 0
    out = capsys.readouterr().out
    assert "unigram baseline loss:" in out and "validation loss:" in out and "sample:" in out
    assert (tmp_path / "base.rift").exists() and (tmp_path / "pretraining.riftckpt").exists()
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"prompt": "Say it.", "response": "It is."}) + "\n")
    args = [
        "--base",
        str(tmp_path / "base.rift"),
        "--data",
        str(data),
        "--steps",
        "3",
        "--batch-size",
        "2",
        "--validation-fraction",
        "0",
    ]
    assert post_train_main(args) == 0
    assert "chat.rift" in capsys.readouterr().out


def test_attention_and_activation_checkpointing_flags(tmp_path, capsys):
    from riftco.interchange import load_bundle

    corpus = write_corpus(tmp_path)
    losses, configs = {}, {}
    for name, extra in {
        "flash": [],
        "materialized": ["--attention", "materialized"],
        "recompute": ["--activation-checkpointing"],
    }.items():
        out = tmp_path / name
        argv = ["--data", str(corpus), "--out", str(out), "--steps", "3", "--sample", "", *TINY]
        assert pretrain_main([*argv, *extra]) == 0
        losses[name] = [
            m.loss for m in read_metrics(out / "pretraining-metrics.jsonl") if m.phase == "train"
        ]
        configs[name] = load_bundle(out / "base.rift").config
    capsys.readouterr()
    assert (
        configs["materialized"].attention == "materialized"
        and configs["flash"].attention == "flash"
    )
    assert configs["recompute"].checkpoint and not configs["flash"].checkpoint
    # The same weights and data: recomputing gives the same steps, the other kernel nearly.
    assert losses["recompute"] == losses["flash"]
    assert losses["materialized"] == pytest.approx(losses["flash"], rel=1e-4)
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"prompt": "Say it.", "response": "It is."}) + "\n")
    argv = ["--base", str(tmp_path / "flash" / "base.rift"), "--data", str(data), "--steps", "2"]
    argv += ["--batch-size", "2", "--validation-fraction", "0", "--out", str(tmp_path / "chat")]
    extra = ["--attention", "materialized", "--activation-checkpointing"]
    assert post_train_main([*argv, *extra]) == 0
    chat = load_bundle(tmp_path / "chat" / "chat.rift").config
    assert chat.attention == "materialized" and chat.checkpoint
    with pytest.raises(SystemExit):
        pretrain_main(["--attention", "sparse"])


def test_bad_data_is_a_clean_error(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "response": "b"}\n{"prompt": }\n')
    corpus = write_corpus(tmp_path)
    assert (
        pretrain_main(["--data", str(corpus), "--out", str(tmp_path), "--steps", "2", *TINY]) == 0
    )
    code = post_train_main(["--base", str(tmp_path / "base.rift"), "--data", str(bad)])
    assert code == 1
    assert "bad.jsonl:2: expected JSON" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert pretrain_main(["--data", str(empty), "--out", str(tmp_path / "x")]) == 1
    assert "empty.txt" in capsys.readouterr().err


def wait_for_steps(path, count, process, limit=60.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if path.exists():
            lines = [line for line in path.read_text().splitlines() if '"train"' in line]
            if len(lines) >= count:
                return
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)
    raise AssertionError("training never started")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigint_saves_a_checkpoint_and_resume_finishes_identically(tmp_path):
    corpus = write_corpus(tmp_path)
    common = [
        "--data",
        str(corpus),
        "--steps",
        "400",
        "--eval-every",
        "0",
        "--checkpoint-every",
        "0",
        "--sample",
        "",
        *TINY,
    ]
    run = tmp_path / "run"
    code = (
        "import sys; from riftco.train.commands import pretrain_main; "
        "sys.exit(pretrain_main(sys.argv[1:]))"
    )
    env = {**os.environ, "RIFTCO_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-c", code, "--out", str(run), *common],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    wait_for_steps(run / "pretraining-metrics.jsonl", 3, process)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == INTERRUPTED, err
    assert "checkpoint saved" in err and "Traceback" not in err
    assert f"resume with: riftco pretrain --resume {run / 'pretraining.riftckpt'}" in err
    assert f"--data {corpus}" in err  # custom data: resuming without it fails its fingerprint
    stopped = read_metrics(run / "pretraining-metrics.jsonl")[-1].step
    assert 3 <= stopped < 400
    assert not (run / "base.rift").exists()
    assert (
        pretrain_main(
            ["--resume", str(run / "pretraining.riftckpt"), "--data", str(corpus), "--sample", ""]
        )
        == 0
    )
    whole = tmp_path / "whole"
    assert pretrain_main(["--out", str(whole), *common]) == 0
    resumed = [m.without_timing() for m in read_metrics(run / "pretraining-metrics.jsonl")]
    expected = [m.without_timing() for m in read_metrics(whole / "pretraining-metrics.jsonl")]
    assert resumed == expected
    assert (run / "base.rift").read_bytes() == (whole / "base.rift").read_bytes()


def test_backend_flag_chooses_the_backend(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RIFTCO_BACKEND", "auto")  # restored after the test
    corpus = write_corpus(tmp_path)
    args = ["--data", str(corpus), "--out", str(tmp_path / "cpu"), "--steps", "1", *TINY]
    assert pretrain_main([*args, "--backend", "cpu"]) == 0
    assert os.environ["RIFTCO_BACKEND"] == "cpu"
    args = ["--data", str(corpus), "--out", str(tmp_path / "none"), "--steps", "1", *TINY]
    assert pretrain_main([*args, "--backend", "no-such-backend"]) == 1
    assert "no-such-backend" in capsys.readouterr().err
