"""State handles <-> plain data (dicts, lists, ints, str, bytes), shared by the `_metadata` versions.

Decoding treats the data as untrusted: every field is type-checked and a file path may not leave the restore
root (FMT-8, FMT-10). Problems raise ValueError (or UnsafePathError), which the codec turns into one
CheckpointFormatError naming the file.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

from statecert.spec.handles import (
    ByteStreamStateHandle,
    FileStateHandle,
    IncrementalKeyedStateHandle,
    KeyedStateHandle,
    KeyGroupsStateHandle,
    OperatorStateHandle,
    OperatorStateMode,
    OperatorStatePartitions,
    StreamStateHandle,
)
from statecert.spec.keygroups import KeyGroupRange

PathEncoder = Callable[[str], str]
PathDecoder = Callable[[str], str]


def field(data: Any, name: str, kind: type | tuple[type, ...]) -> Any:
    """`data[name]`, checked to be of `kind` (bool is never accepted as int)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"expected a map holding {name!r}, got {type(data).__name__}")
    if name not in data:
        raise ValueError(f"missing field {name!r}")
    value = data[name]
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise ValueError(f"field {name!r} must be {kind}, got bool")
    if not isinstance(value, kind):
        raise ValueError(f"field {name!r} has type {type(value).__name__}")
    return value


def non_negative_ints(values: Any, name: str) -> tuple[int, ...]:
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"field {name!r} must be a list of integers")
    if any(v < 0 for v in values):
        raise ValueError(f"field {name!r} holds a negative offset")
    return tuple(values)


class HandleCodec:
    """Encodes handles for one `_metadata` file; `binary` False stores bytes as base64 (format V1)."""

    def __init__(self, encode_path: PathEncoder, decode_path: PathDecoder, binary: bool = True) -> None:
        self._encode_path = encode_path
        self._decode_path = decode_path
        self._binary = binary

    # -- encoding ---------------------------------------------------------------------------------------------
    def stream(self, handle: StreamStateHandle) -> dict[str, Any]:
        if isinstance(handle, ByteStreamStateHandle):
            data: Any = handle.data if self._binary else base64.b64encode(handle.data).decode("ascii")
            return {"type": "bytes", "name": handle.handle_name, "data": data}
        return {"type": "file", "path": self._encode_path(handle.path), "size": handle.size}

    def keyed(self, handle: KeyedStateHandle) -> dict[str, Any]:
        if isinstance(handle, IncrementalKeyedStateHandle):
            return {
                "type": "incremental-key-groups",
                "backend_id": handle.backend_id,
                "start": handle.key_group_range.start,
                "end": handle.key_group_range.end,
                "checkpoint_id": handle.checkpoint_id,
                "shared": {name: self.stream(h) for name, h in sorted(handle.shared_state.items())},
                "private": {name: self.stream(h) for name, h in sorted(handle.private_state.items())},
                "meta": self.stream(handle.meta_state),
                "format": handle.snapshot_format,
            }
        return {
            "type": "key-groups",
            "start": handle.key_group_range.start,
            "end": handle.key_group_range.end,
            "offsets": list(handle.offsets),
            "format": handle.snapshot_format,
            "stream": self.stream(handle.delegate),
        }

    def operator(self, handle: OperatorStateHandle) -> dict[str, Any]:
        return {
            "type": "operator",
            "states": {
                name: {"mode": p.mode.value, "offsets": list(p.offsets)} for name, p in sorted(handle.states.items())
            },
            "format": handle.snapshot_format,
            "stream": self.stream(handle.delegate),
        }

    # -- decoding ---------------------------------------------------------------------------------------------
    def decode_stream(self, data: Any) -> StreamStateHandle:
        kind = field(data, "type", str)
        if kind == "bytes":
            raw = field(data, "data", bytes if self._binary else str)
            payload = raw if self._binary else base64.b64decode(raw, validate=True)
            return ByteStreamStateHandle(field(data, "name", str), bytes(payload))
        if kind == "file":
            size = field(data, "size", int)
            if size < 0:
                raise ValueError("negative file size")
            return FileStateHandle(self._decode_path(field(data, "path", str)), size)
        raise ValueError(f"unknown stream handle type {kind!r}")

    def decode_keyed(self, data: Any) -> KeyedStateHandle:
        kind = field(data, "type", str)
        if kind not in ("key-groups", "incremental-key-groups"):
            raise ValueError(f"unknown keyed state handle type {kind!r}")
        start, end = field(data, "start", int), field(data, "end", int)
        if start < 0 or end < start:
            raise ValueError(f"invalid key-group range [{start}, {end}]")
        if kind == "incremental-key-groups":
            return IncrementalKeyedStateHandle(
                field(data, "backend_id", str),
                KeyGroupRange(start, end),
                field(data, "checkpoint_id", int),
                self._streams(field(data, "shared", dict)),
                self._streams(field(data, "private", dict)),
                self.decode_stream(field(data, "meta", dict)),
                field(data, "format", str),
            )
        offsets = non_negative_ints(field(data, "offsets", list), "offsets")
        return KeyGroupsStateHandle(
            KeyGroupRange(start, end),
            offsets,
            self.decode_stream(field(data, "stream", dict)),
            field(data, "format", str),
        )

    def _streams(self, data: dict[Any, Any]) -> dict[str, StreamStateHandle]:
        if not all(isinstance(name, str) and "/" not in name for name in data):
            raise ValueError("state file names must be plain strings")
        return {name: self.decode_stream(h) for name, h in data.items()}

    def decode_operator(self, data: Any) -> OperatorStateHandle:
        kind = field(data, "type", str)
        if kind != "operator":
            raise ValueError(f"unknown operator state handle type {kind!r}")
        states = {}
        for name, part in field(data, "states", dict).items():
            if not isinstance(name, str):
                raise ValueError("operator state names must be strings")
            mode = OperatorStateMode(field(part, "mode", str))
            states[name] = OperatorStatePartitions(mode, non_negative_ints(field(part, "offsets", list), "offsets"))
        return OperatorStateHandle(states, self.decode_stream(field(data, "stream", dict)), field(data, "format", str))
