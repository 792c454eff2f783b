"""Atomic writes for files that other libraries write by path (``gguf``, ``onnx``).

:func:`staged_files` hands out a temporary folder beside the targets. Whatever the
caller writes there under the target names is fsynced and renamed over the
targets on a clean exit, and the folder fsynced; on an exception the targets are
untouched and the temporary folder is removed. Files keep their final names
while being written, so a file that names another (ONNX external data) stays
valid after the rename.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def staged_files(folder: str | os.PathLike[str], names: Sequence[str]) -> Iterator[Path]:
    """A temporary folder inside ``folder``; on a clean exit each of ``names`` written
    there replaces ``folder / name`` durably."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".riftco-staging.", dir=folder))
    try:
        yield stage
        for name in names:
            with open(stage / name, "rb") as handle:
                os.fsync(handle.fileno())
        for name in names:
            os.replace(stage / name, folder / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _fsync_folder(folder)


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # folders cannot be opened on some platforms
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
