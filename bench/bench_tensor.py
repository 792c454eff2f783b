"""riftco-tensor CPU backend against numpy, measured in the same run.

Prints GFLOP/s for matmul (n = 256 ... 2048 and a batched case), throughput of
elementwise ops and softmax at 1M elements, and the fixed cost of one op call
on a tiny tensor. Each figure is the best of several alternating repetitions
(this machine's speed drifts), and every ratio is riftco / numpy (> 1 = faster).
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import numpy as np

import riftco.tensor as rt


def best_time(fn, repeat: int, number: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def paired(ours, theirs, repeat: int, number: int) -> tuple[float, float]:
    """Alternate the two so drift hits both alike; best time of each."""
    a = b = float("inf")
    for _ in range(repeat):
        a = min(a, best_time(ours, 3, number))
        # Idle pool threads of either library spin for a while after a call
        # (OpenBLAS for about 0.1 s); let them settle before the other side runs.
        time.sleep(0.25)
        b = min(b, best_time(theirs, 3, number))
        time.sleep(0.25)
    return a, b


def row(name: str, ours: float, theirs: float, unit: str, scale: float) -> None:
    print(
        f"{name:<34} riftco {scale / ours:9.2f} {unit:<8} numpy {scale / theirs:9.2f} {unit:<8} "
        f"ratio {theirs / ours:5.2f}x"
    )


def bench_matmul(repeat: int) -> None:
    rng = np.random.default_rng(0)
    for n in (256, 512, 1024, 2048):
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        ta, tb = rt.tensor(a), rt.tensor(b)
        number = max(1, int(2e9 / (2 * n**3)))
        ours, theirs = paired(partial(rt.matmul, ta, tb), partial(np.matmul, a, b), repeat, number)
        row(f"matmul {n}x{n}", ours, theirs, "GFLOP/s", 2 * n**3 / 1e9)
    a = rng.standard_normal((32, 128, 64), dtype=np.float32)
    b = rng.standard_normal((32, 64, 128), dtype=np.float32)
    ta, tb = rt.tensor(a), rt.tensor(b)
    flops = 2 * 32 * 128 * 64 * 128 / 1e9
    ours, theirs = paired(lambda: ta @ tb, lambda: a @ b, repeat, 20)
    row("matmul [32,128,64]x[32,64,128]", ours, theirs, "GFLOP/s", flops)


def bench_elementwise(repeat: int) -> None:
    n = 1 << 20
    rng = np.random.default_rng(1)
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    tx, ty = rt.tensor(x), rt.tensor(y)
    cases = [
        ("add 1M", lambda: tx + ty, lambda: x + y),
        ("mul 1M", lambda: tx * ty, lambda: x * y),
        ("exp 1M", lambda: rt.exp(tx), lambda: np.exp(x)),
        ("tanh 1M", lambda: rt.tanh(tx), lambda: np.tanh(x)),
        ("relu 1M", lambda: rt.relu(tx), lambda: np.maximum(x, 0)),
        ("sum 1M", lambda: tx.sum(), lambda: x.sum()),
    ]
    for name, ours_fn, theirs_fn in cases:
        ours, theirs = paired(ours_fn, theirs_fn, repeat, 20)
        row(name, ours, theirs, "Melem/s", n / 1e6)
    s = rng.standard_normal((1024, 1024), dtype=np.float32)
    ts = rt.tensor(s)

    def numpy_softmax():
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    ours, theirs = paired(lambda: ts.softmax(), numpy_softmax, repeat, 10)
    row("softmax [1024,1024]", ours, theirs, "Melem/s", s.size / 1e6)


def bench_call_overhead(repeat: int) -> None:
    x = np.ones((4, 4), np.float32)
    t = rt.tensor(x)
    ours, theirs = paired(lambda: t + t, lambda: x + x, repeat, 20000)
    print(
        f"{'one op call, [4,4] add':<34} riftco {ours * 1e6:9.2f} us       numpy {theirs * 1e6:9.2f} us"
    )
    ours, theirs = paired(lambda: t @ t, lambda: x @ x, repeat, 20000)
    print(
        f"{'one op call, [4,4] matmul':<34} riftco {ours * 1e6:9.2f} us       numpy {theirs * 1e6:9.2f} us"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        f"riftco-tensor {rt.__version__}, {rt.get_num_threads()} kernel threads, numpy {np.__version__}"
    )
    try:
        from threadpoolctl import threadpool_info

        for pool in threadpool_info():
            print(
                f"  numpy BLAS: {pool.get('internal_api')} {pool.get('version')} "
                f"{pool.get('architecture')} threads={pool.get('num_threads')}"
            )
    except ImportError:
        pass
    bench_matmul(args.repeat)
    bench_elementwise(args.repeat)
    bench_call_overhead(args.repeat)


if __name__ == "__main__":
    main()
