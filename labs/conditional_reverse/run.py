"""Run the conditional-reversal study: ``python -m labs.conditional_reverse.run --help``.

Trains every requested variant for every seed on one profile, selects each run's
state on the validation split, measures the test split once, and writes a JSON record
and a report (Markdown and PNG plots) beside it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from labs.conditional_reverse import metrics
from labs.conditional_reverse.programs import VARIANTS
from labs.conditional_reverse.report import write_report
from labs.conditional_reverse.task import PROFILES, SPLITS, make_splits
from labs.conditional_reverse.train import train_variant
from riftco.core import write_bytes_atomic

PACKAGES = (
    "riftco-cajal",
    "riftco-nn",
    "riftco-tensor",
    "riftco-autograd",
    "riftco-optim",
    "riftco-train",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m labs.conditional_reverse.run",
        description="Compiled programs inside trained decoders on 'reverse the source if "
        "its first symbol is a trigger, else copy it'.",
    )
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    parser.add_argument(
        "--variants",
        default="F,P,T,I",
        help="comma-separated: F (exact frozen bilinear conditional map), P (exact frozen "
        "unary reversal), T (F-shaped, random and trainable), I (no program)",
    )
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 (model and data order)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="override the profile's step count")
    parser.add_argument("--output", type=Path, default=Path("runs/conditional-reverse/quick.json"))
    parser.add_argument("--no-report", action="store_true", help="write the JSON record only")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument(
        "--render",
        type=Path,
        default=None,
        metavar="RECORD",
        help="only write the report of an existing JSON record (beside it)",
    )
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        parser.error(f"--variants: expected some of {','.join(VARIANTS)}, found {args.variants!r}")
    if args.seeds < 1:
        parser.error(f"--seeds: expected at least 1, found {args.seeds}")
    args.variant_list = variants
    return args


def provenance() -> dict[str, Any]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", None
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    versions["numpy"] = np.__version__
    return {
        "commit": commit,
        "dirty": dirty,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "packages": versions,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render is not None:
        record = json.loads(args.render.read_text())
        print(f"report: {write_report(record, args.render.with_suffix(''))}")
        return 0
    profile = PROFILES[args.profile]
    if args.steps is not None:
        from dataclasses import replace

        profile = replace(profile, steps=args.steps, epochs=None)
    log = None if args.quiet else (lambda line: print(line, flush=True))
    started = time.perf_counter()
    splits = make_splits(profile)
    test = splits["test"]
    record: dict[str, Any] = {
        "study": "conditional_reverse",
        "profile": profile.to_dict(),
        "variants": args.variant_list,
        "seeds": list(range(args.first_seed, args.first_seed + args.seeds)),
        "provenance": provenance(),
        "splits": {
            name: {"examples": len(s), "trigger_fraction": float(s.triggered.mean())}
            for name, s in splits.items()
        },
        "source_disjoint": _disjoint(splits),
        "oracle": metrics.oracle(profile, test),
        "controls": metrics.controls(test, profile.length),
        "runs": [],
    }
    for variant in args.variant_list:
        for seed in record["seeds"]:
            if log:
                log(f"{profile.name} {variant} seed {seed}")
            run = train_variant(
                variant, profile, seed, splits, keep_points=seed == record["seeds"][0], log=log
            )
            record["runs"].append(run)
            if log:
                t = run["test"]
                log(
                    f"  test token {t['all_token']:.4f} exact {t['all_exact']:.4f} "
                    f"({run['timings']['train_seconds']:.1f} s)"
                )
    record["seconds"] = time.perf_counter() - started
    args.output.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=1, allow_nan=False, sort_keys=False) + "\n"
    write_bytes_atomic(args.output, text.encode())
    if not args.no_report:
        report = write_report(record, args.output.with_suffix(""))
        if log:
            log(f"report: {report}")
    if log:
        log(f"record: {args.output} ({record['seconds']:.1f} s)")
    return 0


def _disjoint(splits: dict) -> bool:
    seen: set[bytes] = set()
    for name in SPLITS:
        keys = {row.tobytes() for row in splits[name].sources}
        if keys & seen or len(keys) != len(splits[name]):
            return False
        seen |= keys
    return True


if __name__ == "__main__":
    sys.exit(main())
