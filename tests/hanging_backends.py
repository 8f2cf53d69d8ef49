"""Backends that hang: each deadlocks in a call the suite makes, as a backend written with a lock or an ordering
its author thought safe does. Certification must fail the test they hang in and go on (`--test-timeout`,
`conformance.time_bound`), not hang with them. Usable as `statecert certify tests.hanging_backends:<name>`; not in
the broken backends' catalogue, whose runs take the default bound of 600 s a hang."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.heap.keyed_backend import HeapKeyedStateBackend
from statecert.reference.timers.timer_service import KeyedTimerService


class _LockedTimerService(KeyedTimerService):
    """Guards its timers with a `threading.Lock`, held while an advance's callbacks run: a callback that registers
    or deletes a timer (TM-4, TM-5) waits for itself for ever. An `RLock` would do."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._lock = threading.Lock()

    def register_event_time_timer(self, namespace: Any, time: int) -> None:
        with self._lock:
            super().register_event_time_timer(namespace, time)

    def delete_event_time_timer(self, namespace: Any, time: int) -> None:
        with self._lock:
            super().delete_event_time_timer(namespace, time)

    def register_processing_time_timer(self, namespace: Any, time: int) -> None:
        with self._lock:
            super().register_processing_time_timer(namespace, time)

    def delete_processing_time_timer(self, namespace: Any, time: int) -> None:
        with self._lock:
            super().delete_processing_time_timer(namespace, time)

    def advance_watermark(self, time: int) -> None:
        with self._lock:
            super().advance_watermark(time)

    def advance_processing_time(self, time: int) -> None:
        with self._lock:
            super().advance_processing_time(time)


class _TimersLocked(HeapKeyedStateBackend):
    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.timer_service_class = _LockedTimerService


class _UploadInOrder:
    """A snapshot task whose asynchronous part runs on the backend's uploader threads and first waits for the part
    of the snapshot taken before it, so that uploads reach the storage in checkpoint order. KB-SNAP-5 lets a later
    snapshot's part run first: its uploader thread, which is no daemon, then waits for ever."""

    def __init__(self, task: Any, uploader: ThreadPoolExecutor, previous: threading.Event) -> None:
        self._task, self._uploader, self._previous = task, uploader, previous
        self.uploaded = threading.Event()

    def run(self) -> Any:
        def upload() -> Any:
            self._previous.wait()
            try:
                return self._task.run()
            finally:
                self.uploaded.set()

        return self._uploader.submit(upload).result()

    def cancel(self) -> bool:
        cancelled = bool(self._task.cancel())
        self.uploaded.set()
        return cancelled

    def done(self) -> bool:
        return bool(self._task.done())


class _UploadsInOrder(HeapKeyedStateBackend):
    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self._uploader = ThreadPoolExecutor(max_workers=2, thread_name_prefix="uploader")
        self._last_upload = threading.Event()
        self._last_upload.set()

    def snapshot(self, *args: Any, **kwargs: Any) -> Any:
        task = _UploadInOrder(super().snapshot(*args, **kwargs), self._uploader, self._last_upload)
        self._last_upload = task.uploaded
        return task

    def close(self) -> None:
        super().close()
        self._uploader.shutdown(wait=False)


def _factory(keyed: type[HeapKeyedStateBackend]) -> Any:
    backend_class = type("Hanging", (HashMapStateBackend,), {"create_keyed_state_backend": lambda _, p: keyed(p)})
    return lambda config: backend_class()


timer_callbacks_deadlock = _factory(_TimersLocked)
uploads_wait_for_earlier_snapshots = _factory(_UploadsInOrder)
