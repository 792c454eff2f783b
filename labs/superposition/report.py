"""The superposition record's report: Markdown beside the PNG, made from ``records.json``.

python -m labs.superposition.report labs/superposition/records/records.json
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from labs.common import read_json
from labs.plots import markdown_table


def markdown(record: dict[str, Any]) -> str:
    o, sp = record["options"], record["superposition"]
    low, high = o["theta"], 180 - o["theta"]
    dims = markdown_table(
        ["d", "pairs", "mean (deg)", "sd", "exact sd", "min", "max", "in band", "exact"],
        [
            [
                d["dimension"],
                f"{d['count']:,}",
                f"{d['mean']:.2f}",
                f"{d['sd']:.3f}",
                f"{d['expected_sd']:.3f}",
                f"{d['minimum']:.1f}",
                f"{d['maximum']:.1f}",
                f"{100 * d['in_band']:.2f}%",
                f"{100 * d['expected_in_band']:.2f}%",
            ]
            for d in record["dimensions"]
        ],
    )
    recovery = markdown_table(
        ["active", "decoded exactly", "false positives", "missed"],
        [
            [
                c["active"],
                f"{100 * c['recovered']:.0f}%",
                f"{c['false_positives']:.2f}",
                f"{c['missed']:.2f}",
            ]
            for c in record["recovery"]
        ],
    )
    verdict = (
        "exactly"
        if sp["recovered"]
        else (f"with {sp['false_positives']} false positive(s) and {sp['missed']} miss(es)")
    )
    return f"""# Feature superposition ({record["profile"]} profile)

{o["vectors"]} random unit vectors per dimension (seed {o["seed"]}); the band of tolerance
is [{low:g}, {high:g}] degrees (theta {o["theta"]:g}). Exact values come from the angle's
density, proportional to sin(angle)^(d-2).

{dims}

Superposition: {o["features"]} features in {o["dimension"]} dimensions, {o["active"]}
active ({sp["active"]}); readouts above the tolerance {o["tolerance"]} decode as active:
{sp["decoded"]}, so the active set was recovered {verdict}. The largest |cos| between
two features is {sp["max_interference"]:.3f}.

Share of {record["recovery_trials"]} random draws (fresh directions and active set each)
decoded exactly, by the number of active features:

{recovery}

![superposition](superposition.png)
"""


def write_report(record: dict[str, Any], out: Path) -> Path:
    from riftco.core import write_bytes_atomic

    path = out / "report.md"
    write_bytes_atomic(path, markdown(record).encode("utf-8"))
    return path


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m labs.superposition.report RECORDS_JSON", file=sys.stderr)
        return 2
    path = Path(argv[0])
    record = read_json(path)
    from labs.superposition.run import export_png

    print(export_png(record, path.parent / "superposition.png"))
    print(write_report(record, path.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
