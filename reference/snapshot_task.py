"""A snapshot's asynchronous part as a cancellable task (KB-SNAP-2, KB-SNAP-6), shared by the reference backends."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from statecert.spec.errors import SnapshotCancelledError

H = TypeVar("H")


class AsyncSnapshotTask(Generic[H]):
    """Runs `write(cancelled)` once. `cancel()` before or during the run makes it raise SnapshotCancelledError;
    `write` checks `cancelled()` between units of work. `discard_written()` (e.g. `WrittenStreams.discard`) deletes
    what the part wrote when it fails or is cancelled, whenever the cancel comes: even after its last stream closed,
    up to the moment `run()` returns, so a `cancel()` that returned True always means a raising `run()` and nothing
    left behind (KB-SNAP-6)."""

    def __init__(
        self,
        write: Callable[[Callable[[], bool]], H | None],
        on_done: Callable[[AsyncSnapshotTask[H]], None],
        discard_written: Callable[[], None] | None = None,
    ):
        self._write = write
        self._on_done = on_done
        self._discard = discard_written
        self._cancelled = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()  # a cancel and the run's end are ordered: one of them comes first
        self._started = False

    def cancel(self) -> bool:
        with self._lock:
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
                self._discard_written()
                if self._cancelled.is_set():  # e.g. close() released a file the upload was reading
                    if isinstance(exc, SnapshotCancelledError):
                        raise
                    raise SnapshotCancelledError(f"snapshot cancelled while running ({exc})") from exc
                raise
            with self._lock:
                if not self._cancelled.is_set():
                    self._done.set()
                    return result
            self._discard_written()
            raise SnapshotCancelledError("snapshot cancelled after its asynchronous part wrote its state")
        finally:
            with self._lock:
                self._done.set()
            self._on_done(self)

    def _discard_written(self) -> None:
        if self._discard is not None:
            self._discard()
