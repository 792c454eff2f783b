"""Dataset preparation: public instruction or text datasets to the project's files.

``open_source`` reads local JSON/JSONL/CSV/Parquet files or Hugging Face datasets,
``prepare_data`` converts each row through a layout (Alpaca, Dolly, chat messages,
prompt/response, text), de-duplicates, splits with a seed and writes the files and a
manifest atomically. ``riftco prepare-data`` is the command.
"""

from __future__ import annotations

from riftco.train.prepare.core import (
    MANIFEST,
    PrepareOptions,
    PrepareResult,
    prepare_data,
    read_manifest,
)
from riftco.train.prepare.layouts import LAYOUTS, Layout, detect_layout
from riftco.train.prepare.sources import FORMATS, RecordSource, Row, open_source
from riftco.train.prepare.split import SplitOptions

__all__ = [
    "FORMATS",
    "LAYOUTS",
    "MANIFEST",
    "Layout",
    "PrepareOptions",
    "PrepareResult",
    "RecordSource",
    "Row",
    "SplitOptions",
    "detect_layout",
    "open_source",
    "prepare_data",
    "read_manifest",
]
