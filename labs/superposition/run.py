"""Feature superposition: random unit vectors in 3 to 4096 dimensions, the distribution of
their pairwise angles narrowing around 90 degrees, a band of tolerance, query and pairs
modes, and features stored in superposition and read back.

    python -m labs.superposition.run --dimension 64 --features 96 --active 4 \\
        --theta 55 --tolerance 0.6 --seed 7 --save --no-show
    python -m labs.superposition.run --self-test
    python -m labs.superposition.run --serve          # the interactive page, locally

``--save`` writes ``superposition.png``, ``records.json`` and ``report.md`` into ``--out``; without
``--no-show`` the figure also opens in a window when a display is available.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from labs.common import environment, parse_list, write_json
from labs.superposition.geometry import (
    DIMENSIONS,
    angle_stats,
    band,
    pairwise_angles,
    query_angles,
    recovery_curve,
    superpose,
    unit_vectors,
)

BIN_EDGES = np.linspace(0.0, 180.0, 91)
PROFILES = {
    "smoke": {"vectors": 120, "recovery_trials": 10, "max_active": 8},
    "record": {"vectors": 400, "recovery_trials": 100, "max_active": 16},
}
PAGE = Path(__file__).resolve().parent / "page"


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Everything the figure and the record show, from the command's options."""
    profile = PROFILES[args.profile]
    vectors = args.vectors or profile["vectors"]
    band(args.theta)  # validates theta
    dimensions = []
    for offset, d in enumerate(args.dimensions):
        angles = pairwise_angles(unit_vectors(vectors, d, args.seed + offset))
        histogram, _ = np.histogram(angles, bins=BIN_EDGES, density=True)
        dimensions.append(
            {**angle_stats(angles, d, args.theta).to_dict(), "histogram": histogram.tolist()}
        )
    chosen = unit_vectors(vectors, args.dimension, args.seed)
    if args.mode == "query":
        angles = query_angles(chosen, args.query_index)
    else:
        angles = pairwise_angles(chosen)
    counts, _ = np.histogram(angles, bins=BIN_EDGES)
    stats = angle_stats(angles, args.dimension, args.theta)
    sp = superpose(args.dimension, args.features, args.active, args.tolerance, args.seed)
    return {
        "lab": "superposition",
        "profile": args.profile,
        "options": {
            "dimension": args.dimension,
            "features": args.features,
            "active": args.active,
            "theta": args.theta,
            "tolerance": args.tolerance,
            "seed": args.seed,
            "vectors": vectors,
            "mode": args.mode,
            "query_index": args.query_index,
        },
        "bin_edges": BIN_EDGES.tolist(),
        "dimensions": dimensions,
        "mode": {
            "mode": args.mode,
            "dimension": args.dimension,
            "vectors": vectors,
            "query_index": args.query_index if args.mode == "query" else None,
            "histogram": counts.tolist(),
            **{k: v for k, v in stats.to_dict().items() if k != "dimension"},
        },
        "superposition": {**sp.to_dict(), "values": sp.values.tolist()},
        "recovery_trials": profile["recovery_trials"],
        "recovery": recovery_curve(
            args.dimension,
            args.features,
            args.tolerance,
            args.seed,
            profile["max_active"],
            profile["recovery_trials"],
        ),
        "environment": environment(),
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m labs.superposition.run",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = p.add_argument
    add(
        "--dimension",
        type=int,
        default=64,
        help="dimension of the superposition example and the mode panel (default %(default)s)",
    )
    add(
        "--features",
        type=int,
        default=96,
        help="feature directions stored in it (default %(default)s)",
    )
    add("--active", type=int, default=4, help="features active at once (default %(default)s)")
    add(
        "--theta",
        type=float,
        default=55.0,
        help="band of tolerance [theta, 180 - theta] degrees (default %(default)s)",
    )
    add(
        "--tolerance",
        type=float,
        default=0.6,
        help="a feature decodes as active above this readout (default %(default)s)",
    )
    add("--seed", type=int, default=7, help="seed of every random draw (default %(default)s)")
    add(
        "--dimensions",
        type=lambda s: parse_list(s),
        default=list(DIMENSIONS),
        help="comma-separated dimensions of the distribution panel (default 3,8,16,32,64,128,768,4096)",
    )
    add(
        "--vectors",
        type=int,
        default=None,
        help="random vectors per dimension (default: the profile's)",
    )
    add(
        "--mode",
        choices=("pairs", "query"),
        default="pairs",
        help="angles of all pairs, or from one vector (default %(default)s)",
    )
    add(
        "--query-index",
        type=int,
        default=0,
        help="the vector query mode measures from (default %(default)s)",
    )
    add(
        "--profile",
        choices=sorted(PROFILES),
        default="record",
        help="sample sizes (default %(default)s)",
    )
    add(
        "--out",
        type=Path,
        default=Path("runs/superposition"),
        help="folder for --save (default %(default)s)",
    )
    add(
        "--save",
        action="store_true",
        help="write superposition.png, records.json and report.md into --out",
    )
    add("--no-show", action="store_true", help="do not open a window")
    add(
        "--self-test",
        action="store_true",
        help="check the geometry, the export and the page, then exit",
    )
    add("--serve", action="store_true", help="serve the interactive page on 127.0.0.1")
    add(
        "--port",
        type=int,
        default=8765,
        help="port for --serve (0: any free one; default %(default)s)",
    )
    return p


def check_options(args: argparse.Namespace) -> str | None:
    if args.dimension < 2 or any(d < 2 for d in args.dimensions) or not args.dimensions:
        return "dimensions must be >= 2"
    if not 1 <= args.active <= args.features:
        return f"expected 1 <= --active <= --features; found {args.active} and {args.features}"
    if not 0 < args.theta <= 90:
        return f"--theta must lie in (0, 90]; found {args.theta}"
    vectors = args.vectors or PROFILES[args.profile]["vectors"]
    if vectors < 2 or (args.mode == "query" and not 0 <= args.query_index < vectors):
        return f"expected >= 2 vectors and 0 <= --query-index < {vectors}"
    return None


def export_png(record: dict[str, Any], path: Path) -> Path:
    from labs.plots import pyplot, save

    plt = pyplot()
    from labs.superposition.render import figure

    return save(figure(record, plt), path)


def show(record: dict[str, Any]) -> None:
    """Open the figure in a window, if matplotlib has an interactive backend here."""
    import matplotlib

    if matplotlib.get_backend().lower() == "agg" or not _has_display():
        print("superposition: no display; use --save for a PNG", file=sys.stderr)
        return
    import matplotlib.pyplot as plt

    from labs.superposition.render import figure

    figure(record, plt)
    plt.show()


def _has_display() -> bool:
    import os

    return sys.platform in ("darwin", "win32") or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.self_test:
        from labs.superposition.selftest import self_test

        return self_test()
    if args.serve:
        from labs.superposition.serve import serve

        return serve(args.port)
    problem = check_options(args)
    if problem:
        print(f"superposition: {problem}", file=sys.stderr)
        return 2
    record = measure(args)
    sp, chosen = record["superposition"], record["mode"]
    print(
        f"d={args.dimension} {chosen['mode']}: mean {chosen['mean']:.2f} deg, sd {chosen['sd']:.2f}, "
        f"{100 * chosen['in_band']:.1f}% in [{args.theta:g}, {180 - args.theta:g}] "
        f"(exact {100 * chosen['expected_in_band']:.1f}%)"
    )
    print(
        f"{args.features} features, {args.active} active: decoded {sp['decoded']} of "
        f"{sp['active']} ({'exact' if sp['recovered'] else 'not exact'}), largest |cos| "
        f"{sp['max_interference']:.3f}"
    )
    if args.save:
        write_json(args.out / "records.json", record)
        print(args.out / "records.json")
        print(export_png(record, args.out / "superposition.png"))
        from labs.superposition.report import write_report

        print(write_report(record, args.out))
    if not args.no_show:
        show(record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
