"""The ``riftco prepare-data`` command: a progress bar over rows, a summary table."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from riftco.tensor import RiftcoError
from riftco.train.prepare.core import ON_ERROR, PrepareOptions, PrepareResult, prepare_data
from riftco.train.prepare.layouts import LAYOUTS
from riftco.train.prepare.sources import FORMATS, open_source
from riftco.train.prepare.split import IDENTITIES, SPLITS, SplitOptions

MAX_PRINTED_SKIPS = 20


class RowProgress:
    """``rows N/TOTAL [####....] P%`` (or a count when the total is unknown) on stderr,
    redrawn in place on a terminal and printed every ``every`` rows elsewhere."""

    def __init__(self, total: int | None, stream: TextIO, every: int = 10_000, width: int = 20):
        self.total, self.stream, self.every, self.width = total, stream, every, width
        self.live = hasattr(stream, "isatty") and stream.isatty()
        self.start = time.monotonic()
        self.last = -1

    def render(self, rows: int) -> str:
        rate = rows / max(time.monotonic() - self.start, 1e-9)
        if self.total:
            filled = round(self.width * min(rows, self.total) / self.total)
            bar = "#" * filled + "." * (self.width - filled)
            share = 100 * min(rows, self.total) / self.total
            return f"rows {rows:,}/{self.total:,} [{bar}] {share:3.0f}% {rate:,.0f} rows/s"
        return f"rows {rows:,} {rate:,.0f} rows/s"

    def __call__(self, rows: int) -> None:
        if rows == self.last:
            return
        self.last = rows
        if self.live:
            if rows % 256 == 0 or rows == self.total:
                print("\r" + self.render(rows), end="", file=self.stream, flush=True)
        elif rows % self.every == 0:
            print(self.render(rows), file=self.stream, flush=True)

    def close(self) -> None:
        end = "\r" if self.live else ""
        print(end + self.render(max(self.last, 0)), file=self.stream, flush=True)


def summary_table(result: PrepareResult) -> str:
    """The splits (records, share, bytes, SHA-256 prefix) and the counts, as a table."""
    counts = result.counts
    kept = max(counts["kept"], 1)
    lines = [f"{'split':<11} {'file':<17} {'records':>9} {'share':>6} {'bytes':>11}  sha256"]
    by_split = {v["split"]: (name, v) for name, v in result.manifest["files"].items()}
    for split in SPLITS:
        name, info = by_split[split]
        share = f"{100 * info['records'] / kept:.1f}%"
        lines.append(
            f"{split:<11} {name:<17} {info['records']:>9,} {share:>6} {info['bytes']:>11,}  "
            f"{info['sha256'][:12]}"
        )
    lines.append(
        f"rows read {counts['rows']:,}, kept {counts['kept']:,}, duplicates "
        f"{counts['duplicates']:,}, skipped {counts['skipped']:,}; layout {result.layout}, "
        f"seed {result.manifest['seed']}"
    )
    for stratum, row in counts.get("strata", {}).items():
        lines.append(f"  {stratum}: " + ", ".join(f"{k} {v}" for k, v in row.items()))
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="riftco prepare-data",
        description="Turn an instruction or text dataset into train/validation/test files "
        "(prompt/response JSONL for post-training, plain text for pretraining) and a manifest.",
    )
    add = p.add_argument
    add("source", help="a .jsonl, .json, .csv or .parquet file, a save_to_disk folder, or hf:NAME")
    add("--out", required=True, help="folder for the split files and manifest.json")
    add(
        "--format",
        choices=("auto", *FORMATS),
        default="auto",
        help="source format (default: from the suffix)",
    )
    add(
        "--layout",
        choices=("auto", *LAYOUTS),
        default="auto",
        help="record layout (default: detected)",
    )
    add("--validation-fraction", type=float, default=0.05, metavar="F", help="default %(default)s")
    add("--test-fraction", type=float, default=0.05, metavar="F", help="default %(default)s")
    add("--seed", type=int, default=0, help="seed of the split (default %(default)s)")
    add(
        "--identity",
        choices=IDENTITIES,
        default="prompt",
        help="what makes two records duplicates: the same prompt (default) or the same record",
    )
    add(
        "--stratify",
        metavar="FIELD",
        default=None,
        help="keep this field's proportions in every split",
    )
    add(
        "--on-error",
        choices=ON_ERROR,
        default="error",
        help="a malformed row: refuse the source (default) or skip and report it",
    )
    add("--limit", type=int, default=None, metavar="N", help="read at most N rows")
    hf = p.add_argument_group("Hugging Face datasets (extra riftco-train[datasets])")
    hf.add_argument("--hf-config", default=None, metavar="NAME", help="dataset configuration")
    hf.add_argument("--split", default="train", help="dataset split to read (default %(default)s)")
    hf.add_argument("--revision", default=None, help="dataset revision (branch, tag or commit)")
    hf.add_argument("--cache-dir", default=None, help="the datasets cache folder")
    hf.add_argument(
        "--offline",
        action="store_true",
        help="never touch the network: the local copy or cache only",
    )
    return p


def main(argv: list[str]) -> int:
    """Turn a JSON/JSONL/CSV/Parquet file or a Hugging Face dataset into training files."""
    args = parser().parse_args(argv)
    try:
        options = PrepareOptions(
            layout=args.layout,
            on_error=args.on_error,
            limit=args.limit,
            split=SplitOptions(
                args.validation_fraction,
                args.test_fraction,
                args.seed,
                args.identity,
                args.stratify,
            ),
        )
    except ValueError as exc:
        print(f"riftco prepare-data: {exc}", file=sys.stderr)
        return 2
    printed = [0]

    def report_skip(row: int, reason: str) -> None:
        if printed[0] < MAX_PRINTED_SKIPS:
            print(f"skipped row {row}: {reason}", file=sys.stderr)
        printed[0] += 1

    try:
        source = open_source(
            args.source,
            args.format,
            hf_config=args.hf_config,
            split=args.split,
            revision=args.revision,
            cache_dir=args.cache_dir,
            offline=args.offline,
        )
        bar = RowProgress(source.total, sys.stderr)
        try:
            result = prepare_data(source, args.out, options, progress=bar, report_skip=report_skip)
        finally:
            bar.close()
    except (RiftcoError, OSError) as exc:
        print(f"riftco prepare-data: {exc}", file=sys.stderr)
        return 1
    if printed[0] > MAX_PRINTED_SKIPS:
        print(f"... {printed[0] - MAX_PRINTED_SKIPS} more skipped rows", file=sys.stderr)
    print(summary_table(result))
    for name, path in result.files.items():
        print(f"{name}: {path}")
    return 0


__all__ = ["RowProgress", "main", "parser", "summary_table"]
