"""Typed errors. Every error riftco-train raises on bad input is a ``TrainError``."""

from __future__ import annotations

from riftco.tensor import RiftcoError


class TrainError(RiftcoError):
    """Base class of every error raised by riftco.train."""


class DataError(TrainError, ValueError):
    """Training data that cannot be used; the message names the file and, for JSONL, the line."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line


class CheckpointError(TrainError, ValueError):
    """A ``.riftckpt`` file that is corrupted, truncated or of an unknown format."""


class ResumeMismatch(CheckpointError):
    """A checkpoint that does not belong to this run: other data, model or stage."""


__all__ = ["CheckpointError", "DataError", "ResumeMismatch", "TrainError"]
