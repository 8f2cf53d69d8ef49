"""A fault-injecting fsspec file system over the real local one: `faulty:///tmp/x` is the local `/tmp/x`.

Tests and scenarios use it to make writes fail after some bytes, or renames fail, at chosen paths, and then check
that nothing that looks complete was left behind (FMT-7, CS-6). It never fakes success.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import IO, Any

from fsspec.implementations.local import LocalFileSystem


class InjectedFault(OSError):
    """The I/O error a fault rule raises."""


@dataclass
class FaultRule:
    """Fail operations of `kind` ("write" or "move") on paths matching `pattern`, `times` times (-1: always)."""

    kind: str
    pattern: str
    after_bytes: int = 0
    times: int = 1

    def take(self, kind: str, path: str) -> bool:
        if self.kind != kind or self.times == 0 or not fnmatch.fnmatch(path, self.pattern):
            return False
        if self.times > 0:
            self.times -= 1
        return True


class _FailingWriter:
    """Passes writes through until `after_bytes`, then raises InjectedFault."""

    def __init__(self, inner: IO[bytes], path: str, after_bytes: int) -> None:
        self._inner = inner
        self._path = path
        self._budget = after_bytes

    def write(self, data: bytes) -> int:
        if len(data) > self._budget:
            self._inner.write(data[: self._budget])
            self._budget = 0
            raise InjectedFault(f"injected write failure on {self._path}")
        self._budget -= len(data)
        return self._inner.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> _FailingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()


class FaultInjectingFileSystem(LocalFileSystem):  # type: ignore[misc]
    """`faulty://<absolute path>`: the local file system, with fault rules. One instance per process (fsspec
    caches it), so tests reach the same rules through `fsspec.filesystem("faulty")`."""

    protocol = "faulty"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rules: list[FaultRule] = []

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith("faulty://"):
            path = path[len("faulty://") :]
        return super()._strip_protocol(path)

    def unstrip_protocol(self, name: str) -> str:
        return "faulty://" + str(self._strip_protocol(name))

    def fail_writes(self, pattern: str, after_bytes: int = 0, times: int = 1) -> FaultRule:
        rule = FaultRule("write", pattern, after_bytes, times)
        self.rules.append(rule)
        return rule

    def fail_moves(self, pattern: str, times: int = 1) -> FaultRule:
        rule = FaultRule("move", pattern, 0, times)
        self.rules.append(rule)
        return rule

    def clear_faults(self) -> None:
        self.rules.clear()

    def _rule(self, kind: str, path: str) -> FaultRule | None:
        return next((r for r in self.rules if r.take(kind, path)), None)

    def open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        handle = super().open(path, mode, *args, **kwargs)
        rule = self._rule("write", path) if ("w" in mode or "a" in mode) else None
        return _FailingWriter(handle, path, rule.after_bytes) if rule else handle

    def mv(self, path1: str, path2: str, *args: Any, **kwargs: Any) -> Any:
        if self._rule("move", self._strip_protocol(path2)):
            raise InjectedFault(f"injected failure moving {path1} to {path2}")
        return super().mv(path1, path2, *args, **kwargs)
