"""Atomic, durable file writes: a crash leaves either the old file or the whole new one.

:func:`atomic_write` writes to a temporary file in the target's folder, fsyncs it,
renames it over the target and fsyncs the folder (which makes the rename itself
durable). A new file gets the mode the umask gives (``0o666 & ~umask``, as
``open(path, "w")`` would); a file that is replaced keeps its permission bits.
On an exception the target is untouched and the temporary file removed. The
temporary is named ``.NAME.PID.RANDOM.tmp``; those of ``path`` whose writer is gone
(a kill during a write) are removed by the next write of ``path``
(:func:`remove_stale_temporaries`), so they never pile up.

:func:`staged_files` does the same for files that another library writes by
path (``gguf``, ``onnx``): they are written under their final names in a
temporary folder beside the targets, then fsynced and renamed over them.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

_NEW_FILE_MODE = 0o666  # the kernel applies the umask to it
_TEMP_ATTEMPTS = 100
# fsync of a folder is not supported everywhere (some network and FUSE file
# systems); there the rename is as durable as that file system makes it.
_FOLDER_FSYNC_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF}


@contextmanager
def atomic_write(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path``; on a clean exit make it ``path`` durably."""
    target = Path(path)
    remove_stale_temporaries(target)
    fd, temp = _create_temp(target)
    try:
        with os.fdopen(fd, "wb") as handle:
            _keep_mode(target, handle.fileno())
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_folder(target.parent)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` with :func:`atomic_write`."""
    with atomic_write(path) as handle:
        handle.write(data)


@contextmanager
def staged_files(folder: str | os.PathLike[str], names: Sequence[str]) -> Iterator[Path]:
    """A temporary folder inside ``folder``; on a clean exit each of ``names`` written
    there replaces ``folder / name`` durably. Files keep their final names while being
    written, so a file that names another (ONNX external data) stays valid."""
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
    fsync_folder(folder)


def fsync_folder(folder: str | os.PathLike[str]) -> None:
    """Flush ``folder``'s entries (a rename into it) to disk, where the platform can."""
    if not hasattr(os, "O_DIRECTORY"):  # Windows: folders cannot be opened or fsynced
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _FOLDER_FSYNC_UNSUPPORTED:
            raise
    finally:
        os.close(fd)


def _create_temp(target: Path) -> tuple[int, Path]:
    # tempfile.mkstemp would create the file 0o600 whatever the umask; opening it
    # ourselves with O_EXCL keeps mkstemp's safety and lets the umask apply.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(_TEMP_ATTEMPTS):
        temp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(temp, flags, _NEW_FILE_MODE), temp
        except FileExistsError:
            continue
    raise FileExistsError(
        errno.EEXIST, f"no free temporary name after {_TEMP_ATTEMPTS} tries", str(target)
    )


def remove_stale_temporaries(target: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporaries of ``target`` (``.NAME.PID.RANDOM.tmp`` beside it) whose
    writing process no longer runs; returns what was removed. Files of other names,
    links, and temporaries of live processes are left alone."""
    target = Path(target)
    prefix = f".{target.name}."
    try:
        candidates = [p for p in target.parent.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return []
    removed = []
    for candidate in candidates:
        middle = candidate.name[len(prefix) :]
        if not middle.endswith(".tmp"):
            continue
        pid_text, _, rest = middle[: -len(".tmp")].partition(".")
        if not (pid_text.isascii() and pid_text.isdigit() and rest) or _alive(int(pid_text)):
            continue
        try:
            if candidate.is_file() and not candidate.is_symlink():
                candidate.unlink()
                removed.append(candidate)
        except OSError:
            pass  # another writer removed it first, or it is not ours to remove
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # it exists (another user's), or it is no process id we could check
    return True


def _keep_mode(target: Path, fd: int) -> None:
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        return
    if hasattr(os, "fchmod"):
        os.fchmod(fd, mode)


__all__ = [
    "atomic_write",
    "fsync_folder",
    "remove_stale_temporaries",
    "staged_files",
    "write_bytes_atomic",
]
