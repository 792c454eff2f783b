"""LoRA rank sweep: held-out loss, trainable parameters and step time against the rank,
for two sets of target layers, over several seeds, from one pretrained base.

    python -m labs.lora_rank.run --profile smoke --out runs/lora_rank/smoke
    python -m labs.lora_rank.run --profile record --out labs/lora_rank/records

Writes ``records.json`` (every run: curves, losses, counts, timing), ``report.md`` and
the plots ``held_out_vs_rank.png`` and ``loss_vs_parameters.png``.
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
from labs.lora_rank.report import write_report

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
        "ranks": [1, 4],
        "target_sets": ["attention", "attention+ff"],
        "seeds": [0],
        "steps": 4,
        "batch_size": 4,
        "eval_every": 2,
    },
    "record": {
        "base": BaseSpec(),
        "ranks": [1, 2, 4, 8, 16, 32],
        "target_sets": ["attention", "attention+ff"],
        "seeds": [0, 1, 2],
        "steps": 60,
        "batch_size": 8,
        "eval_every": 20,
    },
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m labs.lora_rank.run", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="smoke",
        help="sizes and grid (default %(default)s)",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="output folder (default runs/lora_rank/PROFILE)"
    )
    p.add_argument("--ranks", default=None, help="comma-separated ranks (default: the profile's)")
    p.add_argument(
        "--targets", default=None, help=f"comma-separated target sets among {sorted(TARGET_SETS)}"
    )
    p.add_argument(
        "--seeds", default=None, help="comma-separated seeds (data order and adapter init)"
    )
    p.add_argument("--steps", type=int, default=None, help="post-training steps per run")
    p.add_argument(
        "--lr", type=float, default=3e-3, help="peak learning rate (default %(default)s)"
    )
    p.add_argument(
        "--alpha-per-rank",
        type=float,
        default=2.0,
        help="alpha = this x rank (default %(default)s)",
    )
    p.add_argument(
        "--data", default=None, help="prompt/response JSONL (default: the embedded instructions)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    profile = PROFILES[args.profile]
    ranks = parse_list(args.ranks) if args.ranks else profile["ranks"]
    target_sets = parse_list(args.targets, str) if args.targets else profile["target_sets"]
    seeds = parse_list(args.seeds) if args.seeds else profile["seeds"]
    steps = args.steps or profile["steps"]
    unknown = [t for t in target_sets if t not in TARGET_SETS]
    if unknown or not ranks or min(ranks) < 1 or not seeds:
        print(
            f"lora_rank: expected ranks >= 1, seeds and target sets among {sorted(TARGET_SETS)}",
            file=sys.stderr,
        )
        return 2
    out = args.out or Path("runs") / "lora_rank" / args.profile
    started = time.perf_counter()
    runs = []
    with tempfile.TemporaryDirectory(prefix="lora-rank-") as work:
        base, described = make_base(profile["base"], Path(work) / "base")
        total = len(ranks) * len(target_sets) * len(seeds)
        for target_set in target_sets:
            for rank in ranks:
                for seed in seeds:
                    spec = RunSpec(
                        method="lora",
                        seed=seed,
                        steps=steps,
                        batch_size=profile["batch_size"],
                        learning_rate=args.lr,
                        rank=rank,
                        alpha=args.alpha_per_rank * rank,
                        target_set=target_set,
                        eval_every=profile["eval_every"],
                        data=args.data,
                    )
                    record = post_train_record(spec, base, Path(work))
                    runs.append(record)
                    print(
                        f"[{len(runs)}/{total}] {target_set} rank {rank} seed {seed}: held-out "
                        f"{record['validation_loss']:.4f}, {record['trainable_parameters']:,} "
                        f"trainable, {1000 * record['step_seconds']:.1f} ms/step",
                        file=sys.stderr,
                    )
    document = {
        "lab": "lora_rank",
        "profile": args.profile,
        "base": described,
        "options": {
            "ranks": ranks,
            "target_sets": {t: list(TARGET_SETS[t]) for t in target_sets},
            "seeds": seeds,
            "steps": steps,
            "batch_size": profile["batch_size"],
            "learning_rate": args.lr,
            "alpha_per_rank": args.alpha_per_rank,
            "data": args.data or "embedded instructions",
        },
        "environment": environment(),
        "seconds": round(time.perf_counter() - started, 1),
        "runs": runs,
    }
    write_json(out / "records.json", document)
    written = write_report(document, out)
    for path in [out / "records.json", *written]:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
