"""Data-parallel training over real MPI: the commands under ``mpiexec -n 2`` and
``-n 4`` give the bits of one process, a failing rank ends the job in seconds, the
singleton guard, and resume at the same and another world size.

Needs mpi4py and an mpiexec (``pip install 'riftco-train[mpi]'``); skipped without
them unless RIFTCO_REQUIRE_MPI=1 (the tox env ``test-train-mpi`` sets it).
"""

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dp_helpers import checkpoint_equal, run_pretrain
from train_helpers import tiny_pretrain_options, write_corpus

HERE = Path(__file__).parent
ENTRY = HERE / "mpi_entry.py"
LAUNCH_TIMEOUT = 120


def _mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def _missing() -> str | None:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install 'riftco-train[mpi]')"
    if _mpiexec() is None:
        return "no mpiexec on PATH"
    return None


if _missing():
    if os.environ.get("RIFTCO_REQUIRE_MPI") == "1":
        raise RuntimeError(f"RIFTCO_REQUIRE_MPI=1 but {_missing()}")
    pytest.skip(_missing(), allow_module_level=True)

TINY = "--tokenizer byte --context 16 --d-model 16 --layers 1 --heads 2 --d-ff 32".split()
TRAIN = "--batch-size 8 --steps 6 --eval-every 3 --eval-batches 2 --checkpoint-every 3".split()


def environment(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        RIFTCO_NUM_THREADS="1",
        RAYON_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]),
    )
    env.update(extra)
    return env


def mpiexec(n: int, *args: str, **extra: str) -> subprocess.CompletedProcess:
    command = [_mpiexec(), "-n", str(n)]
    if n > 2:
        command.append("--oversubscribe")
    command += [sys.executable, str(ENTRY), *args]
    return subprocess.run(
        command,
        env=environment(**extra),
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT,
    )


@pytest.fixture
def corpus(tmp_path):
    return str(write_corpus(tmp_path))


def in_process(main, *args: str) -> None:
    assert main(list(args)) == 0


@pytest.mark.parametrize("ranks", [2, 4])
def test_ranks_make_the_files_of_one_process(tmp_path, corpus, ranks):
    from riftco.train.commands import pretrain_main

    common = [*TINY, *TRAIN, "--data", corpus, "--sample", ""]
    done = mpiexec(ranks, "pretrain", *common, "--out", str(tmp_path / "mpi"), "--distributed")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("bundle:") == 1  # rank 0 alone reports
    in_process(pretrain_main, *common, "--out", str(tmp_path / "accum"), "--grad-accum", str(ranks))
    in_process(
        pretrain_main, *common, "--out", str(tmp_path / "sim"), "--simulate-world", str(ranks)
    )
    bundle = (tmp_path / "mpi" / "base.rift").read_bytes()
    for other in ("accum", "sim"):
        assert (tmp_path / other / "base.rift").read_bytes() == bundle, other
        assert checkpoint_equal(
            tmp_path / "mpi" / "pretraining.riftckpt", tmp_path / other / "pretraining.riftckpt"
        ), other


def test_the_plain_sum_trains_to_nearly_the_same_model(tmp_path, corpus):
    import numpy as np

    from riftco.interchange import read_bundle
    from riftco.train.commands import pretrain_main

    common = [*TINY, *TRAIN, "--data", corpus, "--sample", ""]
    summed = str(tmp_path / "sum")
    done = mpiexec(2, "pretrain", *common, "--out", summed, "--distributed", "--reduction", "sum")
    assert done.returncode == 0, done.stderr[-3000:]
    in_process(pretrain_main, *common, "--out", str(tmp_path / "one"), "--grad-accum", "2")
    ordered, summed = (read_bundle(tmp_path / r / "base.rift") for r in ("one", "sum"))
    for name, weight in ordered.tensors.items():
        np.testing.assert_allclose(summed.tensors[name], weight, atol=1e-4, err_msg=name)


def test_lora_over_two_ranks_equals_one_process(tmp_path, corpus):
    from riftco.train.commands import post_train_main, pretrain_main

    in_process(
        pretrain_main, *TINY, *TRAIN, "--data", corpus, "--out", str(tmp_path), "--sample", ""
    )
    base = str(tmp_path / "base.rift")
    common = ["--base", base, "--method", "lora", "--steps", "4", "--batch-size", "4"]
    common += ["--eval-every", "2", "--eval-batches", "2", "--sample", ""]
    done = mpiexec(2, "post-train", *common, "--out", str(tmp_path / "mpi"), "--distributed")
    assert done.returncode == 0, done.stderr[-3000:]
    in_process(post_train_main, *common, "--out", str(tmp_path / "one"), "--grad-accum", "2")
    for name in ("chat.rift", "chat-adapters.safetensors"):
        assert (tmp_path / "mpi" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()


def test_a_rank_that_raises_ends_the_job_within_seconds(tmp_path, corpus):
    # without the abort, rank 0 would wait for rank 1 forever (the launch timeout)
    args = [*TINY, "--data", corpus, "--out", str(tmp_path), "--steps", "100000", "--sample", ""]
    mark = tmp_path / "failed-at"
    done = mpiexec(
        2,
        "pretrain",
        *args,
        "--distributed",
        RIFTCO_TEST_FAIL_RANK="1",
        RIFTCO_TEST_FAIL_MARK=str(mark),
    )
    finished = time.time()
    assert done.returncode != 0
    assert "injected failure on rank 1" in done.stderr
    assert finished - float(mark.read_text()) < 10


def test_an_uncaught_exception_aborts_every_rank(tmp_path):
    mark = tmp_path / "failed-at"
    done = mpiexec(2, "uncaught", RIFTCO_TEST_FAIL_MARK=str(mark))
    finished = time.time()
    assert done.returncode != 0
    assert finished - float(mark.read_text()) < 10


def test_singleton_copies_are_refused(tmp_path, corpus):
    # a launcher that is not the MPI's own (here: two plain copies told PMI_SIZE=2)
    args = [sys.executable, str(ENTRY), "pretrain", *TINY, "--data", corpus, "--distributed"]
    copies = [
        subprocess.Popen(
            [*args, "--out", str(tmp_path / str(r))],
            env=environment(PMI_SIZE="2", PMI_RANK=str(r)),
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    for copy in copies:
        _, err = copy.communicate(timeout=LAUNCH_TIMEOUT)
        assert copy.returncode == 1 and "MPI sees a world of 1" in err
    assert not list(tmp_path.glob("*/base.rift"))


def test_resume_at_the_same_and_at_another_world_size(tmp_path, corpus):
    opts = dataclasses.replace(
        tiny_pretrain_options(steps=6, batch_size=8, eval_every=3, checkpoint_every=3),
        data=corpus,
    )
    whole = run_pretrain(opts, tmp_path / "whole", world=2)
    calls = {"n": 0}

    def stop_at_three(comm):  # rank 0 asks to stop after step 3; the ranks vote
        def stop():
            if comm.rank != 0:
                return False
            calls["n"] += 1
            return calls["n"] >= 3

        return stop

    paused = run_pretrain(opts, tmp_path / "paused", world=2, stop=stop_at_three)
    assert paused.outcome == "interrupted"
    for ranks in (2, 4):
        folder = tmp_path / f"resume{ranks}"
        shutil.copytree(tmp_path / "paused", folder)
        done = mpiexec(
            ranks,
            "pretrain",
            "--resume",
            str(folder / "pretraining.riftckpt"),
            "--data",
            corpus,
            "--sample",
            "",
            "--distributed",
        )
        assert done.returncode == 0, done.stderr[-3000:]
        warned = "not be bit-identical" in done.stderr
        resumed = (folder / "base.rift").read_bytes()
        if ranks == 2:
            assert not warned and resumed == whole.bundle.read_bytes()
        else:
            assert warned and "6 steps" in done.stdout
            assert f"{whole.summary['tokens_seen']:,} tokens" in done.stdout
