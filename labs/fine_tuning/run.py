"""Full fine-tuning vs LoRA vs QLoRA on the same base and the same held-out split:
training and held-out loss curves, the generalization gap, base-weight memory and step
time, over several seeds.

    python -m labs.fine_tuning.run --profile smoke --out runs/fine_tuning/smoke
    python -m labs.fine_tuning.run --profile record --out labs/fine_tuning/records

Writes ``records.json``, ``report.md``, ``curves.png`` and ``comparison.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")

from labs.common import (
    TARGET_SETS,
    BaseSpec,
    RunSpec,
    environment,
    make_base,
    parse_list,
    post_train_record,
    write_json,
)
from labs.fine_tuning.report import write_report

METHODS = ("full", "lora", "qlora")
PROFILES = {
    "smoke": {
        "base": BaseSpec(
            d_model=32,
            n_layers=1,
            n_heads=2,
            d_ff=64,
            context_length=32,
            vocab_size=300,
            steps=10,
            batch_size=4,
        ),
        "seeds": [0],
        "steps": 4,
        "batch_size": 4,
        "eval_every": 2,
    },
    "record": {
        "base": BaseSpec(),
        "seeds": [0, 1, 2],
        "steps": 150,
        "batch_size": 8,
        "eval_every": 10,
    },
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m labs.fine_tuning.run", description=__doc__.split("\n\n")[0]
    )
    add = p.add_argument
    add("--profile", choices=sorted(PROFILES), default="smoke", help="sizes (default %(default)s)")
    add("--out", type=Path, default=None, help="output folder (default runs/fine_tuning/PROFILE)")
    add("--methods", default=",".join(METHODS), help="comma-separated, among full, lora, qlora")
    add("--seeds", default=None, help="comma-separated seeds (default: the profile's)")
    add("--steps", type=int, default=None, help="post-training steps per run")
    add("--full-lr", type=float, default=1e-3, help="full fine-tuning's peak rate (%(default)s)")
    add("--lora-lr", type=float, default=3e-3, help="LoRA's and QLoRA's peak rate (%(default)s)")
    add("--rank", type=int, default=8, help="LoRA rank (default %(default)s)")
    add("--alpha", type=float, default=16.0, help="LoRA alpha (default %(default)s)")
    add("--targets", choices=sorted(TARGET_SETS), default="attention+ff", help="LoRA targets")
    add("--data", default=None, help="prompt/response JSONL (default: the embedded instructions)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    profile = PROFILES[args.profile]
    methods = parse_list(args.methods, str)
    seeds = parse_list(args.seeds) if args.seeds else profile["seeds"]
    if not methods or any(m not in METHODS for m in methods) or not seeds:
        print(f"fine_tuning: expected methods among {METHODS} and seeds", file=sys.stderr)
        return 2
    steps = args.steps or profile["steps"]
    out = args.out or Path("runs") / "fine_tuning" / args.profile
    started = time.perf_counter()
    runs = []
    with tempfile.TemporaryDirectory(prefix="fine-tuning-") as work:
        base, described = make_base(profile["base"], Path(work) / "base")
        for method in methods:
            for seed in seeds:
                spec = RunSpec(
                    method=method,
                    seed=seed,
                    steps=steps,
                    batch_size=profile["batch_size"],
                    learning_rate=args.full_lr if method == "full" else args.lora_lr,
                    rank=args.rank,
                    alpha=args.alpha,
                    target_set=args.targets,
                    eval_every=profile["eval_every"],
                    data=args.data,
                )
                record = post_train_record(spec, base, Path(work))
                runs.append(record)
                print(
                    f"[{len(runs)}/{len(methods) * len(seeds)}] {method} seed {seed}: held-out "
                    f"{record['validation_loss']:.4f}, gap {record['generalization_gap']:+.4f}, "
                    f"{1000 * record['step_seconds']:.1f} ms/step",
                    file=sys.stderr,
                )
    document = {
        "lab": "fine_tuning",
        "profile": args.profile,
        "base": described,
        "options": {
            "methods": methods,
            "seeds": seeds,
            "steps": steps,
            "batch_size": profile["batch_size"],
            "learning_rates": {"full": args.full_lr, "lora": args.lora_lr, "qlora": args.lora_lr},
            "rank": args.rank,
            "alpha": args.alpha,
            "targets": list(TARGET_SETS[args.targets]),
            "nf4_block_size": 64,
            "data": args.data or "embedded instructions",
        },
        "environment": environment(),
        "seconds": round(time.perf_counter() - started, 1),
        "runs": runs,
    }
    write_json(out / "records.json", document)
    for path in [out / "records.json", *write_report(document, out)]:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
