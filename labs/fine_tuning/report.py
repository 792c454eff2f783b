"""The fine-tuning comparison's report: Markdown and two plots, made from ``records.json``.

python -m labs.fine_tuning.report labs/fine_tuning/records/records.json
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from labs.common import read_json
from labs.plots import markdown_table, pyplot, save

MiB = 2**20


def _spread(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(document: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per method: the means (and spread over seeds) of what was measured."""
    rows = []
    for method in document["options"]["methods"]:
        runs = [r for r in document["runs"] if r["method"] == method]
        held = [r["validation_loss"] for r in runs]
        gaps = [r["generalization_gap"] for r in runs]
        rows.append(
            {
                "method": method,
                "seeds": len(runs),
                "held_out": statistics.fmean(held),
                "held_out_sd": _spread(held),
                "train": statistics.fmean(r["fixed_train_loss"] for r in runs),
                "gap": statistics.fmean(gaps),
                "gap_sd": _spread(gaps),
                "best_held_out": statistics.fmean(
                    min(v for _, v in r["validation_curve"]) for r in runs
                ),
                "trainable": runs[0]["trainable_parameters"],
                "base_mib": runs[0]["base_weight_bytes"] / MiB,
                "step_ms": 1000 * statistics.median(r["step_seconds"] for r in runs),
                "fastest_ms": 1000
                * min(r.get("step_seconds_min", r["step_seconds"]) for r in runs),
            }
        )
    return rows


def _moving(values: list[float], width: int = 10) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= width:
            total -= values[i - width]
        out.append(total / min(i + 1, width))
    return out


def plot_curves(document: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7.2, 4.4))
    colors = {"full": "C0", "lora": "C1", "qlora": "C2"}
    styles = {"qlora": "--"}  # QLoRA follows LoRA closely: dashed, so both show
    for run in document["runs"]:
        color = colors.get(run["method"], "C3")
        style = styles.get(run["method"], "-")
        first = run["seed"] == document["options"]["seeds"][0]
        steps = [s for s, _ in run["train_curve"]]
        axes.plot(
            steps,
            _moving([v for _, v in run["train_curve"]]),
            color=color,
            ls=style,
            alpha=0.35,
            lw=1,
            label=f"{run['method']} train (moving mean of 10)" if first else None,
        )
        vs = run["validation_curve"]
        axes.plot(
            [s for s, _ in vs],
            [v for _, v in vs],
            color=color,
            ls=style,
            marker="o" if style == "-" else "x",
            ms=3,
            lw=1.5,
            label=f"{run['method']} held-out" if first else None,
        )
    axes.set_xlabel("step")
    axes.set_ylabel("loss (nats/token, response tokens)")
    axes.set_title("Training and held-out loss (every seed)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    return save(figure, path)


def plot_comparison(rows: list[dict[str, Any]], path: Path) -> Path:
    plt = pyplot()
    figure, panels = plt.subplots(1, 4, figsize=(12, 3.4))
    names = [r["method"] for r in rows]
    colors = [{"full": "C0", "lora": "C1", "qlora": "C2"}.get(n, "C3") for n in names]
    measures = [
        ("final held-out loss", [r["held_out"] for r in rows], [r["held_out_sd"] for r in rows]),
        ("generalization gap", [r["gap"] for r in rows], [r["gap_sd"] for r in rows]),
        ("base linear weights (MiB)", [r["base_mib"] for r in rows], None),
        ("fastest step (ms)", [r["fastest_ms"] for r in rows], None),
    ]
    for axes, (title, values, errors) in zip(panels, measures):
        axes.bar(names, values, yerr=errors, color=colors, capsize=4)
        axes.set_title(title, fontsize=9)
        axes.grid(axis="y", alpha=0.3)
    figure.suptitle(
        "Full fine-tuning vs LoRA vs QLoRA (mean over seeds; bars: sd)", fontsize=10, y=1.04
    )
    return save(figure, path)


def findings(rows: list[dict[str, Any]]) -> str:
    """What the table says, in sentences computed from it."""
    by = {r["method"]: r for r in rows}
    best = min(rows, key=lambda r: r["held_out"])
    widest = max(rows, key=lambda r: r["gap"])
    lines = [
        f"Lowest held-out loss: {best['method']} ({best['held_out']:.4f}); widest "
        f"generalization gap: {widest['method']} ({widest['gap']:+.4f})."
    ]
    if "lora" in by and "qlora" in by:
        lora, qlora = by["lora"], by["qlora"]
        lines.append(
            f"QLoRA holds the base's linear weights in {qlora['base_mib']:.3f} MiB against "
            f"{lora['base_mib']:.3f} MiB as float32 ({lora['base_mib'] / qlora['base_mib']:.1f}x "
            f"less) and ends {qlora['held_out'] - lora['held_out']:+.4f} from LoRA's held-out loss."
        )
    if "full" in by and "lora" in by:
        full, lora = by["full"], by["lora"]
        lines.append(
            f"LoRA trains {lora['trainable']:,} of {full['trainable']:,} parameters "
            f"({100 * lora['trainable'] / full['trainable']:.1f}%); its fastest step is "
            f"{lora['fastest_ms'] / full['fastest_ms']:.2f}x full fine-tuning's: at this model "
            "size the adapters save trainable state, not step time."
            if lora["fastest_ms"] > full["fastest_ms"]
            else f"LoRA trains {lora['trainable']:,} of {full['trainable']:,} parameters "
            f"({100 * lora['trainable'] / full['trainable']:.1f}%); its fastest step is "
            f"{lora['fastest_ms'] / full['fastest_ms']:.2f}x full fine-tuning's."
        )
    return " ".join(lines)


def markdown(document: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    base, options, env = document["base"], document["options"], document["environment"]
    spec = base["spec"]
    table = markdown_table(
        [
            "method",
            "seeds",
            "held-out loss",
            "best held-out",
            "train loss",
            "gap",
            "trainable",
            "base weights (MiB)",
            "ms/step (median)",
            "ms/step (fastest)",
        ],
        [
            [
                r["method"],
                r["seeds"],
                f"{r['held_out']:.4f} ± {r['held_out_sd']:.4f}",
                f"{r['best_held_out']:.4f}",
                f"{r['train']:.4f}",
                f"{r['gap']:+.4f} ± {r['gap_sd']:.4f}",
                f"{r['trainable']:,}",
                f"{r['base_mib']:.3f}",
                f"{r['step_ms']:.1f}",
                f"{r['fastest_ms']:.1f}",
            ]
            for r in rows
        ],
    )
    rates = ", ".join(
        f"{k} {v}" for k, v in options["learning_rates"].items() if k in options["methods"]
    )
    return f"""# Full fine-tuning vs LoRA vs QLoRA ({document["profile"]} profile)

Base: GPT-2 topology, D={spec["d_model"]}, L={spec["n_layers"]}, H={spec["n_heads"]},
FF={spec["d_ff"]}, T={spec["context_length"]}, {base["parameters"]:,} parameters
({base["linear_weights"]:,} in linear weights), pretrained {spec["steps"]} steps on the
embedded corpus. Every method post-trains the same base on the same split of
{options["data"]} ({document["runs"][0]["examples"]["train"]} training and
{document["runs"][0]["examples"]["validation"]} held-out conversations), {options["steps"]}
steps of {options["batch_size"]}, peak learning rates {rates}. LoRA and QLoRA: rank
{options["rank"]}, alpha {options["alpha"]}, targets {", ".join(options["targets"])}; QLoRA
quantizes every linear weight to NF4 (block {options["nf4_block_size"]}, double-quantized
scales). Seeds {options["seeds"]} set the data order and the adapters' initialization.

Held-out loss: the mean response-token loss over every held-out conversation after the
last step (best held-out: the lowest evaluation during the run). Train loss: the same
measure, on the child bundle, over every training conversation. Gap = held-out minus train. Base
weights: the linear layers' weights as the method holds them while training (float32
for full and LoRA, packed NF4 with its scales for QLoRA).

{table}

{findings(rows)}

Measured on {env["cpus"]} CPU(s), RAYON_NUM_THREADS={env["rayon_threads"]}; the whole run took
{document["seconds"]} s. Step times: the median over runs of each run's median step, and the fastest step of any run; the machine was shared, so compare the fastest.

![loss curves](curves.png)

![comparison](comparison.png)
"""


def write_report(document: dict[str, Any], out: Path) -> list[Path]:
    from riftco.core import write_bytes_atomic

    rows = summarize(document)
    plots = [
        plot_curves(document, out / "curves.png"),
        plot_comparison(rows, out / "comparison.png"),
    ]
    report = out / "report.md"
    write_bytes_atomic(report, markdown(document, rows).encode("utf-8"))
    return [report, *plots]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m labs.fine_tuning.report RECORDS_JSON", file=sys.stderr)
        return 2
    path = Path(argv[0])
    for written in write_report(read_json(path), path.parent):
        print(written)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
