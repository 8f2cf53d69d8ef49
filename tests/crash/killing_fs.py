"""`killfs:///abs/path`: the local file system, except that the process SIGKILLs itself at its Nth mutating file
operation (opening for write, each write, close, rename, each file deleted, mkdir), before performing it. A real
kill, not an exception: nothing in the process gets to clean up, exactly like a machine losing power or an OOM
kill."""

from __future__ import annotations

import os
import signal
from typing import IO, Any

from fsspec.implementations.local import LocalFileSystem

KILL_AT_ENV = "STATECERT_KILL_AT"  # the 1-based operation to die at; 0 or unset: never, just count


class OperationCounter:
    def __init__(self) -> None:
        self.count = 0
        self.kill_at = int(os.environ.get(KILL_AT_ENV, "0"))

    def step(self) -> None:
        self.count += 1
        if self.count == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


COUNTER = OperationCounter()


class _CountingWriter:
    def __init__(self, inner: IO[bytes]) -> None:
        self._inner = inner

    def write(self, data: bytes) -> int:
        COUNTER.step()
        return self._inner.write(data)

    def close(self) -> None:
        COUNTER.step()
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> _CountingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KillingFileSystem(LocalFileSystem):  # type: ignore[misc]
    protocol = "killfs"

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith("killfs://"):
            path = path[len("killfs://") :]
        return super()._strip_protocol(path)

    def unstrip_protocol(self, name: str) -> str:
        return "killfs://" + str(self._strip_protocol(name))

    def open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode or "a" in mode:
            COUNTER.step()
            return _CountingWriter(super().open(path, mode, *args, **kwargs))
        return super().open(path, mode, *args, **kwargs)

    def mv(self, path1: str, path2: str, *args: Any, **kwargs: Any) -> Any:
        COUNTER.step()
        return super().mv(path1, path2, *args, **kwargs)

    def rm_file(self, path: str) -> Any:
        COUNTER.step()
        return super().rm_file(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> Any:
        """A recursive delete is one operation per file, in listing order, then the directories: like an object
        store (S3, GCS), where deleting a "directory" deletes its objects one by one."""
        if not recursive or not self.isdir(path):
            COUNTER.step()
            return super().rm(path, recursive=recursive, maxdepth=maxdepth)
        root = self._strip_protocol(path)
        for file in sorted(self.find(root)):
            COUNTER.step()
            os.remove(file)
        for directory in sorted({d for d, _, _ in os.walk(root)}, key=len, reverse=True):
            COUNTER.step()
            os.rmdir(directory)
        return None

    def makedirs(self, path: str, exist_ok: bool = False) -> Any:
        COUNTER.step()
        return super().makedirs(path, exist_ok=exist_ok)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> Any:
        COUNTER.step()
        return super().mkdir(path, create_parents=create_parents, **kwargs)
