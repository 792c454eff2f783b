"""Data parallelism without MPI: the simulated world, flat gradients, the ordered
reduction, gradient accumulation, rank-0 files, digest checks and resume layouts."""

import dataclasses
import io
import threading
import time

import numpy as np
import pytest
from dp_helpers import checkpoint_equal, run_pretrain
from train_helpers import STREAM, Bigram, tiny_pretrain_options, write_corpus

from riftco.optim import AdamW, WarmupCosineSchedule
from riftco.train.batches import ExampleSampler, RandomWindows
from riftco.train.distributed import (
    DataParallel,
    DistributedError,
    FlatGradients,
    SimulatedWorld,
    SingleProcess,
    check_same_parameters,
    chunk_bounds,
)
from riftco.train.distributed.mpi import check_not_singletons
from riftco.train.engine import Trainer


def test_chunk_bounds_cover_the_range_in_order():
    assert chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert chunk_bounds(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]


def test_reduce_scatter_adds_in_rank_order():
    # float32 addition is not associative: only rank order gives these bits
    values = np.array([1e8, 1.0, -1e8, 1.0], dtype=np.float32)
    expected = np.float32(0)
    for v in values:
        expected += v
    world = SimulatedWorld(4)

    def work(comm):
        mine = np.full(6, values[comm.rank], dtype=np.float32)
        out = np.zeros(
            chunk_bounds(6, 4)[comm.rank][1] - chunk_bounds(6, 4)[comm.rank][0], np.float32
        )
        comm.reduce_scatter(mine, out=out)
        full = np.empty(6, np.float32)
        comm.allgather(out, full)
        return full

    for full in world.run(work):
        assert (full == expected).all()
    assert expected != np.float32(values.sum(dtype=np.float64))


def test_broadcast_and_ordered_allreduce():
    def work(comm):
        got = comm.broadcast({"from": comm.rank} if comm.rank == 1 else None, root=1)
        counts = np.zeros(3)
        counts[comm.rank] = comm.rank + 1
        comm.allreduce_ordered(counts)
        return got, counts.tolist()

    for got, counts in SimulatedWorld(3).run(work):
        assert got == {"from": 1} and counts == [1.0, 2.0, 3.0]


def test_a_failing_rank_releases_the_others_quickly():
    def work(comm):
        if comm.rank == 2:
            raise ValueError("rank 2 broke")
        comm.barrier()

    started = time.monotonic()
    with pytest.raises(ValueError, match="rank 2 broke"):
        SimulatedWorld(3, timeout=60).run(work)
    assert time.monotonic() - started < 10


def test_flat_gradients_are_views_of_one_buffer_in_buckets():
    import riftco.autograd as ag
    import riftco.tensor as rt

    params = [ag.Parameter(rt.normal(s, seed=i)) for i, s in enumerate([(3, 5), (7,), (2, 2)])]
    flat = FlatGradients(params, bucket_bytes=4 * 6)
    assert flat.elements == 26 and all(np.shares_memory(v, flat.buffer) for v in flat.views)
    assert flat.buckets[0] == (0, 6) and flat.buckets[-1] == (24, 26)
    params[0].grad = rt.ones((3, 5))
    params[2].grad = rt.full((2, 2), 2.0)
    present = flat.gather(0.5)
    assert present.tolist() == [1, 0, 1]
    assert flat.buffer[:15].tolist() == [0.5] * 15 and flat.buffer[15:22].tolist() == [0.0] * 7
    flat.scatter(present)
    assert params[1].grad is None and params[2].grad.numpy().tolist() == [[1.0, 1.0]] * 2


def test_rows_of_a_batch_match_the_whole_batch():
    whole, part = RandomWindows(STREAM, 8, 6, seed=3), RandomWindows(STREAM, 8, 6, seed=3)
    a, b = whole.next_batch(), part.next_batch(rows=[4, 1])
    assert (b.inputs == a.inputs[[4, 1]]).all() and whole.state_dict() == part.state_dict()
    docs = [np.arange(n, dtype=np.int64) for n in (5, 9, 12, 3)]
    whole, part = ExampleSampler(docs, 8, 3, seed=1), ExampleSampler(docs, 8, 3, seed=1)
    for _ in range(3):
        a, b = whole.next_batch(), part.next_batch(rows=[2])
        assert (b.inputs == a.inputs[[2]]).all() and (b.weights == a.weights[[2]]).all()
    assert whole.state_dict() == part.state_dict()


def bigram_run(parallel, steps=8):
    model = Bigram(13)
    optimizer = AdamW([model.table], lr=0.05, weight_decay=0.01)
    source = RandomWindows(STREAM, 16, 8, seed=1)
    trainer = Trainer(
        model,
        optimizer,
        WarmupCosineSchedule(0.05, 3, steps),
        source,
        stage="pretraining",
        total_steps=steps,
        parallel=parallel,
    )
    trainer.run()
    return trainer.weights()["table"], [m.without_timing() for m in trainer.history]


@pytest.mark.parametrize("size,accum", [(4, 1), (2, 2), (1, 4)])
def test_every_layout_of_four_micro_batches_gives_the_same_bits(size, accum):
    reference = bigram_run(DataParallel(SingleProcess(), grad_accum=4, bucket_bytes=100))

    def work(comm):
        return bigram_run(DataParallel(comm, grad_accum=accum, bucket_bytes=100))

    for weights, history in SimulatedWorld(size).run(work):
        assert np.array_equal(weights, reference[0]) and history == reference[1]


def test_the_plain_sum_is_close_and_one_batch_differs_in_bits_only():
    ordered = bigram_run(DataParallel(SingleProcess(), grad_accum=2))
    summed = SimulatedWorld(2).run(lambda c: bigram_run(DataParallel(c, reduction="sum")))[0]
    whole = bigram_run(None)
    np.testing.assert_allclose(summed[0], ordered[0], atol=1e-5)
    np.testing.assert_allclose(whole[0], ordered[0], atol=1e-5)


def test_a_batch_that_does_not_split_is_refused():
    with pytest.raises(DistributedError, match="multiple of 3"):
        bigram_run(DataParallel(SingleProcess(), grad_accum=3))


def test_ranks_with_other_parameters_are_stopped():
    def work(comm):
        weights = {"w": np.full(4, 1.0 if comm.rank != 2 else 1.5, np.float32)}
        return check_same_parameters(comm, weights, "start")

    with pytest.raises(DistributedError, match=r"rank\(s\) \[2\] differ"):
        SimulatedWorld(3).run(work)
    same = SimulatedWorld(2).run(lambda c: check_same_parameters(c, {"w": np.ones(2)}, "start"))
    assert same[0] == same[1]


def test_the_singleton_guard():
    with pytest.raises(DistributedError, match="started 4 processes"):
        check_not_singletons(1, {"OMPI_COMM_WORLD_SIZE": "4"})
    with pytest.raises(DistributedError, match="SLURM_STEP_NUM_TASKS=2"):
        check_not_singletons(1, {"SLURM_STEP_NUM_TASKS": "2"})
    check_not_singletons(4, {"OMPI_COMM_WORLD_SIZE": "4"})
    check_not_singletons(1, {"SLURM_NTASKS": "8"})  # a batch script, not a job step
    check_not_singletons(1, {})


@pytest.fixture
def corpus(tmp_path):
    return str(write_corpus(tmp_path))


def options(corpus, **training):
    base = tiny_pretrain_options(steps=6, batch_size=8, eval_every=3, **training)
    return dataclasses.replace(base, data=corpus)


def test_simulated_world_and_accumulation_make_the_same_files(tmp_path, corpus):
    opts = options(corpus, checkpoint_every=3)
    accum = run_pretrain(opts, tmp_path / "accum", grad_accum=4)
    world = run_pretrain(opts, tmp_path / "world", world=4)
    assert accum.bundle.read_bytes() == world.bundle.read_bytes()
    assert checkpoint_equal(accum.checkpoint, world.checkpoint)
    assert [m.without_timing() for m in accum.history] == [
        m.without_timing() for m in world.history
    ]
    # rank 0 alone wrote: one metrics log, one checkpoint, one bundle
    assert sorted(p.name for p in (tmp_path / "world").iterdir() if p.suffix != ".png") == [
        "base.rift",
        "pretraining-metrics.jsonl",
        "pretraining.riftckpt",
    ]


def test_dropout_keeps_the_bits_across_layouts(tmp_path, corpus):
    opts = options(corpus)
    opts = dataclasses.replace(opts, model=dataclasses.replace(opts.model, dropout=0.2))
    accum = run_pretrain(opts, tmp_path / "accum", grad_accum=2)
    world = run_pretrain(opts, tmp_path / "world", world=2)
    assert accum.bundle.read_bytes() == world.bundle.read_bytes()


def test_a_stop_on_one_rank_stops_every_rank_at_the_same_step(tmp_path, corpus):
    counter = {"calls": 0}
    lock = threading.Lock()

    def stop_on_rank_one(comm):
        def stop():
            if comm.rank != 1:
                return False
            with lock:
                counter["calls"] += 1
                return counter["calls"] >= 2

        return stop

    result = run_pretrain(options(corpus), tmp_path / "run", world=2, stop=stop_on_rank_one)
    assert result.outcome == "interrupted" and result.history[-1].step == 2


@pytest.mark.parametrize("world,accum,warns", [(2, 1, False), (1, 2, False), (4, 1, True)])
def test_resume_at_the_same_and_another_layout(tmp_path, corpus, world, accum, warns):
    opts = options(corpus, checkpoint_every=3)
    whole = run_pretrain(opts, tmp_path / "whole", world=2)
    paused = run_pretrain(opts, tmp_path / "paused", world=2, stop=lambda comm: lambda: True)
    assert paused.outcome == "interrupted"
    with pytest.warns(RuntimeWarning, match="not be bit-identical") if warns else _no_warning():
        resumed = run_pretrain(
            opts, tmp_path / "paused", world=world, grad_accum=accum, resume=paused.checkpoint
        )
    assert resumed.outcome == "finished" and resumed.summary["steps"] == 6
    assert resumed.summary["tokens_seen"] == whole.summary["tokens_seen"]
    if not warns:  # the same micro-batches: bit for bit the uninterrupted run
        assert resumed.bundle.read_bytes() == whole.bundle.read_bytes()


class _no_warning:
    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("error", RuntimeWarning)

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
def test_post_training_over_a_simulated_world(tmp_path, corpus, method):
    from dp_helpers import run_post_train

    base = run_pretrain(options(corpus), tmp_path / "base", grad_accum=1)
    accum = run_post_train(base.bundle, tmp_path / "accum", grad_accum=2, method=method)
    world = run_post_train(base.bundle, tmp_path / "world", world=2, method=method)
    assert accum.bundle.read_bytes() == world.bundle.read_bytes()
    assert checkpoint_equal(accum.checkpoint, world.checkpoint)
    if method != "full":
        adapters = "chat-adapters.safetensors"
        first, second = (tmp_path / name / adapters for name in ("accum", "world"))
        assert first.read_bytes() == second.read_bytes()


def test_the_command_runs_a_simulated_world(tmp_path, corpus, capsys):
    from riftco.train.commands import pretrain_main

    tiny = "--tokenizer byte --context 16 --d-model 16 --layers 1 --heads 2 --d-ff 32".split()
    args = [*tiny, "--data", corpus, "--steps", "2", "--batch-size", "4", "--sample", ""]
    assert pretrain_main([*args, "--out", str(tmp_path / "a"), "--simulate-world", "2"]) == 0
    assert pretrain_main([*args, "--out", str(tmp_path / "b"), "--grad-accum", "2"]) == 0
    a, b = (tmp_path / "a" / "base.rift").read_bytes(), (tmp_path / "b" / "base.rift").read_bytes()
    assert a == b
    assert capsys.readouterr().out.count("bundle:") == 2  # rank 0 alone reports
    assert pretrain_main([*args, "--out", str(tmp_path / "c"), "--grad-accum", "3"]) == 1
    assert "multiple of 3" in capsys.readouterr().err


def test_distributed_without_mpi4py_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    import sys

    from riftco.train.commands import pretrain_main
    from riftco.train.distributed import mpi

    monkeypatch.setattr(mpi, "_WORLD", None)
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    assert pretrain_main(["--out", str(tmp_path), "--distributed"]) == 1
    assert "riftco-train[mpi]" in capsys.readouterr().err


def test_flag_errors(capsys):
    from riftco.train.commands import pretrain_main

    for bad in (["--distributed", "--simulate-world", "2"], ["--grad-accum", "0"]):
        with pytest.raises(SystemExit):
            pretrain_main(bad)
    assert "exclude each other" in capsys.readouterr().err


def test_progress_goes_to_rank_zero_only(tmp_path, corpus):
    streams = []

    def progress(comm):
        stream = io.StringIO()
        streams.append((comm.rank, stream))
        return stream

    run_pretrain(options(corpus), tmp_path / "run", world=2, progress=progress)
    text = dict(streams)
    assert "pretraining" in text[0].getvalue() and text[1].getvalue() == ""
