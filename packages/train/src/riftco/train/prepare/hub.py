"""Hugging Face datasets as a ``RecordSource``, through the ``datasets`` library.

``name`` is a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``
(read with ``load_from_disk``) or a dataset name for ``load_dataset``. Offline
(``offline=True``, or ``HF_DATASETS_OFFLINE=1`` already set) nothing is fetched: a hub
name resolves from the ``datasets`` cache (``cache_dir`` or the default one) or fails
with the library's reason.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from riftco.train.errors import DataError
from riftco.train.prepare.sources import RecordSource, Row

EXTRA_HINT = "pip install 'riftco-train[datasets]'"


def _datasets(offline: bool) -> Any:
    if offline:  # read by datasets and huggingface_hub when they are imported
        os.environ["HF_DATASETS_OFFLINE"] = "1"
        os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        module = importlib.import_module("datasets")
    except ImportError:
        raise DataError(f"Hugging Face datasets need the datasets library: {EXTRA_HINT}") from None
    config = getattr(module, "config", None)
    if offline and config is not None and hasattr(config, "HF_DATASETS_OFFLINE"):
        config.HF_DATASETS_OFFLINE = True  # already imported before the flag was set
    return module


def open_hub(
    name: str,
    config: str | None,
    split: str,
    revision: str | None,
    cache_dir: str | None,
    offline: bool,
) -> RecordSource:
    """Load one split of a dataset and describe it (name, configuration, split,
    revision, fingerprint, version, license)."""
    datasets = _datasets(offline)
    local = Path(name).is_dir()
    try:
        if local:
            loaded = datasets.load_from_disk(name)
            if hasattr(loaded, "keys") and not hasattr(loaded, "features"):
                if split not in loaded:
                    raise DataError(
                        f"expected a split among {sorted(loaded.keys())}; found {split!r}", name
                    )
                loaded = loaded[split]
        else:
            loaded = datasets.load_dataset(
                name, config, split=split, revision=revision, cache_dir=cache_dir
            )
    except DataError:
        raise
    except Exception as exc:  # the library raises many types (hub, network, file errors)
        hint = " (offline: only the datasets cache is consulted)" if offline else ""
        raise DataError(
            f"cannot load the dataset{hint}: {type(exc).__name__}: {exc}", name
        ) from None
    info = getattr(loaded, "info", None)
    license_ = getattr(info, "license", None) or None
    columns = sorted(getattr(loaded, "column_names", None) or [])
    describe = {
        "kind": "hf",
        "name": name,
        "local": local,
        "config": config if not local else None,
        "split": split,
        "revision": revision,
        "version": str(getattr(info, "version", "") or "") or None,
        "fingerprint": getattr(loaded, "_fingerprint", None),
        "offline": bool(offline or os.environ.get("HF_DATASETS_OFFLINE") == "1"),
    }

    def rows():  # -> Iterator[Row]
        for number, record in enumerate(loaded, start=1):
            yield Row(number, record)

    return RecordSource(name, "hf", columns, len(loaded), describe, license_, rows)


__all__ = ["open_hub"]
