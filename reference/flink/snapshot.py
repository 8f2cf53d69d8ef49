"""A Flink checkpoint or savepoint as a whole: its operators (chosen by uid, name or id), each subtask's keyed state
header and entries, whatever layout a handle has, and a plain-data description for `statecert inspect`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fsspec

from statecert.reference.flink.keyed_stream import FlinkEntry, FlinkKeyedHeader, FlinkKeyedStream
from statecert.reference.flink.metadata import (
    FlinkCheckpoint,
    FlinkIncrementalHandle,
    FlinkKeyedHandle,
    FlinkKeyGroupsHandle,
    FlinkOperatorState,
    FlinkStream,
    is_flink_metadata,
    load_flink_checkpoint,
)
from statecert.reference.flink.native_rocksdb import native_entries, native_header
from statecert.reference.storage.location import resolve_checkpoint_pointer
from statecert.spec.errors import CheckpointFormatError, IllegalConfigurationError


def is_flink_snapshot(pointer: str) -> bool:
    """Whether the checkpoint or savepoint at `pointer` has a `_metadata` written by Flink (its magic number)."""
    location = resolve_checkpoint_pointer(pointer)
    with fsspec.open(location.metadata_path, "rb") as f:
        return is_flink_metadata(bytes(f.read(8)))


def keyed_handles(operator: FlinkOperatorState) -> list[FlinkKeyedHandle]:
    return [s.managed_keyed for s in operator.subtasks if s.managed_keyed is not None]


def choose_operator(checkpoint: FlinkCheckpoint, choice: str | None) -> FlinkOperatorState:
    """The operator with keyed state that `choice` names (uid, name or id; may be left out when only one has)."""
    keyed = [op for op in checkpoint.operators if keyed_handles(op)]
    found = keyed if choice is None else [op for op in keyed if op.matches(choice)]
    if len(found) != 1:
        names = ", ".join(sorted(op.uid or op.name or op.operator_id for op in keyed)) or "none"
        problem = "names more than one operator" if len(found) > 1 else "names no operator with keyed state"
        raise IllegalConfigurationError(f"option operator={choice!r} {problem} of {checkpoint.path}: {names}")
    return found[0]


class HandleReader:
    """One subtask's keyed handle, its stream (or a native snapshot's meta data stream) read once: the header and
    the entries, whatever layout the handle has."""

    def __init__(self, handle: FlinkKeyedHandle, path: str, max_parallelism: int) -> None:
        self.handle, self.path, self.max_parallelism = handle, path, max_parallelism
        self._stream: FlinkKeyedStream | None = None
        if isinstance(handle, FlinkKeyGroupsHandle):
            stream: FlinkStream | None = handle.stream
            if stream is None:
                raise CheckpointFormatError(path, "a key-groups handle without a stream")
            self._stream = FlinkKeyedStream(stream.read(), stream.url or path, handle, max_parallelism)
            self.header = self._stream.header
        elif isinstance(handle, FlinkIncrementalHandle):
            self.header = native_header(handle, path)
        else:
            raise CheckpointFormatError(
                path, f"a {handle.kind} handle: this reader does not read the changelog backend's"
            )

    def entries(self, states: set[str] | None = None) -> Iterator[FlinkEntry]:
        """The keyed state entries (of the states named, or all); timers are not entries."""
        if self._stream is None:
            assert isinstance(self.handle, FlinkIncrementalHandle)
            yield from native_entries(self.handle, self.path, self.max_parallelism, states, self.header)
            return
        for entry in self._stream.entries():
            if states is None or entry.state.name in states:
                yield entry


def header_of(handle: FlinkKeyedHandle, path: str, max_parallelism: int) -> FlinkKeyedHeader:
    return HandleReader(handle, path, max_parallelism).header


def entries_of(
    handle: FlinkKeyedHandle, path: str, max_parallelism: int, states: set[str] | None = None
) -> Iterator[FlinkEntry]:
    """The keyed state entries of one subtask's handle (of the states named, or all)."""
    yield from HandleReader(handle, path, max_parallelism).entries(states)


def _handle(handle: FlinkKeyedHandle | None) -> dict[str, Any] | None:
    if handle is None:
        return None
    if isinstance(handle, FlinkKeyGroupsHandle):
        stream = handle.stream
        kind = "savepoint-key-groups" if handle.savepoint else "key-groups"
        described: dict[str, Any] = {"type": kind, "key_groups": [handle.start, handle.end]}
        if stream is not None:
            described["stream"] = {"kind": stream.kind, "size": stream.size, "name": stream.name}
        return described
    if isinstance(handle, FlinkIncrementalHandle):
        files = [(n, s) for n, s in (*handle.shared, *handle.private) if s is not None]
        return {
            "type": "native-rocksdb",
            "key_groups": [handle.start, handle.end],
            "files": {"shared": len(handle.shared), "private": len(handle.private)},
            "size": sum(s.size for _, s in files) + (handle.meta.size if handle.meta else 0),
        }
    return {"type": handle.kind, "key_groups": [handle.start, handle.end]}


def describe_flink_checkpoint(pointer: str, verify: bool = False) -> dict[str, Any]:
    """What a Flink checkpoint or savepoint holds; with `verify`, every keyed entry is decoded and checked too."""
    checkpoint = load_flink_checkpoint(pointer)
    operators = []
    for op in checkpoint.operators:
        states: dict[str, str] = {}
        not_read: dict[str, str] = {}
        entries = 0
        for handle in keyed_handles(op):
            reader = HandleReader(handle, checkpoint.path, op.max_parallelism)
            header = reader.header
            for meta in header.states:
                states[meta.name] = f"{meta.kind} {meta.value.name}"
            readable = {m.name for m in header.states}
            if isinstance(handle, FlinkIncrementalHandle):
                lists = {m.name for m in header.states if m.kind == "LIST"}
                not_read.update((name, "list state of a native RocksDB snapshot (merge operands)") for name in lists)
                readable -= lists
            if verify:
                entries += sum(1 for _ in reader.entries(readable))
        described: dict[str, Any] = {
            "operator_id": op.operator_id,
            "uid": op.uid,
            "name": op.name,
            "parallelism": op.parallelism,
            "max_parallelism": op.max_parallelism,
            "fully_finished": op.fully_finished,
            "subtasks": [
                {"index": s.index, "finished": s.finished, "keyed": _handle(s.managed_keyed)} for s in op.subtasks
            ],
            "states": states,
        }
        if verify:
            described["entries"] = entries
            described["not_read"] = not_read
        operators.append(described)
    return {
        "pointer": pointer,
        "written_by": "Apache Flink",
        "format_version": checkpoint.version,
        "checkpoint_id": checkpoint.checkpoint_id,
        "operators": operators,
    }
