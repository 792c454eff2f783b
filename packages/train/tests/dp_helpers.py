"""Helpers for the data-parallel tests: a stage over a simulated world or one process,
and checkpoint comparison up to timing and layout."""

import io

import numpy as np

from riftco.train.checkpoint import read_checkpoint
from riftco.train.distributed import DataParallel, SimulatedWorld, SingleProcess
from riftco.train.post_training import PostTrainOptions, post_train
from riftco.train.pretraining import pretrain
from riftco.train.stage import TrainingOptions


def _on_ranks(world, grad_accum, job):
    def work(comm):
        return job(comm, DataParallel(comm, grad_accum=grad_accum, bucket_bytes=4096))

    if world == 1:
        return work(SingleProcess())
    return SimulatedWorld(world, timeout=120).run(work)[0]


def run_pretrain(options, out, world=1, grad_accum=1, stop=None, resume=None, progress=None):
    """Rank 0's result; ``stop`` and ``progress`` are functions of the communicator."""

    def job(comm, parallel):
        return pretrain(
            options,
            out,
            resume=resume,
            parallel=parallel,
            stop=stop(comm) if stop else None,
            progress=progress(comm) if progress else io.StringIO(),
        )

    return _on_ranks(world, grad_accum, job)


def run_post_train(base, out, world=1, grad_accum=1, method="lora"):
    from riftco.train.adapters import AdapterOptions

    training = TrainingOptions(
        steps=4,
        batch_size=4,
        learning_rate=5e-3,
        min_learning_rate=5e-4,
        warmup_steps=1,
        eval_every=2,
        eval_batches=2,
        checkpoint_every=0,
    )
    options = PostTrainOptions(training=training, adapters=AdapterOptions(method=method))

    def job(comm, parallel):
        return post_train(options, base, out, parallel=parallel, progress=io.StringIO())

    return _on_ranks(world, grad_accum, job)


def checkpoint_equal(a, b):
    """The same tensors, bytes for bytes, and the same state but for elapsed time and
    the layout (world size, accumulation) that made it."""
    first, second = read_checkpoint(a), read_checkpoint(b)
    if sorted(first.tensors) != sorted(second.tensors):
        return False
    for name, array in first.tensors.items():
        if array.tobytes() != np.asarray(second.tensors[name]).tobytes():
            return False

    def untimed(checkpoint):
        state = dict(checkpoint.manifest["state"])
        engine = {k: v for k, v in state["engine"].items() if k not in ("seconds", "parallel")}
        return {**state, "engine": engine}, checkpoint.manifest["run"]

    return untimed(first) == untimed(second)
