"""Turn a record source into the project's files, with a manifest beside them.

Conversations become ``train.jsonl``, ``validation.jsonl`` and ``test.jsonl`` (the
``{"prompt", "response"}`` or ``{"messages"}`` lines ``riftco post-train --data``
reads); documents become ``train.txt``, ``validation.txt`` and ``test.txt`` (documents
separated by a blank line, for ``riftco pretrain --data``). ``manifest.json`` records
the source, its revision and license where known, the layout, the split options and
seed, every count and the SHA-256 of the source and of each file written. All files
are written together atomically: a failure leaves the previous ones untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riftco.core import JSONError, loads_strict, read_bounded, staged_files
from riftco.train.errors import DataError
from riftco.train.prepare.layouts import (
    Layout,
    MalformedRow,
    convert_row,
    detect_layout,
    get_layout,
)
from riftco.train.prepare.sources import RecordSource, is_malformed
from riftco.train.prepare.split import (
    SPLITS,
    Deduplicator,
    SplitOptions,
    assign_splits,
    stratum_counts,
)

MANIFEST = "manifest.json"
FORMAT = "riftco-train/prepared-data"
ON_ERROR = ("error", "skip")
MAX_REPORTED_SKIPS = 100
#: A manifest lists one entry per shard and source: far below this.
MAX_MANIFEST_BYTES = 64 << 20
LICENSE_KEYS = ("license", "licence")


@dataclass(frozen=True)
class PrepareOptions:
    """The layout (``auto``: detected from the columns), what a malformed row does
    (``error``: refuse the source; ``skip``: drop it and report it), an optional row
    limit and the split options."""

    layout: str = "auto"
    on_error: str = "error"
    limit: int | None = None
    split: SplitOptions = field(default_factory=SplitOptions)

    def __post_init__(self) -> None:
        if self.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}; found {self.on_error!r}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1; found {self.limit}")


@dataclass(frozen=True)
class PrepareResult:
    out_dir: Path
    layout: str
    kind: str
    files: dict[str, Path]
    manifest: dict[str, Any]

    @property
    def counts(self) -> dict[str, Any]:
        return self.manifest["counts"]


def _stratum(record: Any, name: str) -> str:
    value = record.get(name) if isinstance(record, dict) else None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        found = "nothing" if value is None else type(value).__name__
        raise MalformedRow(
            f"expected the stratification field {name!r} to be a string or int; found {found}"
        )
    return str(value)


def prepare_data(
    source: RecordSource,
    out_dir: str | os.PathLike[str],
    options: PrepareOptions | None = None,
    *,
    progress: Callable[[int], None] | None = None,
    report_skip: Callable[[int, str], None] | None = None,
) -> PrepareResult:
    """Read ``source``, convert, de-duplicate, split and write the files and manifest.

    ``progress(rows_read)`` is called as rows are read; ``report_skip(row, reason)`` for
    each row skipped under ``on_error="skip"``. With ``on_error="error"`` the first
    malformed row raises ``DataError`` naming its number.
    """
    options = options or PrepareOptions()
    layout: Layout = (
        detect_layout(source.columns, source.name)
        if options.layout == "auto"
        else get_layout(options.layout)
    )
    split = options.split
    identity_of = "prompt_identity" if split.identity == "prompt" else "record_identity"
    seen = Deduplicator()
    skipped: list[dict[str, Any]] = []
    skip_count = rows = 0
    licenses: set[str] = set()
    for row in source.rows():
        if options.limit is not None and rows >= options.limit:
            break
        rows += 1
        if progress is not None:
            progress(rows)
        try:
            reason = is_malformed(row.record)
            if reason is not None:
                raise MalformedRow(reason)
            converted = convert_row(layout, row.record)
            stratum = _stratum(row.record, split.stratify) if split.stratify else None
        except MalformedRow as exc:
            if options.on_error == "error":
                raise DataError(
                    f"row {row.number}: {exc} (pass --on-error skip to drop such rows)", source.name
                ) from None
            skip_count += 1
            if len(skipped) < MAX_REPORTED_SKIPS:
                skipped.append({"row": row.number, "reason": str(exc)})
            if report_skip is not None:
                report_skip(row.number, str(exc))
            continue
        for key in LICENSE_KEYS:
            value = row.record.get(key)
            if isinstance(value, str) and value and len(licenses) < 16:
                licenses.add(value)
        seen.add(getattr(converted, identity_of), stratum, converted.output)
    if progress is not None:
        progress(rows)
    if not seen.kept:
        raise DataError(f"expected at least one usable record; read {rows} rows", source.name)
    parts = assign_splits(seen.kept, split)
    suffix = ".jsonl" if layout.kind == "chat" else ".txt"
    names = {name: f"{name}{suffix}" for name in SPLITS}
    payloads = {name: _serialize([r.output for r in parts[name]], layout.kind) for name in SPLITS}
    files = {
        names[name]: {
            "split": name,
            "records": len(parts[name]),
            "bytes": len(payloads[name]),
            "sha256": hashlib.sha256(payloads[name]).hexdigest(),
        }
        for name in SPLITS
    }
    counts: dict[str, Any] = {
        "rows": rows,
        "kept": len(seen.kept),
        "skipped": skip_count,
        "duplicates": seen.duplicates,
        "splits": {name: len(parts[name]) for name in SPLITS},
    }
    if split.stratify:
        counts["strata"] = stratum_counts(parts)
    manifest = {
        "format": FORMAT,
        "format_version": 1,
        "source": {**source.describe, "format": source.format, "columns": source.columns},
        "revision": source.describe.get("revision") or source.describe.get("sha256"),
        "license": source.license or _license(licenses),
        "layout": layout.name,
        "kind": layout.kind,
        "options": {"on_error": options.on_error, "limit": options.limit, **split.to_dict()},
        "seed": split.seed,
        "counts": counts,
        "skipped_rows": skipped,
        "files": files,
    }
    out = Path(out_dir)
    document = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    with staged_files(out, [*names.values(), MANIFEST]) as stage:
        for name in SPLITS:
            (stage / names[name]).write_bytes(payloads[name])
        (stage / MANIFEST).write_text(document + "\n", encoding="utf-8")
    paths = {name: out / names[name] for name in SPLITS}
    paths["manifest"] = out / MANIFEST
    return PrepareResult(out, layout.name, layout.kind, paths, manifest)


def _license(found: set[str]) -> str | list[str] | None:
    """The records' own license field: one value, several, or None."""
    if not found:
        return None
    return next(iter(found)) if len(found) == 1 else sorted(found)


def _serialize(outputs: list[Any], kind: str) -> bytes:
    if kind == "chat":
        text = "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in outputs)
    else:
        text = "\n\n".join(o.strip("\n") for o in outputs) + ("\n" if outputs else "")
    return text.encode("utf-8")


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A prepared folder's (or a manifest file's) manifest, checked for its format."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST
    try:
        document = loads_strict(read_bounded(path, MAX_MANIFEST_BYTES, DataError))
    except JSONError as exc:
        raise DataError(f"cannot read the manifest: {exc}", str(path)) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise DataError(f"expected a {FORMAT!r} manifest", str(path))
    return document


__all__ = ["FORMAT", "MANIFEST", "PrepareOptions", "PrepareResult", "prepare_data", "read_manifest"]
