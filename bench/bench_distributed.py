"""Data-parallel pretraining over MPI: 2 ranks x 1 thread against 1 rank x 2 threads.

One ``mpiexec -n 2`` job on the ``small`` GPT-2 model (V=512, T=256, D=384, H=6, L=6,
FF=1536, global batch B=8, the embedded corpus) alternates, round after round:

- one process: rank 0 trains alone with 2 kernel threads (rank 1 sleeps, not polling);
- two ranks: each trains 4 rows of every batch with 1 thread, gradients reduced in
  fixed order (the default) over 4 MiB buckets.

It then times the reduction of the model's gradients alone (bucketed and in one call,
ordered and MPI's sum), prints the share of a step it takes, and the arithmetic of
8 hosts. Figures only; nothing is asserted about time.

    python bench/bench_distributed.py [--rounds 3] [--steps 3] [--warmup 2]

(it launches itself under the ``mpiexec`` beside the interpreter, or on PATH; needs
``pip install 'riftco-train[mpi]'``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

B, T = 8, 256
LR = 3e-4


def launch(args: argparse.Namespace) -> int:
    mpiexec = Path(sys.executable).parent / "mpiexec"
    found = str(mpiexec) if mpiexec.exists() else shutil.which("mpiexec")
    if found is None:
        print("bench_distributed: no mpiexec (pip install 'riftco-train[mpi]'); skipped")
        return 0
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    command = [found, "-n", "2", sys.executable, __file__, "--worker"]
    command += ["--rounds", str(args.rounds), "--steps", str(args.steps)]
    command += ["--warmup", str(args.warmup)]
    return subprocess.run(command, env=env).returncode


def idle_wait(comm) -> None:
    """A barrier that sleeps instead of spinning, so the waiting rank leaves its core."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.002)


def trainer(config, stream, total, parallel):
    import riftco.nn as nn
    from riftco.optim import AdamW, WarmupCosineSchedule, weight_decay_groups
    from riftco.train.batches import RandomWindows
    from riftco.train.engine import Trainer

    model = nn.DecoderOnlyTransformer(config, seed=0)
    groups = [g for g in weight_decay_groups(model.named_parameters(), 0.1) if g["params"]]
    optimizer = AdamW(groups, lr=LR, betas=(0.9, 0.95), max_grad_norm=1.0)
    schedule = WarmupCosineSchedule(LR, 2, total)
    source = RandomWindows(stream, T, B, seed=0)
    return Trainer(
        model,
        optimizer,
        schedule,
        source,
        stage="pretraining",
        total_steps=total,
        parallel=parallel,
    )


def time_reductions(world, flat, repeats: int = 5) -> dict[str, float]:
    from riftco.train.distributed import FlatGradients, GradientReducer

    whole = FlatGradients(flat.parameters, bucket_bytes=flat.buffer.nbytes + 4)
    found = {}
    for label, layout, reduction in (
        ("ordered, 4 MiB buckets", flat, "ordered"),
        ("ordered, one call", whole, "ordered"),
        ("MPI sum, 4 MiB buckets", flat, "sum"),
        ("MPI sum, one call", whole, "sum"),
    ):
        reducer = GradientReducer(world, layout, reduction)
        layout.buffer[...] = np.float32(1e-3) * (world.rank + 1)
        times = []
        for _ in range(repeats):
            world.barrier()
            start = time.perf_counter()
            reducer.begin()
            reducer.add()
            reducer.finish()
            times.append(time.perf_counter() - start)
        found[label] = statistics.median(times)
    return found


def worker(args: argparse.Namespace) -> int:
    import riftco.nn as nn
    import riftco.tensor as rt
    from riftco.train.corpus import load_text, split_corpus
    from riftco.train.distributed import (
        DEFAULT_BUCKET_BYTES,
        DataParallel,
        FlatGradients,
        SingleProcess,
    )
    from riftco.train.distributed.mpi import mpi_world
    from riftco.train.tokens import encode_documents, fit_tokenizer, token_stream

    world = mpi_world()
    comm = world.comm
    root = world.rank == 0
    if root:
        train, _ = split_corpus(load_text())
        tokenizer = fit_tokenizer("bpe", train, vocab_size=512 - 5)
        stream = token_stream(encode_documents(tokenizer, train))
        vocab = tokenizer.vocab_size
    else:
        stream, vocab = None, None
    stream, vocab = world.broadcast((stream, vocab), root=0)
    config = nn.TransformerConfig.preset("gpt2", size="small", vocab_size=vocab)
    total = args.rounds * args.steps + args.warmup + 1
    single = trainer(config, stream, total, DataParallel(SingleProcess())) if root else None
    double = trainer(config, stream, total, DataParallel(world))
    if root:
        print(
            f"data-parallel pretraining, small gpt2 (V={vocab}, T={T}, D={config.d_model}, "
            f"L={config.n_layers}, global B={B}), {os.cpu_count()} cores",
            flush=True,
        )

    def one_process(steps: int) -> list[float]:
        rates = []
        if root:
            rt.set_num_threads(2)
            rates = [single.train_step().tokens_per_second for _ in range(steps)]
        idle_wait(comm)
        return rates

    def two_ranks(steps: int) -> list[float]:
        rt.set_num_threads(1)
        world.barrier()
        return [double.train_step().tokens_per_second for _ in range(steps)]

    one_process(args.warmup)
    two_ranks(args.warmup)
    ones, twos = [], []
    for round_index in range(args.rounds):
        a, b = one_process(args.steps), two_ranks(args.steps)
        ones += a
        twos += b
        if root:
            print(
                f"round {round_index + 1}: 1 rank x 2 threads {statistics.median(a):7,.0f} tok/s"
                f" | 2 ranks x 1 thread {statistics.median(b):7,.0f} tok/s",
                flush=True,
            )
    trainable = [p for p in double.parameters.values() if p.requires_grad]
    flat = FlatGradients(trainable, DEFAULT_BUCKET_BYTES)
    reductions = time_reductions(world, flat)
    if not root:
        return 0
    one, two = statistics.median(ones), statistics.median(twos)
    step = B * T / two
    print(f"median: 1 rank {one:,.0f} tok/s, 2 ranks {two:,.0f} tok/s, ratio x{two / one:.2f}")
    megabytes = flat.buffer.nbytes / 2**20
    print(f"gradient reduction of {megabytes:.1f} MiB (2 ranks, this machine):")
    for label, seconds in reductions.items():
        print(f"  {label:24s} {seconds * 1e3:7.1f} ms ({100 * seconds / step:4.1f}% of a step)")
    extra = reductions["ordered, 4 MiB buckets"] - reductions["MPI sum, 4 MiB buckets"]
    print(f"the ordered reduction adds {extra * 1e3:.1f} ms per step over MPI's sum")
    hosts = 8
    for gbits in (10, 100):
        # each host runs this 2-rank step, then a ring all-reduce between the hosts
        wire = 2 * (hosts - 1) / hosts * flat.buffer.nbytes / (gbits * 1e9 / 8)
        rate = hosts * B * T / (step + wire)
        print(
            f"{hosts} hosts like this one (global batch {hosts * B}) over {gbits} Gb/s: "
            f"+{wire * 1e3:.0f} ms per step between hosts, ~{rate:,.0f} tok/s "
            f"({rate / two:.1f}x these 2 ranks)"
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two layouts")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round and layout")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per layout first")
    parser.add_argument("--worker", action="store_true", help="(internal) one rank of the job")
    args = parser.parse_args()
    return worker(args) if args.worker else launch(args)


if __name__ == "__main__":
    sys.exit(main())
