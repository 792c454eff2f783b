"""STREAM-like memory bandwidth of this machine, per thread count: the ceiling that
the decode step's weight reads are measured against (``bench_decode.py`` prints it
beside the GB/s a decode step reached).

Measured through numpy (its ufuncs release the GIL, so each thread streams its own
arrays on its own core), not through riftco's kernels:

- **read**: ``np.maximum.reduce`` over a float32 array per thread (bytes read / s;
  a vectorized pass that does no more than compare, so the reads bound it);
- **triad**: ``a = b + s * c`` as ``np.multiply(c, s, out=a); np.add(a, b, out=a)``,
  counted as the bytes those two passes move (read c, write a, read a and b, write a).

Arrays are ``--mib`` MiB per thread (far beyond the last-level cache); each figure
is the best of ``--repeats`` and the thread counts alternate over ``--rounds``
rounds (medians). Nothing asserts on time.

    python bench/bench_stream.py [--threads 1,2] [--mib 256] [--repeats 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def _best(run, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def read_bandwidth(threads: int, mib: int = 256, repeats: int = 5) -> float:
    """GB/s that ``threads`` threads read, each reducing its own float32 array."""
    n = mib * (1 << 20) // 4
    arrays = [np.ones(n, np.float32) for _ in range(threads)]
    with ThreadPoolExecutor(threads) as pool:

        def run() -> None:
            list(pool.map(np.maximum.reduce, arrays))

        run()
        seconds = _best(run, repeats)
    return threads * n * 4 / seconds / 1e9


def triad_bandwidth(threads: int, mib: int = 256, repeats: int = 5) -> float:
    """GB/s that ``threads`` threads move, each running the triad on its own arrays."""
    n = mib * (1 << 20) // 4
    sets = [tuple(np.full(n, v, np.float32) for v in (0.0, 1.0, 2.0)) for _ in range(threads)]

    def triad(abc) -> None:
        a, b, c = abc
        np.multiply(c, np.float32(3.0), out=a)
        np.add(a, b, out=a)

    with ThreadPoolExecutor(threads) as pool:

        def run() -> None:
            list(pool.map(triad, sets))

        run()
        seconds = _best(run, repeats)
    return threads * 5 * n * 4 / seconds / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--mib", type=int, default=256, help="MiB per array per thread")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    counts = [int(t) for t in args.threads.split(",") if t]
    figures: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):
        for t in counts:
            figures.setdefault(("read", t), []).append(read_bandwidth(t, args.mib, args.repeats))
            figures.setdefault(("triad", t), []).append(triad_bandwidth(t, args.mib, args.repeats))
    print(f"numpy {np.__version__}; {args.mib} MiB per array per thread; medians of {args.rounds}")
    print(f"{'threads':>7}  {'read GB/s':>9}  {'triad GB/s':>10}  {'read per thread':>15}")
    for t in counts:
        read = statistics.median(figures[("read", t)])
        triad = statistics.median(figures[("triad", t)])
        print(f"{t:>7}  {read:9.1f}  {triad:10.1f}  {read / t:15.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
