"""The default serializers of the interchange chapter (IF-1) that the spec-only backend needs, written from the
chapter alone: `msgpack` for every role a descriptor leaves out (SER-9), `void-namespace` for non-windowed state,
and `long` and `bool` for timer state (IF-8). It imports nothing from `statecert.reference`."""

from __future__ import annotations

import re
import struct
from typing import Any

import mmh3
import msgpack

from statecert.spec.serializers import SchemaCompatibility, SerializerSnapshot
from statecert.spec.state import VOID_NAMESPACE

_LONG = struct.Struct(">q")


class _PlainSerializer:
    """Shared: snapshot, compatibility (same id and version: as is), murmur3 key hash of the bytes (IF-1)."""

    serializer_id = ""

    def serialize(self, value: Any) -> bytes:
        raise NotImplementedError

    def deserialize(self, data: bytes) -> Any:
        raise NotImplementedError

    def key_hash(self, value: Any) -> int:
        return int(mmh3.hash(self.serialize(value), 0, signed=True))

    def snapshot_configuration(self) -> SerializerSnapshot:
        return SerializerSnapshot(self.serializer_id, 1, {})

    def resolve_compatibility(self, old: SerializerSnapshot) -> SchemaCompatibility[Any]:
        if (old.serializer_id, old.version) == (self.serializer_id, 1):
            return SchemaCompatibility.as_is()
        return SchemaCompatibility.incompatible(f"written by {old.serializer_id!r} v{old.version}")


def _plain_or_refused(value: Any) -> Any:
    """SER-10: a subclass of a plain type goes as that type; anything else (a tuple above all) is a TypeError."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, int):
        return int(value)
    raise TypeError(f"msgpack default: {type(value).__name__} is not plain data (SER-10)")


# msgpack's markers of ext 8/16/32 and fixext 1-16, and its headers of a timestamp (ext type -1) of 32, 64 and 96 bits,
# which it decodes itself, past `ext_hook`
_EXTENSION_MARKERS = re.compile(rb"[\xc7-\xc9\xd4-\xd8]")
_TIMESTAMP_HEADERS = (b"\xd6\xff", b"\xd7\xff", b"\xc7\x0c\xff")


def _holds_extension(value: Any) -> bool:
    """Whether `value` is or holds, at any depth, a msgpack `ExtType` or `Timestamp`: msgpack packs both itself,
    past `default`, and reads a timestamp without its `ext_hook`, but IF-1's plain data holds neither. A stack of its
    own, not recursion: msgpack writes plain data 511 containers deep, past Python's recursion limit."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, msgpack.ExtType | msgpack.Timestamp):
            return True
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
    return False


def _refuse_extension(code: int, data: bytes) -> Any:
    raise ValueError(f"an extension type ({code}), which plain data never holds")


class MsgpackSerializer(_PlainSerializer):
    serializer_id = "msgpack"

    def serialize(self, value: Any) -> bytes:
        data = bytes(msgpack.packb(value, use_bin_type=True, strict_types=True, default=_plain_or_refused))
        if _EXTENSION_MARKERS.search(data) and _holds_extension(value):  # only such bytes can hold one: walk rarely
            raise TypeError("msgpack default: a msgpack extension type is not plain data (SER-10)")
        return data

    def deserialize(self, data: bytes) -> Any:
        """Plain data, or ValueError for bytes that are not a msgpack value of plain data (IF-1)."""
        try:
            value = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_refuse_extension)
        except (TypeError, ValueError, RecursionError, msgpack.UnpackException) as exc:
            raise ValueError(f"msgpack default: not a msgpack value: {exc!r}") from None
        if any(header in data for header in _TIMESTAMP_HEADERS) and _holds_extension(value):
            raise ValueError("msgpack default: not a msgpack value: a timestamp, which plain data never holds")
        return value


class VoidNamespaceSerializer(_PlainSerializer):
    serializer_id = "void-namespace"

    def serialize(self, value: Any) -> bytes:
        return b""

    def deserialize(self, data: bytes) -> Any:
        if data:
            raise ValueError(f"the void namespace is no bytes, got {len(data)} (FMT-15)")
        return VOID_NAMESPACE


class LongSerializer(_PlainSerializer):
    """8-byte two's-complement big-endian; key hash Java's `Long.hashCode` (IF-1)."""

    serializer_id = "long"

    def serialize(self, value: Any) -> bytes:
        return _LONG.pack(value)

    def deserialize(self, data: bytes) -> Any:
        return _LONG.unpack(bytes(data))[0]

    def key_hash(self, value: Any) -> int:
        v = int(value) & 0xFFFFFFFFFFFFFFFF
        h = (v ^ (v >> 32)) & 0xFFFFFFFF
        return h - (1 << 32) if h >= 1 << 31 else h


class BoolSerializer(_PlainSerializer):
    """One byte, `00` or `01` (IF-1)."""

    serializer_id = "bool"

    def serialize(self, value: Any) -> bytes:
        return b"\x01" if value else b"\x00"

    def deserialize(self, data: bytes) -> Any:
        if bytes(data) not in (b"\x00", b"\x01"):
            raise ValueError(f"not a bool's byte: {bytes(data)!r} (FMT-15)")
        return bytes(data) == b"\x01"


DEFAULT = MsgpackSerializer()
VOID = VoidNamespaceSerializer()
LONG = LongSerializer()
BOOL = BoolSerializer()
