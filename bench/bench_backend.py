"""A GPU backend next to the CPU in one run: float32 matmul GFLOP/s, the
``tiny`` model's training-step tokens/s and its batch-1 greedy decode tokens/s
(a wgpu backend's whole-step decode plan and its op-by-op decoding, next to the
CPU's native decoder).

Each figure alternates between the backend and the CPU in rounds (this machine's
speed drifts) and reports medians. Matmuls on the device are timed from the
first dispatch to the end of a synchronization, so the figure includes the
device's queue. On Mesa's lavapipe (a CPU Vulkan device) the backend is slower
than the CPU: the figure is there to catch regressions and to be run on real
GPUs. Figures only; nothing is asserted about time.

    python bench/bench_backend.py [--backend vulkan] [--rounds 3] [--sizes 256 512 1024]
        [--decode-tokens 32]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

import riftco.nn as nn
import riftco.tensor as rt
from riftco.optim import AdamW, WarmupCosineSchedule, weight_decay_groups
from riftco.train.batches import RandomWindows
from riftco.train.corpus import load_text, split_corpus
from riftco.train.engine import Trainer
from riftco.train.tokens import encode_documents, fit_tokenizer, token_stream

B, T = 8, 64


def synchronize(backend: rt.Backend) -> None:
    wait = getattr(backend, "synchronize", None)
    if wait is not None:
        wait()


def matmul_gflops(name: str, n: int, reps: int) -> float:
    backend = rt.get_backend(name)
    rng = np.random.default_rng(0)
    a = rt.tensor(rng.standard_normal((n, n), dtype=np.float32), backend=name)
    b = rt.tensor(rng.standard_normal((n, n), dtype=np.float32), backend=name)
    (a @ b).numpy()  # compiled, warm
    synchronize(backend)
    start = time.perf_counter()
    outs = [a @ b for _ in range(reps)]
    synchronize(backend)
    elapsed = time.perf_counter() - start
    del outs
    return 2.0 * n**3 * reps / elapsed / 1e9


def trainer(name: str, stream: np.ndarray, vocab: int, total: int) -> Trainer:
    config = nn.TransformerConfig.preset("gpt2", size="tiny", vocab_size=vocab)
    model = nn.DecoderOnlyTransformer(config, seed=0, backend=name)
    groups = [g for g in weight_decay_groups(model.named_parameters(), 0.1) if g["params"]]
    optimizer = AdamW(groups, lr=3e-4, betas=(0.9, 0.95), max_grad_norm=1.0)
    schedule = WarmupCosineSchedule(3e-4, min(10, total), total)
    source = RandomWindows(stream, T, B, seed=0)
    return Trainer(
        model, optimizer, schedule, source, stage="pretraining", total_steps=total, backend=name
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="vulkan", help="the backend to compare with cpu")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of backend and cpu")
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument(
        "--steps", type=int, default=3, help="timed training steps per round and side"
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed training steps per side first"
    )
    parser.add_argument(
        "--decode-tokens", type=int, default=32, help="greedy tokens per decode run (0: skip)"
    )
    args = parser.parse_args()
    info = {b.name: b for b in rt.backends()}.get(args.backend)
    if info is None or not info.available:
        print(
            f"bench_backend: {args.backend} is unavailable ({info.reason if info else 'not installed'})"
        )
        return
    print(
        f"{args.backend}: {info.description}; cpu: {rt.get_num_threads()} threads, {platform.machine()}"
    )
    print(f"load average at start: {_load()}")
    for n in args.sizes:
        reps = max(2, min(20, int(4e9 / (2 * n**3))))
        rates: dict[str, list[float]] = {args.backend: [], "cpu": []}
        for _ in range(args.rounds):
            for name in rates:
                rates[name].append(matmul_gflops(name, n, reps))
        mine, cpu = (statistics.median(rates[k]) for k in (args.backend, "cpu"))
        print(
            f"matmul n={n:5d}: {args.backend} {mine:8.1f} GFLOP/s | cpu {cpu:8.1f} GFLOP/s "
            f"| ratio x{mine / cpu:.2f}",
            flush=True,
        )
    train, _ = split_corpus(load_text())
    tokenizer = fit_tokenizer("bpe", train, vocab_size=256)
    stream = token_stream(encode_documents(tokenizer, train))
    total = args.rounds * args.steps + args.warmup + 1
    runs = {
        name: trainer(name, stream, tokenizer.vocab_size, total) for name in (args.backend, "cpu")
    }
    for run in runs.values():
        for _ in range(args.warmup):
            run.train_step()
    step_rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            step_rates[name] += [run.train_step().tokens_per_second for _ in range(args.steps)]
    mine, cpu = (statistics.median(step_rates[k]) for k in (args.backend, "cpu"))
    print(
        f"tiny training step (B={B}, T={T}): {args.backend} {mine:,.0f} tok/s | cpu {cpu:,.0f} "
        f"tok/s | ratio x{mine / cpu:.2f}"
    )
    counters = _step_counters(rt.get_backend(args.backend), runs[args.backend])
    if counters:
        print("device traffic of one step: " + ", ".join(f"{k} {v}" for k, v in counters.items()))
    if args.decode_tokens:
        decode(args.backend, tokenizer.vocab_size, args.rounds, args.decode_tokens)
    print(f"load average at end: {_load()}")


def decode(name: str, vocab: int, rounds: int, tokens: int) -> None:
    """Batch-1 greedy decoding of the ``tiny`` model after a 16-token prompt: tokens/s
    of the decode steps, alternating the backend's plan, its op-by-op path (where the
    backend has ``decode_path``) and the CPU."""
    from riftco.nn.generation import SamplingConfig, generate

    backend = rt.get_backend(name)
    sides = [(name, "plan"), (name, "ops"), ("cpu", "")]
    if not hasattr(backend, "decode_path"):
        sides = [(name, ""), ("cpu", "")]
    config = nn.TransformerConfig.preset("gpt2", size="tiny", vocab_size=vocab)
    prompt = [[int(t) for t in np.random.default_rng(1).integers(0, vocab, 16)]]
    rates: dict[tuple[str, str], list[float]] = {side: [] for side in sides}
    traffic: dict[str, int] = {}
    for r in range(rounds + 1):
        for side in sides:
            be, path = side
            if path:
                backend.decode_path = path
            model = nn.DecoderOnlyTransformer(config, seed=0, backend=be)
            sampling = SamplingConfig(max_new_tokens=1, temperature=0.0)
            generate(model, prompt, sampling)  # the prompt (prefill) and compiles
            synchronize(rt.get_backend(be))
            stats = getattr(getattr(rt.get_backend(be), "device", None), "stats", None)
            before = stats() if stats and path == "plan" else None
            start = time.perf_counter()
            generate(model, prompt, SamplingConfig(max_new_tokens=tokens, temperature=0.0))
            elapsed = time.perf_counter() - start
            if before is not None:
                after = stats()
                traffic = {
                    k: round((after[k] - before[k]) / tokens, 1)
                    for k in ("dispatches", "submits", "uploads", "reads")
                }
            if r:  # the first round warms every side
                rates[side].append(tokens / elapsed)
    if hasattr(backend, "decode_path"):
        backend.decode_path = "plan"
    line = " | ".join(
        f"{be}{' ' + path if path else ''} {statistics.median(v):,.0f} tok/s"
        for (be, path), v in rates.items()
    )
    print(f"tiny greedy decode, batch 1, {tokens} tokens after a 16-token prompt: {line}")
    if traffic:
        print(
            "device traffic per generated token (plan, with the prompt's and sampling's share): "
            + ", ".join(f"{k} {v}" for k, v in traffic.items())
        )


def _load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _step_counters(backend: rt.Backend, run: Trainer) -> dict[str, int]:
    """The device's counters over one more training step (a wgpu backend's
    ``device.stats()``), or nothing for a backend without them."""
    device = getattr(backend, "device", None)
    stats = getattr(device, "stats", None)
    if stats is None:
        return {}
    synchronize(backend)
    before = stats()
    run.train_step()
    synchronize(backend)
    after = stats()
    keys = ("dispatches", "submits", "waits", "uploads", "reads", "bind_groups", "pipelines")
    return {k: after[k] - before[k] for k in keys if k in after}


if __name__ == "__main__":
    main()
