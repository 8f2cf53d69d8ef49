"""Fault-injecting fsspec file systems over real ones: `faulty:///tmp/x` is the local `/tmp/x`, and
`faulty+<protocol>://<path>` is `<protocol>://<path>` (`faulty+s3://bucket/x`, `faulty+file:///tmp/x`, ...), so the
same faults reach checkpoint storage on any file system a cluster uses.

Tests and scenarios use them to make writes (copies included) fail after some bytes, or renames fail, at chosen
paths, and then check that nothing that looks complete was left behind (FMT-7, CS-6). They never fake success. The
rules are one list per process, shared by every fault-injecting file system, matched against paths without their
protocol.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import IO, Any

import fsspec
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem

_RULES: list[Any] = []  # FaultRule
WRAPPED_PROTOCOLS = ("file", "memory", "s3", "s3a", "gs", "gcs", "abfs", "az", "hdfs", "webhdfs", "sftp")


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


class _FaultRules:
    """The rule plumbing both file systems share."""

    @property
    def rules(self) -> list[FaultRule]:
        return _RULES

    def fail_writes(self, pattern: str, after_bytes: int = 0, times: int = 1) -> FaultRule:
        rule = FaultRule("write", pattern, after_bytes, times)
        _RULES.append(rule)
        return rule

    def fail_moves(self, pattern: str, times: int = 1) -> FaultRule:
        rule = FaultRule("move", pattern, 0, times)
        _RULES.append(rule)
        return rule

    def clear_faults(self) -> None:
        _RULES.clear()

    def _rule(self, kind: str, path: str) -> FaultRule | None:
        return next((r for r in _RULES if r.take(kind, path)), None)

    # the wrapped file system's open and mv (next in the method order), with the rules applied first
    def open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        path = self._strip_protocol(path)  # type: ignore[attr-defined]
        handle = super().open(path, mode, *args, **kwargs)  # type: ignore[misc]
        rule = self._rule("write", path) if ("w" in mode or "a" in mode) else None
        return _FailingWriter(handle, path, rule.after_bytes) if rule else handle

    def mv(self, path1: str, path2: str, *args: Any, **kwargs: Any) -> Any:
        if self._rule("move", self._strip_protocol(path2)):  # type: ignore[attr-defined]
            raise InjectedFault(f"injected failure moving {path1} to {path2}")
        return self._move(path1, path2, *args, **kwargs)

    def _move(self, path1: str, path2: str, *args: Any, **kwargs: Any) -> Any:
        """The move itself, once no rule failed it: the wrapped file system's."""
        return super().mv(path1, path2, *args, **kwargs)  # type: ignore[misc]

    def cp_file(self, path1: str, path2: str, *args: Any, **kwargs: Any) -> Any:
        """A copy writes its destination: a write rule for it copies `after_bytes` bytes, then fails."""
        destination = self._strip_protocol(path2)  # type: ignore[attr-defined]
        rule = self._rule("write", destination)
        if rule is None:
            return super().cp_file(path1, path2, *args, **kwargs)  # type: ignore[misc]
        with super().open(self._strip_protocol(path1), "rb") as source:  # type: ignore[attr-defined,misc]
            head = source.read(rule.after_bytes)
        with super().open(destination, "wb") as sink:  # type: ignore[misc]
            sink.write(head)
        raise InjectedFault(f"injected write failure copying {path1} to {path2}")


class FaultInjectingFileSystem(_FaultRules, LocalFileSystem):  # type: ignore[misc]
    """`faulty://<absolute path>`: the local file system, with fault rules. One instance per process (fsspec
    caches it), so tests reach the rules through `fsspec.filesystem("faulty")`."""

    protocol = "faulty"

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith("faulty://"):
            path = path[len("faulty://") :]
        return super()._strip_protocol(path)

    def unstrip_protocol(self, name: str) -> str:
        return "faulty://" + str(self._strip_protocol(name))


class FaultInjectingWrapper(_FaultRules, DirFileSystem):  # type: ignore[misc]
    """`faulty+<protocol>://<path>`: the file system of `<protocol>` (one of `WRAPPED_PROTOCOLS`), every call passed
    through, with the same fault rules on writes and moves."""

    protocol = tuple(f"faulty+{p}" for p in WRAPPED_PROTOCOLS)

    def __init__(self, target_protocol: str = "file", target_options: dict[str, Any] | None = None, **kwargs: Any):
        kwargs.pop("fo", None)
        super().__init__(path="", fo="", target_protocol=target_protocol, target_options=target_options, **kwargs)
        self.path = ""  # no prefix (a local file system would have made "" the working directory)
        self.target_protocol = target_protocol

    @classmethod
    def _get_kwargs_from_urls(cls, path: str) -> dict[str, Any]:
        scheme = path.split("://", 1)[0]
        return {"target_protocol": scheme.split("+", 1)[1]} if scheme.startswith("faulty+") else {}

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith("faulty+") and "://" in path:
            scheme, rest = path.split("://", 1)
            target = scheme.split("+", 1)[1]
            return fsspec.get_filesystem_class(target)._strip_protocol(f"{target}://{rest}")
        return path

    def _join(self, path: Any) -> Any:
        return super()._join(self._strip_protocol(path) if isinstance(path, str) else path)

    def unstrip_protocol(self, name: str) -> str:
        return f"faulty+{self.target_protocol}://{self._strip_protocol(name)}"

    def _move(self, path1: str, path2: str, *args: Any, **kwargs: Any) -> Any:
        """Off the local disk a file's move is a copy and a delete (fsspec's own `mv`), here through this file
        system's `cp_file`: a write rule on the destination fails the copy part way, leaving part of the file there,
        as an interrupted copy on a file system without atomic renames does."""
        if args or kwargs.get("recursive") or not self.isfile(path1):
            return super()._move(path1, path2, *args, **kwargs)
        self.cp_file(path1, path2)
        self.rm_file(path1)
        return None


def faulty_url(url: str) -> str:
    """The fault-injecting URL of `url`: a local path or `file://` URL becomes `faulty://<absolute path>`, any other
    URL `faulty+<protocol>://...`; an unsupported protocol is a ValueError naming it."""
    if url.startswith(("faulty://", "faulty+")):
        return url
    if "://" not in url or url.startswith("file://"):
        return "faulty://" + str(LocalFileSystem._strip_protocol(url))
    protocol = url.split("://", 1)[0]
    if protocol not in WRAPPED_PROTOCOLS:
        raise ValueError(f"no fault-injecting wrapper for {protocol}:// (supported: {', '.join(WRAPPED_PROTOCOLS)})")
    return f"faulty+{url}"
