"""Reading files whose size the reader bounds, not the file: a FIFO, a device such as
``/dev/zero`` or a file that grows while it is read is refused instead of read until
memory runs out (or forever)."""

from __future__ import annotations

import os
import stat

from riftco.core.errors import RiftcoError


def read_bounded(
    path: str | os.PathLike[str], limit: int, error: type[Exception] = RiftcoError
) -> bytes:
    """The bytes of the regular file at ``path`` (a symlink is followed), at most
    ``limit`` of them. A FIFO, a device (``/dev/zero``), a socket or a folder is
    refused before a byte is read, and a file that grows past ``limit`` while being
    read is refused when it does; failures raise ``error`` naming ``path``."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: opening a FIFO does not wait for a writer
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: expected a regular file; found {_file_kind(info.st_mode)}")
        if info.st_size > limit:
            raise error(f"{path}: expected at most {limit} bytes; found {info.st_size}")
        chunks, size = [], 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise error(f"{path}: expected at most {limit} bytes; the file grew past it")
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def require_regular_file(path: str | os.PathLike[str], error: type[Exception] = RiftcoError) -> int:
    """The size of the regular file at ``path``; anything else (a FIFO, a device,
    a folder, a dangling link) raises ``error`` before the file is opened."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path}: expected a regular file; found {_file_kind(info.st_mode)}")
    return info.st_size


def _file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "something that is not a regular file"
