"""The operator state stream: `b"SCOP" | >H version | >I header length | msgpack header | elements`, each
element `>I length | bytes`; the handle holds one offset per element (OS-4)."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import IO, Any

import msgpack

from statecert.reference.format.canonical import describe
from statecert.reference.format.handle_codec import field
from statecert.reference.serializers import TupleSerializer
from statecert.spec.errors import CheckpointFormatError
from statecert.spec.handles import OperatorStateHandle, OperatorStateMode, OperatorStatePartitions
from statecert.spec.serializers import SerializerSnapshot
from statecert.spec.storage import CheckpointStateOutputStream

MAGIC = b"SCOP"
VERSION = 1
_PREFIX = struct.Struct(">4sHI")
_LEN = struct.Struct(">I")


def write_operator_states(
    stream: CheckpointStateOutputStream,
    states: Mapping[str, tuple[OperatorStateMode, SerializerSnapshot, Sequence[bytes]]],
) -> dict[str, OperatorStatePartitions]:
    header = {name: {"mode": mode.value, "serializer": snap.to_plain()} for name, (mode, snap, _) in states.items()}
    head = msgpack.packb(header, use_bin_type=True)
    stream.write(_PREFIX.pack(MAGIC, VERSION, len(head)) + head)
    partitions = {}
    for name, (mode, _, elements) in sorted(states.items()):
        offsets = []
        for element in elements:
            offsets.append(stream.tell())
            stream.write(_LEN.pack(len(element)) + element)
        partitions[name] = OperatorStatePartitions(mode, tuple(offsets))
    return partitions


MAX_HEADER = 1 << 26
READ_ERRORS = (OSError, ValueError, OverflowError)


def _header(f: IO[bytes], name: str) -> dict[str, tuple[OperatorStateMode, SerializerSnapshot]]:
    prefix = f.read(_PREFIX.size)
    if len(prefix) != _PREFIX.size:
        raise CheckpointFormatError(name, "truncated operator state header")
    magic, version, length = _PREFIX.unpack(prefix)
    if magic != MAGIC or version != VERSION:
        raise CheckpointFormatError(name, f"not an operator state stream (magic {magic!r}, version {version})")
    if length > MAX_HEADER:
        raise CheckpointFormatError(name, f"implausible operator state header length {length}")
    raw = f.read(length)
    if len(raw) != length:
        raise CheckpointFormatError(name, f"truncated operator state header: {len(raw)} of {length} bytes")
    try:
        header: Any = msgpack.unpackb(raw, raw=False, strict_map_key=True)
        if not isinstance(header, dict):
            raise ValueError("the header is not a map")
        return {
            str(state): (
                OperatorStateMode(field(info, "mode", str)),
                SerializerSnapshot.from_plain(field(info, "serializer", dict)),
            )
            for state, info in header.items()
        }
    except (ValueError, TypeError, AttributeError, RecursionError, msgpack.UnpackException) as exc:
        raise CheckpointFormatError(name, f"malformed operator state header: {exc!r}") from None


def _check_entry_serializer(name: str, state: str, serializer: SerializerSnapshot) -> None:
    """IF-6: a broadcast state's entries are under the `tuple` serializer snapshot of version 1 with two fields."""
    fields = serializer.config.get("fields")
    if (
        serializer.serializer_id != TupleSerializer.serializer_id
        or serializer.version != 1
        or not isinstance(fields, list)
        or len(fields) != 2
        or not all(isinstance(f, dict) for f in fields)
    ):
        raise CheckpointFormatError(
            name,
            f"broadcast state {state!r} is not under the tuple serializer snapshot of version 1 with two fields "
            f"(found {serializer.serializer_id!r} version {serializer.version})",
        )


def read_operator_states(
    handle: OperatorStateHandle,
) -> dict[str, tuple[OperatorStateMode, SerializerSnapshot, list[bytes]]]:
    """The elements this handle selects, per state, with the serializer snapshot that wrote them; the stream's
    header must describe every selected state in the handle's mode (FMT-8)."""
    name = describe(handle.delegate)
    f: IO[bytes] = handle.delegate.open()
    try:
        header = _header(f, name)
        result = {}
        for state, partitions in handle.states.items():
            if state not in header:
                raise CheckpointFormatError(name, f"operator state {state!r} is not in the stream header")
            mode, serializer = header[state]
            if mode is not partitions.mode:
                raise CheckpointFormatError(
                    name, f"operator state {state!r}: the handle says {partitions.mode.value}, the stream {mode.value}"
                )
            if mode is OperatorStateMode.BROADCAST:
                _check_entry_serializer(name, state, serializer)
            elements = []
            for offset in partitions.offsets:
                f.seek(offset)
                raw = f.read(_LEN.size)
                size = _LEN.unpack(raw)[0] if len(raw) == _LEN.size else -1
                data = f.read(size) if size >= 0 else b""
                if size < 0 or len(data) != size:
                    raise CheckpointFormatError(name, f"truncated element of operator state {state!r} at {offset}")
                elements.append(data)
            result[state] = (partitions.mode, serializer, elements)
        return result
    except READ_ERRORS as exc:
        if isinstance(exc, CheckpointFormatError):
            raise
        raise CheckpointFormatError(name, f"cannot read the operator state stream: {exc}") from None
    finally:
        f.close()
