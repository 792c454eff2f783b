"""Per-operation overhead of riftco.autograd on tiny tensors, next to PyTorch's.

Small models live or die by the fixed cost of each recorded operation. This runs
chains of one operation on [4, 4] float32 tensors and prints microseconds per
operation for: the bare riftco.tensor op (no autograd), the recorded forward pass,
and forward + backward; then the same chains in PyTorch autograd when ``torch`` is
importable (same thread count), and the ratio. It prints figures only; nothing is
asserted about time.

    python bench/bench_autograd.py [--steps 200] [--repeat 7]
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

import numpy as np

import riftco.autograd as ag
import riftco.tensor as rt

SHAPE = (4, 4)


def _inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.Generator(np.random.PCG64(seed))
    return {
        "x": rng.uniform(-0.5, 0.5, SHAPE).astype(np.float32),
        "b": rng.uniform(-0.01, 0.01, SHAPE).astype(np.float32),
        "m": rng.uniform(0.99, 1.01, SHAPE).astype(np.float32),
        "w": (np.eye(4) + rng.uniform(-0.01, 0.01, SHAPE)).astype(np.float32),
        "s": rng.uniform(-0.02, 0.02, SHAPE).astype(np.float32),
    }


# name -> (ops per step, one step as a function of (y, operands)); values stay bounded.
CHAINS: dict[str, tuple[int, Callable]] = {
    "add": (1, lambda y, o: y + o["b"]),
    "mul": (1, lambda y, o: y * o["m"]),
    "matmul": (1, lambda y, o: y @ o["w"]),
    "tanh": (1, lambda y, o: y.tanh()),
    "exp": (4, lambda y, o: ((y @ o["s"]) * o["m"] + o["b"]).exp()),  # matmul, mul, add, exp
}


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _riftco(name: str, steps: int, repeat: int) -> tuple[float, float, float]:
    per_step, step = CHAINS[name]
    arrays = _inputs(0)
    tensors = {k: rt.from_numpy(v) for k, v in arrays.items()}
    variables = {k: ag.Variable(t, requires_grad=True) for k, t in tensors.items()}

    def bare():
        y = tensors["x"]
        for _ in range(steps):
            y = step(y, tensors)
        return y.sum()

    def forward():
        y = variables["x"]
        for _ in range(steps):
            y = step(y, variables)
        return y.sum()

    def forward_backward():
        forward().backward()

    ops = steps * per_step + 1
    return tuple(_best(f, repeat) / ops * 1e6 for f in (bare, forward, forward_backward))


def _torch(name: str, steps: int, repeat: int):
    import torch

    per_step, step = CHAINS[name]
    variables = {k: torch.tensor(v, requires_grad=True) for k, v in _inputs(0).items()}

    def forward():
        y = variables["x"]
        for _ in range(steps):
            y = step(y, variables)
        return y.sum()

    def forward_backward():
        forward().backward()

    ops = steps * per_step + 1
    return tuple(_best(f, repeat) / ops * 1e6 for f in (forward, forward_backward))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    threads = rt.get_num_threads()
    try:
        import torch

        torch.set_num_threads(threads)
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    print(
        f"python {platform.python_version()}, riftco-autograd {ag.__version__}, cpu backend, "
        f"{threads} kernel threads, shape {SHAPE}, {args.steps} steps, best of {args.repeat}"
    )
    print(f"torch {torch_version or 'not installed'}")
    print("microseconds per operation:")
    header = f"{'chain':>8} {'tensor':>8} {'fwd':>8} {'fwd+bwd':>8} {'overhead':>9}"
    if torch_version:
        header += f" {'torch fwd':>10} {'torch f+b':>10} {'ratio f+b':>10}"
    print(header)
    for name in CHAINS:
        bare, fwd, both = _riftco(name, args.steps, args.repeat)
        line = f"{name:>8} {bare:8.2f} {fwd:8.2f} {both:8.2f} {fwd - bare:9.2f}"
        if torch_version:
            t_fwd, t_both = _torch(name, args.steps, args.repeat)
            line += f" {t_fwd:10.2f} {t_both:10.2f} {both / t_both:9.1f}x"
        print(line)
    print("overhead = recorded forward - bare tensor op; ratio = ours / torch, forward+backward")


if __name__ == "__main__":
    main()
