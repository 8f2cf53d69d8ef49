"""State handles <-> plain data (dicts, lists, ints, str, bytes), shared by the `_metadata` versions.

Decoding treats the data as untrusted: every field is type-checked and a file path may not leave the restore
root (FMT-8, FMT-10). Numbers are bounded: sizes and offsets fit a 63-bit file position, offsets lie inside
their stream and ascend, names are plain file names. Problems raise ValueError (or UnsafePathError), which the
codec turns into one CheckpointFormatError naming the file. Format version 3 records each file's CRC-32C (FMT-12).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

from statecert.spec.handles import (
    CANONICAL_FORMAT,
    ByteStreamStateHandle,
    ChangelogSegmentHandle,
    ChangelogStateBackendHandle,
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


MAX_POSITION = 2**63 - 1  # the largest file size or offset a reader seeks to
MAX_CHECKSUM = 2**32 - 1
MAX_SEQUENCE = 2**63 - 1  # changelog sequence numbers


def bounded_int(data: Any, name: str, low: int = 0, high: int = MAX_POSITION) -> int:
    """`data[name]`, an int within `low..high`."""
    value = field(data, name, int)
    if not low <= value <= high:
        raise ValueError(f"field {name!r} = {value} is outside {low}..{high}")
    return int(value)


def offsets_within(values: Any, name: str, size: int, strict: bool) -> tuple[int, ...]:
    """A list of stream positions inside a stream of `size` bytes, ascending (`strict`: each one past the last, as
    in the canonical format where every key group's block has a length field), else never descending."""
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"field {name!r} must be a list of integers")
    previous = -1
    for v in values:
        if not 0 <= v < size + (0 if strict else 1):
            raise ValueError(f"field {name!r}: offset {v} lies outside the stream of {size} bytes")
        if v < previous or (strict and v == previous):
            raise ValueError(f"field {name!r}: offsets must ascend, {v} follows {previous}")
        previous = v
    return tuple(values)


def plain_file_name(name: Any) -> str:
    """A state file name as RocksDB handles record it: a non-empty plain name, never a path (FMT-10)."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or any(c in name for c in "/\\\x00")
        or len(name.encode("utf-8", "surrogatepass")) > 255
    ):
        raise ValueError(f"state file name {name!r} is not a plain file name")
    return name


class HandleCodec:
    """Encodes handles for one `_metadata` file of format `version`: V1 stores bytes as base64, V3 adds checksums."""

    def __init__(self, encode_path: PathEncoder, decode_path: PathDecoder, version: int) -> None:
        self._encode_path = encode_path
        self._decode_path = decode_path
        self._binary = version != 1
        self._checksums = version >= 3
        self._changelog = version >= 4

    # -- encoding ---------------------------------------------------------------------------------------------
    def stream(self, handle: StreamStateHandle) -> dict[str, Any]:
        if isinstance(handle, ByteStreamStateHandle):
            data: Any = handle.data if self._binary else base64.b64encode(handle.data).decode("ascii")
            return {"type": "bytes", "name": handle.handle_name, "data": data}
        plain: dict[str, Any] = {"type": "file", "path": self._encode_path(handle.path), "size": handle.size}
        if self._checksums and handle.checksum is not None:
            plain["crc32c"] = handle.checksum
        return plain

    def keyed(self, handle: KeyedStateHandle) -> dict[str, Any]:
        if isinstance(handle, ChangelogStateBackendHandle):
            if not self._changelog:
                raise ValueError("changelog handles need _metadata format version 4")
            return {
                "type": "changelog",
                "start": handle.key_group_range.start,
                "end": handle.key_group_range.end,
                "materialization_id": handle.materialization_id,
                "materialized_sequence": handle.materialized_sequence,
                "materialized": [self.keyed(h) for h in handle.materialized],
                "changelog": [
                    {"from": s.from_sequence, "to": s.to_sequence, "stream": self.stream(s.delegate)}
                    for s in handle.changelog
                ],
            }
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
        allowed = {"bytes": {"type", "name", "data"}, "file": {"type", "path", "size"}}.get(kind, set())
        if kind == "file" and self._checksums:
            allowed.add("crc32c")
        unknown = set(data) - allowed
        if allowed and unknown:  # e.g. a checksum in a format version without checksums: a flipped version field
            raise ValueError(
                f"{kind} handle has fields this format version does not define: {sorted(map(str, unknown))}"
            )
        if kind == "bytes":
            raw = field(data, "data", bytes if self._binary else str)
            try:
                payload = raw if self._binary else base64.b64decode(raw, validate=True)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"inline state is not valid base64: {exc}") from None
            return ByteStreamStateHandle(field(data, "name", str), bytes(payload))
        if kind == "file":
            size = bounded_int(data, "size")
            checksum = None
            if self._checksums and "crc32c" in data:
                checksum = bounded_int(data, "crc32c", 0, MAX_CHECKSUM)
            return FileStateHandle(self._decode_path(field(data, "path", str)), size, checksum)
        raise ValueError(f"unknown stream handle type {kind!r}")

    def decode_keyed(self, data: Any, max_parallelism: int) -> KeyedStateHandle:
        kind = field(data, "type", str)
        known = (
            ("key-groups", "incremental-key-groups", "changelog")
            if self._changelog
            else (
                "key-groups",
                "incremental-key-groups",
            )
        )
        if kind not in known:
            raise ValueError(f"unknown keyed state handle type {kind!r}")
        start, end = bounded_int(data, "start"), bounded_int(data, "end")
        if not start <= end < max_parallelism:
            raise ValueError(f"key-group range [{start}, {end}] is not within [0, {max_parallelism - 1}]")
        if kind == "changelog":
            return self._decode_changelog(data, KeyGroupRange(start, end), max_parallelism)
        if kind == "incremental-key-groups":
            return IncrementalKeyedStateHandle(
                field(data, "backend_id", str),
                KeyGroupRange(start, end),
                bounded_int(data, "checkpoint_id"),
                self._streams(field(data, "shared", dict)),
                self._streams(field(data, "private", dict)),
                self.decode_stream(field(data, "meta", dict)),
                field(data, "format", str),
            )
        stream = self.decode_stream(field(data, "stream", dict))
        snapshot_format = field(data, "format", str)
        strict = snapshot_format == CANONICAL_FORMAT
        offsets = offsets_within(field(data, "offsets", list), "offsets", stream.size, strict)
        if len(offsets) != end - start + 1:
            raise ValueError(f"{len(offsets)} offsets for the {end - start + 1} key groups of [{start}, {end}]")
        return KeyGroupsStateHandle(KeyGroupRange(start, end), offsets, stream, snapshot_format)

    def _decode_changelog(self, data: Any, key_groups: KeyGroupRange, max_parallelism: int) -> KeyedStateHandle:
        """A changelog handle (CL-2): materialized handles of the wrapped backend inside its range, segments with
        ascending, non-empty sequence ranges after the materialization."""
        materialized_sequence = bounded_int(data, "materialized_sequence", 0, MAX_SEQUENCE)
        parts = []
        for plain in field(data, "materialized", list):
            part = self.decode_keyed(plain, max_parallelism)
            if isinstance(part, ChangelogStateBackendHandle):
                raise ValueError("a changelog handle's materialized state cannot itself be a changelog handle")
            if part.key_group_range.intersection(key_groups) != part.key_group_range:
                raise ValueError(f"a materialized handle's key groups {part.key_group_range} lie outside {key_groups}")
            parts.append(part)
        segments = []
        for plain in field(data, "changelog", list):
            after, up_to = bounded_int(plain, "from", 0, MAX_SEQUENCE), bounded_int(plain, "to", 0, MAX_SEQUENCE)
            if not after < up_to or up_to <= materialized_sequence:
                raise ValueError(f"changelog segment ({after}, {up_to}] is empty or before the materialization")
            segments.append(ChangelogSegmentHandle(self.decode_stream(field(plain, "stream", dict)), after, up_to))
        unknown = set(data) - {
            "type",
            "start",
            "end",
            "materialization_id",
            "materialized_sequence",
            "materialized",
            "changelog",
        }
        if unknown:
            raise ValueError(f"changelog handle has unknown fields {sorted(map(str, unknown))}")
        return ChangelogStateBackendHandle(
            key_groups, bounded_int(data, "materialization_id"), materialized_sequence, tuple(parts), tuple(segments)
        )

    def _streams(self, data: dict[Any, Any]) -> dict[str, StreamStateHandle]:
        return {plain_file_name(name): self.decode_stream(h) for name, h in data.items()}

    def decode_operator(self, data: Any) -> OperatorStateHandle:
        kind = field(data, "type", str)
        if kind != "operator":
            raise ValueError(f"unknown operator state handle type {kind!r}")
        stream = self.decode_stream(field(data, "stream", dict))
        states = {}
        for name, part in field(data, "states", dict).items():
            if not isinstance(name, str):
                raise ValueError("operator state names must be strings")
            mode = OperatorStateMode(field(part, "mode", str))
            states[name] = OperatorStatePartitions(
                mode, offsets_within(field(part, "offsets", list), "offsets", stream.size, False)
            )
        return OperatorStateHandle(states, stream, field(data, "format", str))
