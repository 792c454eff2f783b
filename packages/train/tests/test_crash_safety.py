"""Crash safety: stale temporaries of a killed write are cleaned on the next write; a
resume of a finished run changes nothing; a resumed run's bundle equals the
uninterrupted run's byte for byte."""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys

from train_helpers import tiny_pretrain_options, write_corpus

from riftco.train.pretraining import pretrain


def _files(folder):
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_resuming_a_finished_run_changes_nothing(tmp_path):
    corpus = str(write_corpus(tmp_path))
    options = dataclasses.replace(tiny_pretrain_options(steps=8), data=corpus)
    done = pretrain(options, tmp_path / "run", progress=io.StringIO())
    assert done.outcome == "finished"
    before = _files(tmp_path / "run")
    again = pretrain(options, tmp_path / "run", resume=done.checkpoint, progress=io.StringIO())
    assert again.outcome == "finished" and again.artifact_id == done.artifact_id
    after = _files(tmp_path / "run")
    changed = sorted(k for k in before if before[k] != after.get(k))
    assert changed == [] or changed == ["pretraining-loss.png"], changed


def test_a_run_resumed_after_its_last_evaluation_makes_the_same_bundle(tmp_path):
    corpus = str(write_corpus(tmp_path))
    # evaluations at steps 0, 4, 8; the split comes at step 9, after the last of them
    options = dataclasses.replace(tiny_pretrain_options(steps=10), data=corpus)
    whole = pretrain(options, tmp_path / "whole", progress=io.StringIO())
    stops = iter(range(100))
    first = pretrain(
        options, tmp_path / "split", progress=io.StringIO(), stop=lambda: next(stops) == 8
    )
    assert first.outcome == "interrupted"
    second = pretrain(options, tmp_path / "split", resume=first.checkpoint, progress=io.StringIO())
    assert second.outcome == "finished"
    assert second.bundle.read_bytes() == whole.bundle.read_bytes()


KILLED_WRITE = """
import os, sys
from riftco.core import atomic_write
with atomic_write(sys.argv[1]) as handle:
    handle.write(b"partial")
    handle.flush()
    os._exit(9)  # as a kill -9 would: no cleanup runs
"""


def test_a_killed_write_leaves_a_temporary_that_the_next_write_removes(tmp_path):
    from riftco.core import write_bytes_atomic

    target = tmp_path / "model.rift"
    run = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(target)], check=False)
    assert run.returncode == 9
    stale = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(stale) == 1 and stale[0].startswith(".model.rift.")
    other = tmp_path / ".other.rift.123.abc.tmp"  # not ours to remove: another target's
    other.write_bytes(b"x")
    write_bytes_atomic(target, b"whole")
    assert target.read_bytes() == b"whole"
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [".other.rift.123.abc.tmp", "model.rift"]


def test_a_live_writers_temporary_is_left_alone(tmp_path):
    from riftco.core import write_bytes_atomic

    target = tmp_path / "model.rift"
    live = tmp_path / f".model.rift.{os.getppid()}.inflight.tmp"  # our parent is alive
    live.write_bytes(b"x")
    write_bytes_atomic(target, b"whole")
    assert live.exists()
