"""Where ``riftco prepare-data`` reads records from: local files and Hugging Face datasets.

- ``jsonl``: one JSON object per line (blank lines skipped); a row's number is its line.
- ``json``: a JSON array of objects, or an object whose ``data`` or ``rows`` is one.
- ``csv``: a header line, then one record per line (RFC 4180 quoting, UTF-8).
- ``parquet``: read in record batches through pyarrow (extra ``parquet``).
- ``hf``: a dataset through the ``datasets`` library (extra ``datasets``): a hub name
  (``hf:tatsu-lab/alpaca``), a folder written by ``Dataset.save_to_disk``, or a hub
  name resolved from the ``datasets`` cache when offline.

Every source yields ``Row(number, record)`` with 1-based numbers, knows its columns
(from the first record or the schema) and describes itself for the manifest: the
file's size and SHA-256, or the dataset's name, configuration, split, revision,
fingerprint and license.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riftco.core import JSONError, loads_strict, require_regular_file
from riftco.train.errors import DataError

FORMATS = ("jsonl", "json", "csv", "parquet", "hf")
SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv"}
SUFFIXES |= {".parquet": "parquet", ".pq": "parquet"}
HF_PREFIX = "hf:"
MAX_SOURCE_BYTES = 1 << 32
MAX_JSON_BYTES = 1 << 30
MAX_CSV_FIELD = 16 << 20
PARQUET_BATCH_ROWS = 1024


@dataclass(frozen=True)
class Row:
    """One record and where it came from (1-based; a JSONL row's number is its line)."""

    number: int
    record: Any


@dataclass
class RecordSource:
    """An opened source: its description for the manifest, its columns and its rows."""

    name: str
    format: str
    columns: list[str]
    total: int | None
    describe: dict[str, Any]
    license: str | None = None
    _rows: Callable[[], Iterator[Row]] = field(default=lambda: iter(()), repr=False)

    def rows(self) -> Iterator[Row]:
        return self._rows()


def detect_format(spec: str) -> str:
    """The format a source's name implies: ``hf`` for ``hf:NAME`` or a folder written by
    ``save_to_disk``, otherwise the file's suffix."""
    if spec.startswith(HF_PREFIX):
        return "hf"
    path = Path(spec)
    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists():
            return "hf"
        raise DataError("expected a data file or a folder written by save_to_disk", spec)
    found = SUFFIXES.get(path.suffix.lower())
    if found is None:
        raise DataError(
            f"cannot tell the format from the suffix {path.suffix!r}; expected one of "
            f"{sorted(SUFFIXES)} or pass --format ({', '.join(FORMATS)})",
            spec,
        )
    return found


def open_source(
    spec: str,
    format: str = "auto",
    *,
    hf_config: str | None = None,
    split: str = "train",
    revision: str | None = None,
    cache_dir: str | None = None,
    offline: bool = False,
) -> RecordSource:
    """Open ``spec`` (a path, or ``hf:NAME``) as a ``RecordSource``."""
    kind = detect_format(spec) if format == "auto" else format
    if kind not in FORMATS:
        raise DataError(f"expected a format among {', '.join(FORMATS)}; found {kind!r}", spec)
    if kind == "hf":
        from riftco.train.prepare.hub import open_hub

        name = spec.removeprefix(HF_PREFIX)
        return open_hub(name, hf_config, split, revision, cache_dir, offline)
    path = Path(spec)
    size, digest = _file_digest(path)
    describe = {"kind": kind, "path": spec, "bytes": size, "sha256": digest}
    if kind == "jsonl":
        rows: Callable[[], Iterator[Row]] = lambda: _jsonl_rows(path)  # noqa: E731
        total = None
    elif kind == "json":
        records = _json_records(path, size)
        rows = lambda: (Row(i, r) for i, r in enumerate(records, start=1))  # noqa: E731
        total = len(records)
    elif kind == "csv":
        rows, total = (lambda: _csv_rows(path)), None
    else:
        rows, total = _parquet(path)
    if kind == "parquet":
        columns = _parquet_columns(path)
    elif kind == "csv":
        columns = _csv_header(path)
    else:
        first = next(iter(rows()), None)
        record = first.record if first is not None else None
        columns = sorted(record) if isinstance(record, dict) else []
    return RecordSource(spec, kind, columns, total, describe, None, rows)


def _file_digest(path: Path) -> tuple[int, str]:
    require_regular_file(path, DataError)  # a FIFO or /dev/zero would never end
    try:
        size = path.stat().st_size
        if size > MAX_SOURCE_BYTES:
            raise DataError(f"expected at most {MAX_SOURCE_BYTES} bytes; found {size}", str(path))
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror or exc}", str(path)) from None
    return size, digest.hexdigest()


def _decode(raw: bytes, path: Path, line: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"expected UTF-8; found byte {raw[exc.start]:#04x}", str(path), line
        ) from None


def _jsonl_rows(path: Path) -> Iterator[Row]:
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            text = _decode(raw, path, number)
            if number == 1:
                text = text.removeprefix("\ufeff")
            if not text.strip():
                continue
            yield Row(number, _loads(text, path, number))


def _loads(text: str, path: Path, line: int | None) -> Any:
    try:
        return loads_strict(text)
    except JSONError as exc:
        raise DataError(str(exc), str(path), line) from None


def _json_records(path: Path, size: int) -> list[Any]:
    if size > MAX_JSON_BYTES:
        raise DataError(
            f"a .json source holds at most {MAX_JSON_BYTES} bytes; use JSONL", str(path)
        )
    document = _loads(_decode(path.read_bytes(), path, 1).removeprefix("\ufeff"), path, None)
    if isinstance(document, dict):
        lists = [k for k in ("data", "rows") if isinstance(document.get(k), list)]
        if lists:
            document = document[lists[0]]
    if not isinstance(document, list):
        raise DataError(
            f"expected a JSON array of records (or an object with 'data' or 'rows'); "
            f"found {type(document).__name__}",
            str(path),
        )
    return document


def _csv_rows(path: Path) -> Iterator[Row]:
    csv.field_size_limit(MAX_CSV_FIELD)
    with open(path, "rb") as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        try:
            reader = csv.reader(text, strict=True)
            header = next(reader, None)
            if header is None:
                return
            for number, values in enumerate(reader, start=1):
                if not values:
                    continue
                if len(values) != len(header):
                    yield Row(
                        number, _Malformed(f"expected {len(header)} fields; found {len(values)}")
                    )
                    continue
                yield Row(number, dict(zip(header, values)))
        except UnicodeDecodeError as exc:
            raise DataError(f"expected UTF-8; {exc.reason}", str(path)) from None
        except csv.Error as exc:
            raise DataError(f"malformed CSV: {exc}", str(path), reader.line_num) from None


def _csv_header(path: Path) -> list[str]:
    csv.field_size_limit(MAX_CSV_FIELD)
    with open(path, encoding="utf-8-sig", newline="") as handle:
        try:
            return sorted(next(csv.reader(handle, strict=True), []))
        except (UnicodeDecodeError, csv.Error) as exc:
            raise DataError(f"cannot read the CSV header: {exc}", str(path)) from None


@dataclass(frozen=True)
class _Malformed:
    """A row the reader could not turn into a record (the layouts report it)."""

    reason: str


def _pyarrow_parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(
            "reading Parquet needs pyarrow: pip install 'riftco-train[parquet]'"
        ) from None
    return pq


def _parquet(path: Path) -> tuple[Callable[[], Iterator[Row]], int]:
    pq = _pyarrow_parquet()
    try:
        total = pq.ParquetFile(path).metadata.num_rows
    except Exception as exc:  # pyarrow raises its own ArrowInvalid, OSError, ...
        raise DataError(f"not a readable Parquet file: {exc}", str(path)) from None

    def rows() -> Iterator[Row]:
        number = 0
        try:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH_ROWS):
                for record in batch.to_pylist():
                    number += 1
                    yield Row(number, record)
        except (OSError, ValueError) as exc:
            raise DataError(f"row {number + 1}: cannot read Parquet: {exc}", str(path)) from None

    return rows, total


def _parquet_columns(path: Path) -> list[str]:
    return sorted(_pyarrow_parquet().ParquetFile(path).schema_arrow.names)


def is_malformed(record: Any) -> str | None:
    """Why the reader could not make a record of this row, or None."""
    return record.reason if isinstance(record, _Malformed) else None


__all__ = [
    "FORMATS",
    "HF_PREFIX",
    "RecordSource",
    "Row",
    "detect_format",
    "is_malformed",
    "open_source",
]
