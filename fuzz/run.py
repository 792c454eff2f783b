"""Run every harness (or those named) for a fixed time each, under a memory cap and
a time limit, and report the executions each made.

    python fuzz/run.py [--seconds 30] [--memory-mb 2048] [--per-input 10] [--seed 0] [HARNESS ...]

The seeds come from make_corpus.py (run first); the inputs a harness finds go to
build/fuzz/corpus/<harness>/, a crashing input to build/fuzz/findings/. The child
runs under RLIMIT_AS (address space) and libFuzzer's own RSS and per-input limits,
so a blow-up or a hang is a failure, not a stuck machine. Exits non-zero when any
harness found something.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import WORK  # noqa: E402

HARNESSES = sorted(p.stem.removeprefix("harness_") for p in HERE.glob("harness_*.py"))
#: Address space beyond the RSS cap: numpy, the Rust kernels' thread pool and ONNX
#: reserve far more virtual memory than they touch.
ADDRESS_SLACK_MB = 4096


def _limit(address_mb: int):
    def apply() -> None:
        cap = address_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_one(
    name: str, seconds: int, memory_mb: int, per_input: int, seed: int
) -> tuple[int, int, float]:
    """(exit status, executions, wall seconds) of one harness's run."""
    corpus = WORK / "corpus" / name
    corpus.mkdir(parents=True, exist_ok=True)
    seeds = WORK / "seeds" / name
    findings = WORK / "findings"
    findings.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        str(HERE / f"harness_{name}.py"),
        str(corpus),
        str(seeds),
        f"-max_total_time={seconds}",
        f"-timeout={per_input}",
        f"-rss_limit_mb={memory_mb}",
        f"-malloc_limit_mb={memory_mb}",
        "-print_final_stats=1",
        f"-seed={seed}",
        f"-artifact_prefix={findings}/{name}-",
    ]
    env = dict(os.environ, RAYON_NUM_THREADS="1", PYTHONPATH=str(HERE), MPLBACKEND="Agg")
    start = time.monotonic()
    try:
        done = subprocess.run(
            command,
            env=env,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=seconds + 180,  # startup and the final merge; past this it hangs
            preexec_fn=_limit(memory_mb + ADDRESS_SLACK_MB),
            check=False,
        )
        status, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        status, output = -1, f"{exc.stdout or ''}{exc.stderr or ''}\nthe run did not end in time"
    elapsed = time.monotonic() - start
    found = re.findall(r"stat::number_of_executed_units:\s*(\d+)", output)
    runs = re.findall(r"Done (\d+) runs", output)
    executions = int(found[-1]) if found else int(runs[-1]) if runs else 0
    if status != 0:
        print(f"--- {name}: exit status {status}; the end of its output:\n{output[-6000:]}")
    return status, executions, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("harnesses", nargs="*", choices=[[], *HARNESSES], default=[])
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--memory-mb", type=int, default=2048)
    parser.add_argument("--per-input", type=int, default=10, help="seconds one input may take")
    parser.add_argument("--fresh", action="store_true", help="drop inputs found by earlier runs")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="libFuzzer's random seed (0: a new one each run; the short pass in make test "
        "fixes one, so that it explores the same way each time)",
    )
    args = parser.parse_args()
    if args.fresh:
        shutil.rmtree(WORK / "corpus", ignore_errors=True)
    if not (WORK / "seeds").exists():
        subprocess.run([sys.executable, str(HERE / "make_corpus.py"), str(WORK)], check=True)
    failed = []
    for name in args.harnesses or HARNESSES:
        status, executions, elapsed = run_one(
            name, args.seconds, args.memory_mb, args.per_input, args.seed
        )
        verdict = "ok" if status == 0 else "FOUND SOMETHING"
        print(f"{name:16} {executions:>9} executions in {elapsed:6.1f} s  {verdict}", flush=True)
        if status != 0:
            failed.append(name)
    if failed:
        print(f"findings in {WORK / 'findings'}: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
