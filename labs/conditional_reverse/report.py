"""The study's report: a Markdown summary and PNG plots from a JSON record."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from riftco.core import write_bytes_atomic

ORIGINAL = {"quick": {"F": 0.885, "P": 0.766, "T": 0.854, "I": 0.677}}
"""The original system's quick-profile token accuracies (one seed each)."""
METRICS = (
    "all_token",
    "all_exact",
    "trigger_token",
    "no_trigger_token",
    "trigger_exact",
    "no_trigger_exact",
)


def summarize(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per variant: mean, standard deviation, min and max over seeds of each test metric
    and of each branch's batch-roll effect (percentage points of token accuracy)."""
    runs = defaultdict(list)
    for run in record["runs"]:
        runs[run["variant"]].append(run)
    summary = {}
    for variant, items in runs.items():
        entry: dict[str, Any] = {"seeds": [r["seed"] for r in items]}
        for metric in METRICS:
            entry[metric] = _stats([r["test"][metric] for r in items])
        effects = defaultdict(list)
        for r in items:
            for branch, stats in r["ablations"].items():
                effects[branch].append(100 * stats["mean_difference"])
        entry["roll_pp"] = {branch: _stats(values) for branch, values in effects.items()}
        entry["train_seconds"] = _stats([r["timings"]["train_seconds"] for r in items])
        summary[variant] = entry
    return summary


def _stats(values: list[float]) -> dict[str, float]:
    a = np.array([v for v in values if v is not None], dtype=np.float64)
    if not a.size:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {
        "mean": float(a.mean()),
        "std": float(a.std(ddof=1)) if a.size > 1 else 0.0,
        "min": float(a.min()),
        "max": float(a.max()),
        "n": int(a.size),
    }


def _pm(s: dict[str, float], scale: float = 1.0, digits: int = 3) -> str:
    if s["mean"] is None:
        return "-"
    return f"{scale * s['mean']:.{digits}f} ± {scale * s['std']:.{digits}f}"


def write_report(record: dict[str, Any], stem: Path) -> Path:
    """``stem.md`` and ``stem-accuracy.png``, ``stem-ablations.png``, ``stem-pca.png``."""
    summary = summarize(record)
    stem = Path(stem)
    plots = _plots(record, summary, stem)
    profile = record["profile"]
    lines = [
        f"# Conditional reversal — {profile['name']} profile",
        "",
        f"Length {profile['length']}, alphabet `{profile['alphabet']}`, triggers "
        f"`{profile['triggers']}`, D={profile['d_model']}, {profile['attention_branches']} "
        f"attention branches x {profile['heads']} heads, FF={profile['d_ff']}, batch "
        f"{profile['batch_size']}, lr {profile['lr']}, {profile['total_steps']} steps, "
        f"clipping {'off' if profile['max_grad_norm'] is None else profile['max_grad_norm']}. "
        f"Splits (source-disjoint: {record['source_disjoint']}): "
        + ", ".join(f"{k} {v['examples']}" for k, v in record["splits"].items())
        + f". Seeds {record['seeds']}. Commit `{record['provenance']['commit'][:12]}`.",
        "",
        "Test metrics (teacher-forced), mean ± standard deviation over seeds; the state "
        "of each run was selected on the validation split only.",
        "",
        "| variant | token | exact | token, trigger | token, no trigger | exact, trigger | exact, no trigger |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant, s in summary.items():
        lines.append(f"| {variant} | " + " | ".join(_pm(s[m]) for m in METRICS) + " |")
    oracle, controls = record["oracle"], record["controls"]
    lines += [
        "",
        f"Exact oracle (the F program on exact encodings): token {oracle['all_token']:.3f}, "
        f"exact {oracle['all_exact']:.3f}. Controls: copy-only token "
        f"{controls['copy']['all_token']:.3f} (exact {controls['copy']['all_exact']:.3f}), "
        f"reverse-only token {controls['reverse']['all_token']:.3f} (exact "
        f"{controls['reverse']['all_exact']:.3f}).",
        "",
        "Batch-roll ablation: change in test token accuracy (percentage points), mean ± "
        "standard deviation over seeds.",
        "",
    ]
    branches = sorted({b for s in summary.values() for b in s["roll_pp"]})
    lines += ["| variant | " + " | ".join(branches) + " |", "|---" * (len(branches) + 1) + "|"]
    for variant, s in summary.items():
        cells = [_pm(s["roll_pp"][b], digits=1) if b in s["roll_pp"] else "-" for b in branches]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Steering (first seed of each variant), calibrated on the probe split: "
        "`condition_exact` / `condition_token` are the rates at which adding the condition's "
        "basis vectors (scale 1: the trigger-minus-no-trigger mean step of each coordinate) "
        "turns a no-trigger example's predicted target (whole, or per token) into the "
        "reversal; `output` the rate at which adding the last letter's basis vector to the "
        "program output's first slot makes it the first prediction; `x_alignment` how often "
        "a learned letter code peaks at its own letter's coordinate.",
        "",
    ]
    for run in _first_runs(record):
        for kind, rates in run["steering"].items():
            if kind in ("output_unit", "condition_step"):
                continue
            label = "" if kind == "x_alignment" else "scale "
            text = ", ".join(f"{label}{k}: {v:.3f}" for k, v in rates.items())
            lines.append(f"- {run['variant']} {kind}: {text}")
    lines += [
        "",
        "PCA of probe captures (first seed): PC1 separation of trigger vs no trigger "
        "(mean distance over pooled standard deviation) and explained variance.",
        "",
    ]
    for run in _first_runs(record):
        for site, pca in run["pca"].items():
            ratio = ", ".join(f"{v:.3f}" for v in pca["explained_variance_ratio"])
            lines.append(
                f"- {run['variant']} `{site}`: separation {pca['separation']:.2f}, explained {ratio}"
            )
    lines += ["", *_comparison(record, summary)]
    lines += [
        "",
        "Training time per run (seconds): "
        + ", ".join(f"{v} {_pm(s['train_seconds'], digits=1)}" for v, s in summary.items()),
        "",
    ]
    lines += [f"![{name}]({path.name})" for name, path in plots.items()]
    path = stem.with_suffix(".md")
    write_bytes_atomic(path, ("\n".join(lines) + "\n").encode())
    return path


def _comparison(record: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """How the runs compare with the original system's published single-seed records."""
    profile = record["profile"]["name"]
    lines = ["Compared with the original system's single-seed records:", ""]
    if profile == "paper" and "F" in summary:
        f = summary["F"]
        roll = f["roll_pp"].get("layer0.program", {}).get("mean")
        attention = [
            s["mean"] for b, s in f["roll_pp"].items() if "attention" in b and s["mean"] is not None
        ]
        lines.append(
            f"- F: token {f['all_token']['mean']:.3f} and exact {f['all_exact']['mean']:.3f} "
            f"over {f['all_token']['n']} seeds (original: 1.000 and 1.000, one seed); rolling "
            f"the program branch {roll:+.1f} pp (original -95.8 pp); rolling learned attention "
            f"{', '.join(f'{a:+.1f}' for a in attention)} pp (original: no measured effect)."
        )
    elif profile == "quick":
        cells = [
            f"{v} {summary[v]['all_token']['mean']:.3f} (original {ORIGINAL['quick'][v]:.3f})"
            for v in summary
            if v in ORIGINAL["quick"]
        ]
        lines.append("- token accuracy: " + ", ".join(cells) + ".")
    else:
        return []
    return lines


def _first_runs(record: dict[str, Any]) -> list[dict[str, Any]]:
    first = record["seeds"][0]
    return [r for r in record["runs"] if r["seed"] == first]


def _plots(record: dict[str, Any], summary: dict[str, Any], stem: Path) -> dict[str, Path]:
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    out: dict[str, Path] = {}
    variants = list(summary)
    figure, axes = plt.subplots(figsize=(7, 4), dpi=100)
    for k, metric in enumerate(("all_token", "all_exact")):
        means = [summary[v][metric]["mean"] for v in variants]
        x = np.arange(len(variants)) + (k - 0.5) * 0.38
        axes.bar(x, means, width=0.36, alpha=0.6, label=metric.replace("all_", ""))
        for i, v in enumerate(variants):
            values = [r["test"][metric] for r in record["runs"] if r["variant"] == v]
            axes.scatter(np.full(len(values), x[i]), values, s=12, color="black", zorder=3)
    axes.set_xticks(np.arange(len(variants)), variants)
    axes.set_ylim(0, 1.05)
    axes.set_ylabel("test accuracy")
    axes.set_title(f"{record['profile']['name']}: accuracy per variant (dots: seeds)")
    axes.legend()
    axes.grid(alpha=0.3, axis="y")
    out["accuracy"] = _save(figure, plt, stem, "accuracy")
    branches = sorted({b for s in summary.values() for b in s["roll_pp"]})
    figure, axes = plt.subplots(figsize=(7, 4), dpi=100)
    width = 0.8 / max(len(branches), 1)
    for j, branch in enumerate(branches):
        means = [summary[v]["roll_pp"].get(branch, {}).get("mean") or 0.0 for v in variants]
        spread = [summary[v]["roll_pp"].get(branch, {}).get("std") or 0.0 for v in variants]
        x = np.arange(len(variants)) + (j - (len(branches) - 1) / 2) * width
        axes.bar(x, means, width=width * 0.95, yerr=spread, label=branch.split(".", 1)[1])
    axes.axhline(0, color="black", lw=0.8)
    axes.set_xticks(np.arange(len(variants)), variants)
    axes.set_ylabel("change in token accuracy (pp)")
    axes.set_title("batch-roll ablation of each branch (error bars: seed std)")
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3, axis="y")
    out["ablations"] = _save(figure, plt, stem, "ablations")
    firsts = [r for r in _first_runs(record) if "points" in r["pca"].get("final", {})]
    if firsts:
        figure, grid = plt.subplots(
            1, len(firsts), figsize=(3.2 * len(firsts), 3.2), dpi=100, squeeze=False
        )
        for axes, run in zip(grid[0], firsts):
            pca = run["pca"]["final"]
            points, triggered = np.array(pca["points"]), np.array(pca["triggered"], dtype=bool)
            axes.scatter(*points[~triggered].T, s=5, alpha=0.6, label="no trigger")
            axes.scatter(*points[triggered].T, s=5, alpha=0.6, label="trigger")
            axes.set_title(f"{run['variant']}: final state at '|'", fontsize=9)
            axes.set_xlabel("PC1")
            axes.set_ylabel("PC2")
        grid[0][0].legend(fontsize=7)
        out["pca"] = _save(figure, plt, stem, "pca")
    return out


def _save(figure: Any, plt: Any, stem: Path, name: str) -> Path:
    path = stem.parent / f"{stem.name}-{name}.png"
    try:
        figure.tight_layout()
        figure.savefig(path)
    finally:
        plt.close(figure)
    return path
