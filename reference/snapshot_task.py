"""A snapshot's asynchronous part as a cancellable task (KB-SNAP-2, KB-SNAP-6), shared by the reference backends."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from statecert.spec.errors import SnapshotCancelledError

H = TypeVar("H")


class AsyncSnapshotTask(Generic[H]):
    """Runs `write(cancelled)` once. `cancel()` before or during the run makes it raise SnapshotCancelledError;
    `write` checks `cancelled()` between units of work and discards what it wrote when it sees it."""

    def __init__(
        self, write: Callable[[Callable[[], bool]], H | None], on_done: Callable[[AsyncSnapshotTask[H]], None]
    ):
        self._write = write
        self._on_done = on_done
        self._cancelled = threading.Event()
        self._done = threading.Event()
        self._started = False

    def cancel(self) -> bool:
        if self._done.is_set():
            return False
        self._cancelled.set()
        return True

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def run(self) -> H | None:
        if self._started:
            raise RuntimeError("a snapshot task runs once")
        self._started = True
        try:
            if self._cancelled.is_set():
                raise SnapshotCancelledError("snapshot cancelled before its asynchronous part ran")
            try:
                result = self._write(self._cancelled.is_set)
            except Exception as exc:
                if self._cancelled.is_set():  # e.g. close() released a file the upload was reading
                    raise SnapshotCancelledError(f"snapshot cancelled while running ({exc})") from exc
                raise
            if self._cancelled.is_set():
                raise SnapshotCancelledError("snapshot cancelled while running")
            return result
        finally:
            self._done.set()
            self._on_done(self)
