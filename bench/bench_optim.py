"""Benchmark riftco-optim: seconds per Adam step on the `small` model's parameters.

The `small` GPT configuration (V=512, T=256, D=384, H=6, L=6, FF=1536; about 11.1M
parameters in 101 tensors) gets fixed random gradients, and each optimizer takes
repeated steps. Ours runs with contiguous and with paged moments; a step includes
the global gradient norm (it is always computed, for the step's statistics) and,
with clipping on, the clip. Where torch is importable, torch.optim.Adam runs on the
same shapes with its fused CPU kernel (also after clip_grad_norm_), its foreach
kernels and its default single-tensor loop, alternated with ours (this machine's speed drifts), and the
ratios are printed. Prints figures only; nothing here asserts on time.

    python bench/bench_optim.py [--steps N] [--rounds R] [--threads T]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import riftco.tensor as rt
from riftco.autograd import Parameter
from riftco.optim import Adam

SMALL = {"vocab": 512, "context": 256, "width": 384, "heads": 6, "layers": 6, "ff": 1536}


def small_shapes(c: dict[str, int] = SMALL) -> list[tuple[int, ...]]:
    """Parameter shapes of the GPT topology (pre-LN, biased projections, untied head)."""
    d, ff = c["width"], c["ff"]
    shapes: list[tuple[int, ...]] = [(c["vocab"], d), (c["context"], d)]
    for _ in range(c["layers"]):
        shapes += [(d,), (d,)]  # attention_norm
        shapes += [(d, d), (d,)] * 4  # query, key, value, output
        shapes += [(d,), (d,)]  # feed_forward_norm
        shapes += [(d, ff), (ff,), (ff, d), (d,)]  # expand, project
    shapes += [(d,), (d,), (d, c["vocab"])]  # final_norm, language_model_head
    return shapes


def host_arrays(shapes, seed: int, scale: float) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * scale).astype(np.float32) for s in shapes]


def ours(shapes, paged: bool, max_grad_norm: float | None):
    params = [Parameter(rt.from_numpy(a)) for a in host_arrays(shapes, 0, 0.02)]
    for p, g in zip(params, host_arrays(shapes, 1, 1e-3)):
        p.grad = rt.from_numpy(g)
    opt = Adam(params, lr=1e-4, max_grad_norm=max_grad_norm, paged=paged)
    return opt.step


def theirs(torch, shapes, clip: float | None = None, **kwargs):
    params = [torch.nn.Parameter(torch.from_numpy(a)) for a in host_arrays(shapes, 0, 0.02)]
    for p, g in zip(params, host_arrays(shapes, 1, 1e-3)):
        p.grad = torch.from_numpy(g)
    opt = torch.optim.Adam(params, lr=1e-4, **kwargs)
    if clip is None:
        return opt.step

    def clipped_step():
        torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
        opt.step()

    return clipped_step


def seconds_per_step(step, steps: int) -> float:
    step()  # moments are allocated on the first step
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def torch_variants(torch, shapes) -> dict:
    variants = {}
    for label, kwargs in [
        ("torch Adam fused", {"fused": True}),
        ("torch clip_grad_norm_ 1.0 + Adam fused", {"fused": True, "clip": 1.0}),
        ("torch Adam foreach", {"foreach": True}),
        ("torch Adam single-tensor", {"foreach": False}),
    ]:
        try:
            step = theirs(torch, shapes, **kwargs)
            step()
        except (RuntimeError, TypeError, ValueError) as exc:
            print(f"{label}: unavailable ({exc})")
            continue
        variants[label] = step
    return variants


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="steps per timing")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; median wins")
    parser.add_argument("--threads", type=int, default=0, help="kernel threads (0: default)")
    args = parser.parse_args(argv)
    if args.threads:
        rt.set_num_threads(args.threads)

    shapes = small_shapes()
    count = sum(int(np.prod(s)) for s in shapes)
    print(
        f"small config: {len(shapes)} tensors, {count:,} parameters; "
        f"riftco threads {rt.get_num_threads()}"
    )
    runs = {
        "riftco Adam contiguous": ours(shapes, paged=False, max_grad_norm=None),
        "riftco Adam paged(4096)": ours(shapes, paged=True, max_grad_norm=None),
        "riftco Adam contiguous, clip 1.0": ours(shapes, paged=False, max_grad_norm=1.0),
    }
    try:
        import torch
    except ImportError:
        print("torch is not importable: no comparison")
    else:
        torch.set_num_threads(rt.get_num_threads())
        print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
        runs.update(torch_variants(torch, shapes))

    times: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(args.rounds):
        for label, step in runs.items():
            times[label].append(seconds_per_step(step, args.steps))
    medians = {label: statistics.median(t) for label, t in times.items()}
    width = max(map(len, medians))
    base = medians.get("torch Adam fused") or medians.get("torch Adam foreach")
    for label, s in medians.items():
        ratio = f"   {base / s:5.2f}x torch's fastest batched Adam" if base else ""
        print(f"{label:<{width}}  {s * 1e3:8.2f} ms/step  {count / s / 1e9:6.2f} Gparam/s{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
