"""The checkpoint state output stream: buffers in memory, spills to a file past the inline threshold (CS-4, CS-5)."""

from __future__ import annotations

import io
import uuid
from types import TracebackType
from typing import IO

import crc32c
import fsspec

from statecert.reference.format.paths import join_url
from statecert.spec.errors import StateSizeLimitError
from statecert.spec.handles import ByteStreamStateHandle, FileStateHandle, StreamStateHandle


class CheckpointStateOutputStreamImpl:
    """State of one task for one checkpoint. At most `inline_threshold` bytes stay inline in `_metadata`; more
    goes to a uniquely named file in `directory`, whose handle carries the CRC-32C of its bytes (CS-9). `max_size`
    bounds the whole stream (job-manager storage). `write` takes any bytes-like object (`accepts_buffers`), so the
    canonical writer hands it its packing buffer without a copy."""

    accepts_buffers = True

    def __init__(self, directory: str, inline_threshold: float, max_size: int | None = None) -> None:
        self._directory = directory
        self._threshold = inline_threshold
        self._max_size = max_size
        self._buffer = io.BytesIO()
        self._file: IO[bytes] | None = None
        self._path: str | None = None
        self._pos = 0
        self._crc = 0
        self._closed = False

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self._closed:
            raise ValueError("write to a closed checkpoint stream")
        self._pos += len(data)
        self._crc = crc32c.crc32c(data, self._crc)
        if self._max_size is not None and self._pos > self._max_size:
            self.discard()
            raise StateSizeLimitError(
                f"state of {self._pos} bytes exceeds the maximum state size of {self._max_size} bytes of "
                "job-manager checkpoint storage; use file system checkpoint storage for larger state"
            )
        if self._file is not None:
            self._file.write(data)
        else:
            self._buffer.write(data)
            if self._pos > self._threshold:
                self._spill()
        return len(data)

    def _spill(self) -> None:
        self._path = join_url(self._directory, uuid.uuid4().hex)
        fs_file = fsspec.open(self._path, "wb", auto_mkdir=True)
        self._file = fs_file.open()
        self._file.write(self._buffer.getvalue())
        self._buffer = io.BytesIO()

    def tell(self) -> int:
        return self._pos

    def close_and_get_handle(self) -> StreamStateHandle | None:
        if self._closed:
            raise ValueError("checkpoint stream already closed")
        self._closed = True
        if self._file is not None and self._path is not None:
            self._file.close()
            return FileStateHandle(self._path, self._pos, self._crc)
        if self._pos == 0:
            return None
        return ByteStreamStateHandle(uuid.uuid4().hex, self._buffer.getvalue())

    def discard(self) -> None:
        self._closed = True
        if self._file is not None and self._path is not None:
            try:
                self._file.close()
            finally:
                fs, path = fsspec.core.url_to_fs(self._path)
                if fs.exists(path):
                    fs.rm_file(path)
            self._file = None

    def __enter__(self) -> CheckpointStateOutputStreamImpl:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.discard()
