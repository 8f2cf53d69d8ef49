"""What the spec-only backend's keyed and operator snapshots share: the asynchronous task (KB-SNAP-2, KB-SNAP-6)
and the name a stream goes by in errors. It imports nothing from `statecert.reference`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import fsspec

from statecert.spec.errors import SnapshotCancelledError
from statecert.spec.handles import FileStateHandle, StreamStateHandle

H = TypeVar("H")


class SnapshotTask(Generic[H]):
    """The asynchronous part: `write(cancelled)` writes the stream; `cancel()` makes it stop and discard. A cancel
    that returned True means `run()` raises and leaves no file, even when it came after the stream had closed: the
    written handle's file is deleted then (KB-SNAP-6). The lock orders a cancel against the end of the run."""

    def __init__(self, write: Callable[[Callable[[], bool]], H | None]) -> None:
        self._write, self._cancelled, self._done = write, threading.Event(), threading.Event()
        self._lock = threading.Lock()

    def run(self) -> H | None:
        try:
            if self._cancelled.is_set():
                raise SnapshotCancelledError("cancelled before it ran")
            result = self._write(self._cancelled.is_set)
            with self._lock:
                if not self._cancelled.is_set():
                    self._done.set()
                    return result
            delegate = getattr(result, "delegate", None)  # keyed and operator handles hold their stream there
            if isinstance(delegate, FileStateHandle):
                fs, path = fsspec.core.url_to_fs(delegate.path)
                fs.rm_file(path)
            raise SnapshotCancelledError("cancelled after its stream was written")
        finally:
            with self._lock:
                self._done.set()

    def cancel(self) -> bool:
        with self._lock:
            if self._done.is_set():
                return False
            self._cancelled.set()
            return True

    @property
    def done(self) -> bool:
        return self._done.is_set()


def stream_name(delegate: StreamStateHandle) -> str:
    """The stream's name for error messages: its file, or an inline stream's handle name (FMT-8)."""
    return delegate.path if isinstance(delegate, FileStateHandle) else f"<inline state {delegate.handle_name}>"
