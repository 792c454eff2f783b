"""The rank sweep's report: a Markdown summary and two plots, made from ``records.json``.

python -m labs.lora_rank.report labs/lora_rank/records/records.json
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from labs.common import read_json
from labs.plots import markdown_table, pyplot, save


def summarize(document: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (target set, rank): held-out loss mean, min and max over seeds,
    trainable parameters and the median step time."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for run in document["runs"]:
        groups[(run["target_set"], run["rank"])].append(run)
    rows = []
    for (target_set, rank), runs in sorted(groups.items()):
        losses = [r["validation_loss"] for r in runs]
        rows.append(
            {
                "target_set": target_set,
                "rank": rank,
                "seeds": len(runs),
                "mean": statistics.fmean(losses),
                "min": min(losses),
                "max": max(losses),
                "trainable_parameters": runs[0]["trainable_parameters"],
                "step_ms": 1000 * statistics.median(r["step_seconds"] for r in runs),
                "fastest_ms": 1000
                * min(r.get("step_seconds_min", r["step_seconds"]) for r in runs),
                "gap": statistics.fmean(r["generalization_gap"] for r in runs),
            }
        )
    return rows


def plot_rank(rows: list[dict[str, Any]], document: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    for target_set in sorted({r["target_set"] for r in rows}):
        part = [r for r in rows if r["target_set"] == target_set]
        ranks = [r["rank"] for r in part]
        (line,) = axes.plot(ranks, [r["mean"] for r in part], marker="o", label=target_set)
        axes.fill_between(
            ranks,
            [r["min"] for r in part],
            [r["max"] for r in part],
            alpha=0.2,
            color=line.get_color(),
        )
        seeds = [run for run in document["runs"] if run["target_set"] == target_set]
        axes.scatter(
            [s["rank"] for s in seeds],
            [s["validation_loss"] for s in seeds],
            s=9,
            color=line.get_color(),
        )
    axes.set_xscale("log", base=2)
    axes.set_xticks(sorted({r["rank"] for r in rows}))
    axes.set_xticklabels([str(r) for r in sorted({r["rank"] for r in rows})])
    axes.set_xlabel("LoRA rank")
    axes.set_ylabel("held-out loss (nats/token)")
    axes.set_title("Held-out loss vs rank (mean; band and dots: seeds)")
    axes.legend(title="targets")
    axes.grid(alpha=0.3)
    return save(figure, path)


def plot_parameters(rows: list[dict[str, Any]], path: Path) -> Path:
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    for target_set in sorted({r["target_set"] for r in rows}):
        part = [r for r in rows if r["target_set"] == target_set]
        x = [r["trainable_parameters"] for r in part]
        axes.errorbar(
            x,
            [r["mean"] for r in part],
            yerr=[[r["mean"] - r["min"] for r in part], [r["max"] - r["mean"] for r in part]],
            marker="o",
            capsize=3,
            label=target_set,
        )
        for r in part:
            axes.annotate(
                f"r{r['rank']}",
                (r["trainable_parameters"], r["mean"]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    axes.set_xscale("log")
    axes.set_xlabel("trainable parameters")
    axes.set_ylabel("held-out loss (nats/token)")
    axes.set_title("Held-out loss vs trainable parameters")
    axes.legend(title="targets")
    axes.grid(alpha=0.3)
    return save(figure, path)


def markdown(document: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    base, options = document["base"], document["options"]
    spec = base["spec"]
    table = markdown_table(
        [
            "targets",
            "rank",
            "seeds",
            "held-out loss (mean)",
            "min",
            "max",
            "gap",
            "trainable",
            "ms/step (median)",
            "ms/step (fastest)",
        ],
        [
            [
                r["target_set"],
                r["rank"],
                r["seeds"],
                f"{r['mean']:.4f}",
                f"{r['min']:.4f}",
                f"{r['max']:.4f}",
                f"{r['gap']:+.4f}",
                f"{r['trainable_parameters']:,}",
                f"{r['step_ms']:.1f}",
                f"{r['fastest_ms']:.1f}",
            ]
            for r in rows
        ],
    )
    best = min(rows, key=lambda r: r["mean"])
    env = document["environment"]
    return f"""# LoRA rank sweep ({document["profile"]} profile)

Base: GPT-2 topology, D={spec["d_model"]}, L={spec["n_layers"]}, H={spec["n_heads"]},
FF={spec["d_ff"]}, T={spec["context_length"]}, {base["parameters"]:,} parameters, pretrained
{spec["steps"]} steps on the embedded corpus (held-out loss {base["validation_loss"]:.4f}).
Post-training: {options["data"]}, {options["steps"]} steps of {options["batch_size"]}
conversations, peak learning rate {options["learning_rate"]}, alpha = {options["alpha_per_rank"]}
x rank, seeds {options["seeds"]} (each seeds the data order and the adapters' initialization).
Target sets: {", ".join(f"`{k}` = {', '.join(v)}" for k, v in options["target_sets"].items())}.
Held-out loss is the mean response-token loss over every held-out conversation after the
last step; the gap is that loss minus the child bundle's loss on every training conversation.

{table}

Lowest mean held-out loss: `{best["target_set"]}` at rank {best["rank"]}
({best["mean"]:.4f}). Step times are the runs' median and fastest steps on {env["cpus"]} CPU(s) with
RAYON_NUM_THREADS={env["rayon_threads"]}; the whole sweep took {document["seconds"]} s.

![held-out loss vs rank](held_out_vs_rank.png)

![held-out loss vs trainable parameters](loss_vs_parameters.png)
"""


def write_report(document: dict[str, Any], out: Path) -> list[Path]:
    """Write ``report.md`` and the two PNGs into ``out``; returns their paths."""
    from riftco.core import write_bytes_atomic

    rows = summarize(document)
    plots = [
        plot_rank(rows, document, out / "held_out_vs_rank.png"),
        plot_parameters(rows, out / "loss_vs_parameters.png"),
    ]
    report = out / "report.md"
    write_bytes_atomic(report, markdown(document, rows).encode("utf-8"))
    return [report, *plots]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m labs.lora_rank.report RECORDS_JSON", file=sys.stderr)
        return 2
    path = Path(argv[0])
    for written in write_report(read_json(path), path.parent):
        print(written)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
