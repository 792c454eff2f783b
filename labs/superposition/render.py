"""The visualization as one figure (matplotlib), for a PNG export or a window.

Panels: the pairwise-angle distribution in every dimension narrowing around 90 degrees
(with the band of tolerance and the exact density), the spread against the dimension,
the chosen dimension in pairs or query mode, one superposition readout, and how many
features can be active at once before decoding fails.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from labs.superposition.geometry import angle_density, band, expected_angle_sd

BAND_COLOR = "#f2c14e"
ACTIVE_COLOR = "#d1495b"
INACTIVE_COLOR = "#6c8ead"


def figure(record: dict[str, Any], pyplot: Any) -> Any:
    """A figure drawn from a ``record`` made by ``run.measure``."""
    options = record["options"]
    theta = options["theta"]
    low, high = band(theta)
    fig, grid = pyplot.subplots(2, 3, figsize=(15, 8.6))
    (dist, spread, mode), (readout, recovery, notes) = grid

    colors = pyplot.cm.viridis(np.linspace(0.0, 0.9, len(record["dimensions"])))
    dist.axvspan(low, high, color=BAND_COLOR, alpha=0.25, label=f"band [{low:g}, {high:g}]")
    degrees = np.linspace(0.0, 180.0, 721)
    for color, item in zip(colors, record["dimensions"]):
        d = item["dimension"]
        hist = np.asarray(item["histogram"], dtype=float)
        edges = np.asarray(record["bin_edges"], dtype=float)
        dist.stairs(hist, edges, color=color, lw=1.3, label=f"d={d}")
        dist.plot(degrees, angle_density(degrees, d), color=color, lw=0.8, ls="--")
    dist.set_xlim(0, 180)
    dist.set_yscale("log")
    dist.set_ylim(1e-4, 1.0)
    dist.set_xlabel("angle between two random unit vectors (degrees)")
    dist.set_ylabel("density per degree (dashed: exact)")
    dist.set_title("Pairwise angles narrow around 90 degrees")
    dist.legend(fontsize=7, ncol=2)

    dims = [item["dimension"] for item in record["dimensions"]]
    spread.loglog(dims, [item["sd"] for item in record["dimensions"]], "o-", label="measured")
    fine = np.geomspace(min(dims), max(dims), 60)
    spread.loglog(fine, np.degrees(1 / np.sqrt(fine)), ":", label="57.3 / sqrt(d)")
    spread.loglog(dims, [expected_angle_sd(d) for d in dims], "k+", ms=9, label="exact")
    spread.set_xlabel("dimension d")
    spread.set_ylabel("angle spread around 90 (degrees, sd)")
    spread.set_title("Spread falls as 1/sqrt(d)")
    spread.grid(alpha=0.3, which="both")
    spread.legend(fontsize=8)

    chosen = record["mode"]
    mode.axvspan(low, high, color=BAND_COLOR, alpha=0.3)
    mode.stairs(chosen["histogram"], record["bin_edges"], fill=True, color=INACTIVE_COLOR)
    where = f"from vector {chosen['query_index']}" if chosen["mode"] == "query" else "all pairs"
    mode.set_title(
        f"d={chosen['dimension']}, {chosen['vectors']} vectors, {where}: "
        f"{100 * chosen['in_band']:.1f}% in band",
        fontsize=10,
    )
    mode.set_xlim(0, 180)
    mode.set_xlabel("angle (degrees)")
    mode.set_ylabel("count")

    sp = record["superposition"]
    values = np.asarray(sp["values"], dtype=float)
    active = set(sp["active"])
    bar_colors = [ACTIVE_COLOR if i in active else INACTIVE_COLOR for i in range(len(values))]
    readout.bar(np.arange(len(values)), values, color=bar_colors, width=0.85)
    readout.axhline(sp["tolerance"], color="k", ls="--", lw=1, label=f"tolerance {sp['tolerance']}")
    for i in sp["decoded"]:
        readout.plot(i, values[i] + 0.05, "v", color="k", ms=4)
    readout.set_xlabel(f"feature (red: the {len(active)} active; triangles: decoded)")
    readout.set_ylabel("readout x . f_j")
    verdict = (
        "recovered exactly"
        if sp["recovered"]
        else (f"{sp['false_positives']} false, {sp['missed']} missed")
    )
    readout.set_title(f"{sp['features']} features in d={sp['dimension']}: {verdict}")
    readout.legend(fontsize=8)

    curve = record["recovery"]
    xs = [c["active"] for c in curve]
    recovery.plot(
        xs, [c["recovered"] for c in curve], "o-", color=ACTIVE_COLOR, label="exact recovery"
    )
    twin = recovery.twinx()
    twin.plot(
        xs,
        [c["false_positives"] for c in curve],
        "s:",
        color=INACTIVE_COLOR,
        ms=4,
        label="false positives",
    )
    twin.plot(xs, [c["missed"] for c in curve], "^:", color="#444", ms=4, label="missed")
    twin.set_ylabel("mean count per draw")
    recovery.set_ylim(-0.02, 1.02)
    recovery.set_xlabel("active features")
    recovery.set_ylabel("share of draws decoded exactly")
    recovery.set_title(f"How many can be active at once ({record['recovery_trials']} draws each)")
    lines = recovery.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    recovery.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="center right")

    notes.axis("off")
    text = [
        f"dimension {options['dimension']}, features {options['features']}, "
        f"active {options['active']}",
        f"theta {theta} deg (band {low:g} to {high:g}), tolerance {options['tolerance']}",
        f"seed {options['seed']}, {options['vectors']} vectors per dimension",
        "",
        f"largest |cos| between two features: {sp['max_interference']:.3f}",
        f"  (angle {np.degrees(np.arccos(sp['max_interference'])):.1f} deg)",
        "",
        "in band, measured vs exact:",
        *[
            f"  d={item['dimension']:>4}: {100 * item['in_band']:6.2f}% vs "
            f"{100 * item['expected_in_band']:6.2f}%"
            for item in record["dimensions"]
        ],
    ]
    notes.text(0.0, 1.0, "\n".join(text), va="top", family="monospace", fontsize=9)
    fig.suptitle("Feature superposition: nearly orthogonal directions in high dimensions")
    fig.tight_layout()
    return fig
