"""`riftco demo`: the main job, on the embedded default data."""

from __future__ import annotations

import argparse
import time


def main(argv: list[str]) -> int:
    """Run the main job on the embedded default data and print what it made."""
    parser = argparse.ArgumentParser(prog="riftco demo", description=main.__doc__)
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    return tensor_tour(args.seed)


def tensor_tour(seed: int) -> int:
    """A short tour of the tensor stack: one attention step on the CPU backend."""
    import riftco.tensor as rt

    start = time.perf_counter()
    backend = rt.get_backend()
    print(f"backend: {backend.name} ({backend.describe()})")
    tokens, width = 8, 16
    x = rt.normal((tokens, width), seed=seed)
    wq, wk, wv = (rt.normal((width, width), std=width**-0.5, seed=seed + i) for i in (1, 2, 3))
    q, k, v = x @ wq, x @ wk, x @ wv
    scores = rt.matmul(q, k, transpose_b=True) * (1.0 / width**0.5)
    attention = scores.softmax(causal=True)
    out = attention @ v
    print(f"causal attention over {tokens} tokens of width {width}: output {out.shape}")
    print("attention row 3 (future keys get exactly 0):")
    print("  " + " ".join(f"{p:.3f}" for p in attention[3].tolist()))
    print(f"done in {time.perf_counter() - start:.3f} s")
    return 0
