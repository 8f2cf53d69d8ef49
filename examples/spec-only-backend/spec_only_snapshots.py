"""What the spec-only backend's keyed and operator snapshots share: the asynchronous task (KB-SNAP-2, KB-SNAP-6)
and the name a stream goes by in errors. It imports nothing from `statecert.reference`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from statecert.spec.errors import SnapshotCancelledError
from statecert.spec.handles import FileStateHandle, StreamStateHandle

H = TypeVar("H")


class SnapshotTask(Generic[H]):
    """The asynchronous part: `write(cancelled)` writes the stream; `cancel()` makes it stop and discard."""

    def __init__(self, write: Callable[[Callable[[], bool]], H | None]) -> None:
        self._write, self._cancelled, self._done = write, threading.Event(), threading.Event()

    def run(self) -> H | None:
        try:
            if self._cancelled.is_set():
                raise SnapshotCancelledError("cancelled before it ran")
            return self._write(self._cancelled.is_set)
        finally:
            self._done.set()

    def cancel(self) -> bool:
        self._cancelled.set()
        return not self._done.is_set()

    @property
    def done(self) -> bool:
        return self._done.is_set()


def stream_name(delegate: StreamStateHandle) -> str:
    """The stream's name for error messages: its file, or an inline stream's handle name (FMT-8)."""
    return delegate.path if isinstance(delegate, FileStateHandle) else f"<inline state {delegate.handle_name}>"
