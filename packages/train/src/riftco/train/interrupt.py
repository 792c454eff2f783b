"""Ctrl-C during training: finish the step, save a checkpoint, exit cleanly."""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType, TracebackType
from typing import Any, TextIO


class StopOnInterrupt:
    """While active, the first SIGINT sets ``requested`` (the training loop then saves
    and stops after the current step); a second one raises ``KeyboardInterrupt`` at once.

    Outside the main thread signals cannot be caught; the context then does nothing.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.requested = False
        self.stream = stream if stream is not None else sys.stderr
        self._previous: Any = None
        self._installed = False

    def __call__(self) -> bool:
        return self.requested

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(
            "\ninterrupt: saving a checkpoint after this step (press Ctrl-C again to abort)",
            file=self.stream,
            flush=True,
        )

    def __enter__(self) -> StopOnInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False


__all__ = ["StopOnInterrupt"]
