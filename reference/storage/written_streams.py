"""The streams one snapshot's asynchronous part wrote, so that a cancelled or failed part deletes exactly those
(KB-SNAP-6): never the files of an earlier checkpoint it references, which were written through another factory."""

from __future__ import annotations

import threading
from typing import Any

from statecert.reference.storage.discard import remove_file
from statecert.spec.handles import FileStateHandle, StreamStateHandle
from statecert.spec.storage import CheckpointedStateScope, CheckpointStateOutputStream, CheckpointStreamFactory


def discard_stream_handles(handles: list[StreamStateHandle]) -> None:
    """Delete the files of `handles` (inline handles hold nothing to delete)."""
    for handle in handles:
        if isinstance(handle, FileStateHandle):
            remove_file(handle.path)


class _RecordedStream:
    """A checkpoint output stream that hands its handle to `WrittenStreams` when it closes."""

    def __init__(self, inner: CheckpointStateOutputStream, written: WrittenStreams) -> None:
        self._inner = inner
        self._written = written
        self.accepts_buffers = getattr(inner, "accepts_buffers", False)

    def write(self, data: bytes) -> int:
        return self._inner.write(data)

    def tell(self) -> int:
        return self._inner.tell()

    def close_and_get_handle(self) -> StreamStateHandle | None:
        handle = self._inner.close_and_get_handle()
        if handle is not None:
            self._written.record(handle)
        return handle

    def discard(self) -> None:
        self._inner.discard()

    def __enter__(self) -> _RecordedStream:
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._inner.__exit__(*exc)


class WrittenStreams:
    """A stream factory passing every call to `inner` and recording the handle of each stream closed through it;
    `discard()` deletes their files. A snapshot writes through one and gives it to its `AsyncSnapshotTask`."""

    def __init__(self, inner: CheckpointStreamFactory) -> None:
        self._inner = inner
        self._handles: list[StreamStateHandle] = []
        self._lock = threading.Lock()

    def create_checkpoint_state_output_stream(self, scope: CheckpointedStateScope) -> CheckpointStateOutputStream:
        return _RecordedStream(self._inner.create_checkpoint_state_output_stream(scope), self)

    def record(self, handle: StreamStateHandle) -> None:
        with self._lock:
            self._handles.append(handle)

    def discard(self) -> None:
        with self._lock:
            handles, self._handles = self._handles, []
        discard_stream_handles(handles)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
