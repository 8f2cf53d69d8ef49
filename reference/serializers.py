"""Built-in serializers. None of them unpickles: bytes from a savepoint can only become plain data (SER-8).

Each serializer is registered by id in the spec's registry (`statecert.spec.serializer_registry`) so that a
snapshot in a checkpoint can be turned back into the serializer that wrote it (the "restore serializer", SER-4).
Third parties register theirs through the entry-point group `statecert.serializers` or `register_serializer`.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import mmh3
import msgpack

from statecert.spec.serializer_registry import register_serializer as register_serializer
from statecert.spec.serializer_registry import restore_serializer as restore_serializer
from statecert.spec.serializers import Compatibility, SchemaCompatibility, SerializerSnapshot, TypeSerializer
from statecert.spec.state import VOID_NAMESPACE, VoidNamespace

T = TypeVar("T")


def _to_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


_BIN8 = [bytes((0xC4, n)) for n in range(256)]
_U16, _U32 = struct.Struct(">H"), struct.Struct(">I")


def _bin_header(size: int) -> bytes:
    """msgpack's header of a bin of `size` bytes (bin 8, 16 or 32)."""
    if size < 256:
        return _BIN8[size]
    return b"\xc5" + _U16.pack(size) if size < 1 << 16 else b"\xc6" + _U32.pack(size)


def _map_header(entries: int) -> bytes:
    """msgpack's header of a map of `entries` entries (fixmap, map 16 or map 32)."""
    if entries < 16:
        return bytes((0x80 | entries,))
    return b"\xde" + _U16.pack(entries) if entries < 1 << 16 else b"\xdf" + _U32.pack(entries)


# msgpack's timestamp extension (type -1) in its three sizes: the unpacker decodes it without asking `ext_hook`
_TIMESTAMP_HEADERS = (b"\xd6\xff", b"\xd7\xff", b"\xc7\x0c\xff")
_EXTENSION_MARKERS = re.compile(rb"[\xc7-\xc9\xd4-\xd8]")  # ext 8/16/32 and fixext 1-16


def _refuse_extension(code: int, data: bytes) -> Any:
    raise ValueError(f"an extension type ({code}), which plain data never holds")


def _holds_extension(value: Any) -> bool:
    """Whether `value` is or holds (at any depth of its lists and maps) a msgpack `ExtType` or `Timestamp`. Walked
    with a stack of its own: msgpack writes plain data 511 containers deep, past Python's recursion limit."""
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


def unpack_plain(data: bytes, who: str) -> Any:
    """msgpack bytes to plain data; malformed input, extension types included, raises ValueError, as every default
    serializer does (IF-1)."""
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_refuse_extension)
    except (TypeError, ValueError, RecursionError, msgpack.UnpackException) as exc:
        raise ValueError(f"{who}: not a msgpack value: {exc!r}") from None
    if any(header in data for header in _TIMESTAMP_HEADERS) and _holds_extension(value):
        raise ValueError(f"{who}: not a msgpack value: a timestamp extension, which plain data never holds")
    return value


class BaseSerializer:
    """Shared behaviour: key hash = murmur3-32 of the serialized bytes; same id and version = as is."""

    serializer_id: ClassVar[str]
    version: ClassVar[int] = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "serializer_id" in cls.__dict__:
            register_serializer(cls.serializer_id, cls.from_snapshot)

    def serialize(self, value: Any) -> bytes:
        raise NotImplementedError

    def deserialize(self, data: bytes) -> Any:
        raise NotImplementedError

    def key_hash(self, value: Any) -> int:
        return int(mmh3.hash(self.serialize(value), 0, signed=True))

    def config(self) -> dict[str, Any]:
        return {}

    def snapshot_configuration(self) -> SerializerSnapshot:
        return SerializerSnapshot(self.serializer_id, self.version, self.config())

    @classmethod
    def from_snapshot(cls, snapshot: SerializerSnapshot) -> TypeSerializer[Any]:
        return cls()

    def resolve_compatibility(self, old: SerializerSnapshot) -> SchemaCompatibility[Any]:
        if old.serializer_id != self.serializer_id:
            return SchemaCompatibility.incompatible(
                f"state was written by serializer {old.serializer_id!r}, the new one is {self.serializer_id!r}"
            )
        if old.version != self.version:
            return SchemaCompatibility.after_migration(f"{self.serializer_id} v{old.version} -> v{self.version}")
        return SchemaCompatibility.as_is()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.snapshot_configuration() == self.snapshot_configuration()

    def __hash__(self) -> int:
        return hash((self.serializer_id, repr(self.config())))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config() or ''})"


class StringSerializer(BaseSerializer):
    """UTF-8 text. Its key hash is Java's `String.hashCode`, so string keys land in Flink's key groups (KG-1)."""

    serializer_id = "str"

    def serialize(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise TypeError(f"StringSerializer expects str, got {type(value).__name__}")
        return value.encode("utf-8", "surrogatepass")

    def deserialize(self, data: bytes) -> str:
        return bytes(data).decode("utf-8", "surrogatepass")

    def key_hash(self, value: str) -> int:
        h = 0
        units = value.encode("utf-16-be", "surrogatepass")
        for (unit,) in struct.iter_unpack(">H", units):
            h = (31 * h + unit) & 0xFFFFFFFF
        return _to_int32(h)


class LongSerializer(BaseSerializer):
    """Signed 64-bit integers, big-endian. Key hash is Java's `Long.hashCode` (KG-1)."""

    serializer_id = "long"
    _STRUCT = struct.Struct(">q")

    def serialize(self, value: int) -> bytes:
        if type(value) is not int and (not isinstance(value, int) or isinstance(value, bool)):
            raise TypeError(f"LongSerializer expects int, got {type(value).__name__}")
        try:
            return self._STRUCT.pack(value)
        except struct.error:
            raise ValueError(f"LongSerializer: {value} does not fit in 64 bits") from None

    def deserialize(self, data: bytes) -> int:
        try:
            (value,) = self._STRUCT.unpack(data)
        except struct.error:
            raise ValueError(f"LongSerializer: {len(data)} bytes, expected {self._STRUCT.size}") from None
        return int(value)

    def key_hash(self, value: int) -> int:
        unsigned = value & 0xFFFFFFFFFFFFFFFF
        return _to_int32(unsigned ^ (unsigned >> 32))


class _JavaFixedWidthInt(BaseSerializer):
    """A signed integer of `_STRUCT`'s width, big-endian, whose key hash is the Java wrapper's `hashCode` (the value
    itself, sign-extended), so keys land in the key groups Flink gives `Types.INT` / `SHORT` / `BYTE` keys (KG-1)."""

    _STRUCT: ClassVar[struct.Struct]
    _JAVA: ClassVar[str]

    def serialize(self, value: int) -> bytes:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{type(self).__name__} expects int, got {type(value).__name__}")
        try:
            return self._STRUCT.pack(value)
        except struct.error:
            raise ValueError(f"{type(self).__name__}: {value} does not fit in a Java {self._JAVA}") from None

    def deserialize(self, data: bytes) -> int:
        if len(data) != self._STRUCT.size:
            raise ValueError(f"{type(self).__name__}: {len(data)} bytes, expected {self._STRUCT.size}")
        return int(self._STRUCT.unpack(data)[0])

    def key_hash(self, value: int) -> int:
        self.serialize(value)  # the same range check
        return value


class IntSerializer(_JavaFixedWidthInt):
    """Java `Integer`: 4 bytes; key hash `Integer.hashCode` (the value), as Flink's `IntSerializer` keys."""

    serializer_id = "int"
    _STRUCT = struct.Struct(">i")
    _JAVA = "int"


class ShortSerializer(_JavaFixedWidthInt):
    """Java `Short`: 2 bytes; key hash `Short.hashCode` (the value)."""

    serializer_id = "short"
    _STRUCT = struct.Struct(">h")
    _JAVA = "short"


class ByteSerializer(_JavaFixedWidthInt):
    """Java `Byte`: 1 byte; key hash `Byte.hashCode` (the value)."""

    serializer_id = "byte"
    _STRUCT = struct.Struct(">b")
    _JAVA = "byte"


class DoubleSerializer(BaseSerializer):
    """IEEE-754 binary64, big-endian; every NaN written as the one Java's `doubleToLongBits` gives (IF-1), as Flink's
    `DoubleSerializer` writes it: a NaN computed (`inf - inf`, sign bit set on x86) and `float("nan")` are one key."""

    serializer_id = "double"
    _STRUCT = struct.Struct(">d")
    _NAN = bytes.fromhex("7ff8000000000000")

    def serialize(self, value: float) -> bytes:
        return self._NAN if value != value else self._STRUCT.pack(value)

    def deserialize(self, data: bytes) -> float:
        if len(data) != self._STRUCT.size:
            raise ValueError(f"DoubleSerializer: {len(data)} bytes, expected {self._STRUCT.size}")
        return float(self._STRUCT.unpack(data)[0])


class BooleanSerializer(BaseSerializer):
    serializer_id = "bool"

    def serialize(self, value: bool) -> bytes:
        return b"\x01" if value else b"\x00"

    def deserialize(self, data: bytes) -> bool:
        if data not in (b"\x00", b"\x01"):
            raise ValueError(f"BooleanSerializer: invalid byte {data!r}")
        return data == b"\x01"


class JavaDoubleSerializer(DoubleSerializer):
    """`double` encoding, with Java's `Double.hashCode` as key hash (`doubleToLongBits`, NaN canonical, then
    `(int)(bits ^ (bits >>> 32))`): keys land where Flink puts `Types.DOUBLE` keys. A separate id, so that savepoints
    keyed with `double` (murmur3 hash) keep their key groups."""

    serializer_id = "java-double"

    def key_hash(self, value: float) -> int:
        bits = 0x7FF8000000000000 if value != value else struct.unpack(">Q", struct.pack(">d", value))[0]
        return _to_int32(bits ^ (bits >> 32))


class JavaBooleanSerializer(BooleanSerializer):
    """`bool` encoding, with Java's `Boolean.hashCode` as key hash (1231 for true, 1237 for false)."""

    serializer_id = "java-bool"

    def key_hash(self, value: bool) -> int:
        return 1231 if value else 1237


class BytesSerializer(BaseSerializer):
    serializer_id = "bytes"

    def serialize(self, value: bytes) -> bytes:
        return bytes(value)

    def deserialize(self, data: bytes) -> bytes:
        return bytes(data)


class VoidNamespaceSerializer(BaseSerializer):
    """The void namespace as zero bytes (KS-NS-1)."""

    serializer_id = "void-namespace"

    def serialize(self, value: VoidNamespace) -> bytes:
        if value is not VOID_NAMESPACE:
            raise TypeError(f"VoidNamespaceSerializer expects VOID_NAMESPACE, got {value!r}")
        return b""

    def deserialize(self, data: bytes) -> VoidNamespace:
        if data:
            raise ValueError(f"VoidNamespaceSerializer: the void namespace is zero bytes, got {len(data)}")
        return VOID_NAMESPACE


_PLAIN_TYPES: tuple[type[Any], ...] = (bool, int, float, str, bytes, list, dict)
_SCALAR_TYPES = frozenset((type(None), bool, int, float, str, bytes))  # never hold an extension type


def _as_plain(value: Any) -> Any:
    """A subclass of a plain type as that type, which it reads back equal to; anything else is refused (SER-10).

    msgpack would write a tuple as a list: it would read back as a list, unequal to the tuple, and a map keyed by
    tuples not at all (a list is no map key), so the checkpoint holding it would not restore.
    """
    for plain in _PLAIN_TYPES:
        if isinstance(value, plain):
            return plain(value)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    hint = " (it would read back as a list; give the state a `tuple` serializer)" if isinstance(value, tuple) else ""
    raise TypeError(f"MsgpackSerializer: {type(value).__name__} is not plain data{hint}")


class MsgpackSerializer(BaseSerializer):
    """Plain data (None, bool, int, float, str, bytes, lists, dicts) as msgpack: safe for untrusted bytes.

    Anything else, a tuple included, is refused with `TypeError` (SER-10) rather than written as something that reads
    back as another value.
    """

    serializer_id = "msgpack"

    def serialize(self, value: Any) -> bytes:
        data: bytes = msgpack.packb(value, use_bin_type=True, strict_types=True, default=_as_plain)
        # msgpack packs ExtType and Timestamp itself, past `default`; only bytes with an extension marker hold one
        if type(value) not in _SCALAR_TYPES and _EXTENSION_MARKERS.search(data) and _holds_extension(value):
            raise TypeError("MsgpackSerializer: a msgpack extension type is not plain data")
        return data

    def deserialize(self, data: bytes) -> Any:
        return unpack_plain(data, "MsgpackSerializer")


class TupleSerializer(BaseSerializer):
    """Fixed-arity tuples of nested serializers; compatibility is the weakest of the fields' (SER-3)."""

    serializer_id = "tuple"

    def __init__(self, *fields: TypeSerializer[Any]) -> None:
        self.fields = tuple(fields)

    def serialize(self, value: Sequence[Any]) -> bytes:
        if len(value) != len(self.fields):
            raise ValueError(f"TupleSerializer: expected {len(self.fields)} fields, got {len(value)}")
        return msgpack.packb([f.serialize(v) for f, v in zip(self.fields, value, strict=False)], use_bin_type=True)

    def deserialize(self, data: bytes) -> tuple[Any, ...]:
        parts = unpack_plain(data, "TupleSerializer")
        if (
            not isinstance(parts, list)
            or len(parts) != len(self.fields)
            or not all(isinstance(p, bytes) for p in parts)
        ):
            raise ValueError(f"TupleSerializer: expected {len(self.fields)} fields of bytes")
        return tuple(f.deserialize(p) for f, p in zip(self.fields, parts, strict=False))

    def config(self) -> dict[str, Any]:
        return {"fields": [f.snapshot_configuration().to_plain() for f in self.fields]}

    @classmethod
    def from_snapshot(cls, snapshot: SerializerSnapshot) -> TypeSerializer[Any]:
        return cls(*(restore_serializer(SerializerSnapshot.from_plain(f)) for f in snapshot.config["fields"]))

    def resolve_compatibility(self, old: SerializerSnapshot) -> SchemaCompatibility[Any]:
        base = super().resolve_compatibility(old)
        if base.kind is Compatibility.INCOMPATIBLE:
            return base
        old_fields = [SerializerSnapshot.from_plain(f) for f in old.config.get("fields", [])]
        if len(old_fields) != len(self.fields):
            return SchemaCompatibility.incompatible(f"tuple arity changed {len(old_fields)} -> {len(self.fields)}")
        results = [f.resolve_compatibility(o) for f, o in zip(self.fields, old_fields, strict=False)]
        return combine_compatibility(results, lambda fs: TupleSerializer(*fs), self.fields)


class EnumSerializer(BaseSerializer):
    """Names from a fixed list, written as ordinals. New names appended or reordered: the old ordinals are kept by
    a reconfigured serializer (SER-3, like Flink's EnumSerializer); a removed name is incompatible."""

    serializer_id = "enum"

    def __init__(self, values: Sequence[str]) -> None:
        self.values = tuple(values)
        if len(set(self.values)) != len(self.values):
            raise ValueError("EnumSerializer: duplicate names")
        self._ordinal = {v: i for i, v in enumerate(self.values)}

    def serialize(self, value: str) -> bytes:
        try:
            return struct.pack(">i", self._ordinal[value])
        except KeyError:
            raise ValueError(f"EnumSerializer: {value!r} is not one of {self.values}") from None

    def deserialize(self, data: bytes) -> str:
        if len(data) != 4:
            raise ValueError(f"EnumSerializer: {len(data)} bytes, expected 4")
        (ordinal,) = struct.unpack(">i", data)
        if not 0 <= ordinal < len(self.values):
            raise ValueError(f"EnumSerializer: ordinal {ordinal} out of range")
        return str(self.values[ordinal])

    def config(self) -> dict[str, Any]:
        return {"values": list(self.values)}

    @classmethod
    def from_snapshot(cls, snapshot: SerializerSnapshot) -> TypeSerializer[Any]:
        return cls(snapshot.config["values"])

    def resolve_compatibility(self, old: SerializerSnapshot) -> SchemaCompatibility[Any]:
        base = super().resolve_compatibility(old)
        if base.kind is Compatibility.INCOMPATIBLE:
            return base
        old_values = tuple(old.config.get("values", ()))
        if old_values == self.values:
            return SchemaCompatibility.as_is()
        removed = [v for v in old_values if v not in self._ordinal]
        if removed:
            return SchemaCompatibility.incompatible(f"enum values removed: {removed}")
        merged = old_values + tuple(v for v in self.values if v not in old_values)
        return SchemaCompatibility.with_reconfigured(EnumSerializer(merged), "enum values added or reordered")


class RecordSerializer(BaseSerializer):
    """Named fields with defaults, stored as a dict: a small Avro-like schema (SER-3, SER-5).

    Fields added (taking their default) or removed: compatible after migration. A field's serializer that is
    incompatible makes the record incompatible.
    """

    serializer_id = "record"

    def __init__(self, fields: Sequence[tuple[str, TypeSerializer[Any], Any]]) -> None:
        self.fields = tuple(fields)
        # Serialization is on every state access's path, so the record is packed by hand, byte for byte what
        # msgpack packs for the dict of field bytes: a repeated name keeps its first place and its last field.
        plan: dict[str, tuple[TypeSerializer[Any], Any]] = {}
        for name, ser, default in self.fields:
            plan[name] = (ser, default)
        self._plan = tuple((msgpack.packb(name, use_bin_type=True), name, ser, d) for name, (ser, d) in plan.items())
        self._map_header = _map_header(len(plan))
        # A record of one 64-bit long (the simulator's and the Spark runner's count and sum) has one fixed layout,
        # packed and unpacked by one struct: header, name and bin header are a constant prefix of the value.
        self._single_long: tuple[struct.Struct, bytes, str, Any] | None = None
        if len(self._plan) == 1 and type(self._plan[0][2]) is LongSerializer:
            packed_name, name, _, default = self._plan[0]
            prefix = self._map_header + packed_name + _BIN8[LongSerializer._STRUCT.size]
            self._single_long = struct.Struct(f">{len(prefix)}sq"), prefix, name, default

    def serialize(self, value: Mapping[str, Any]) -> bytes:
        if self._single_long is not None:
            layout, prefix, name, default = self._single_long
            field_value = value.get(name, default)
            if type(field_value) is int:  # else LongSerializer's type error, from the general path
                try:
                    return layout.pack(prefix, field_value)
                except struct.error:
                    pass  # out of 64 bits: the general path raises LongSerializer's error
        parts = [self._map_header]
        for packed_name, name, ser, default in self._plan:
            field_bytes = ser.serialize(value.get(name, default))
            parts += (packed_name, _bin_header(len(field_bytes)), field_bytes)
        return b"".join(parts)

    def deserialize(self, data: bytes) -> dict[str, Any]:
        if self._single_long is not None and len(data) == self._single_long[0].size:
            layout, prefix, name, _ = self._single_long
            packed, field_value = layout.unpack(data)
            if packed == prefix:  # other bytes (another encoding of the same map, damage): the general path
                return {name: field_value}
        raw = unpack_plain(data, "RecordSerializer")
        if type(raw) is not dict:
            raise ValueError("RecordSerializer: expected a map of field bytes")
        for field_bytes in raw.values():
            if type(field_bytes) is not bytes:
                raise ValueError("RecordSerializer: expected a map of field bytes")
        value = {}
        for name, ser, default in self.fields:
            field_bytes = raw.get(name)
            value[name] = default if field_bytes is None else ser.deserialize(field_bytes)
        return value

    def config(self) -> dict[str, Any]:
        return {
            "fields": [
                {"name": n, "serializer": s.snapshot_configuration().to_plain(), "default": d}
                for n, s, d in self.fields
            ]
        }

    @classmethod
    def from_snapshot(cls, snapshot: SerializerSnapshot) -> TypeSerializer[Any]:
        fields = [
            (f["name"], restore_serializer(SerializerSnapshot.from_plain(f["serializer"])), f.get("default"))
            for f in snapshot.config["fields"]
        ]
        return cls(fields)

    def resolve_compatibility(self, old: SerializerSnapshot) -> SchemaCompatibility[Any]:
        base = super().resolve_compatibility(old)
        if base.kind is Compatibility.INCOMPATIBLE:
            return base
        old_fields = {f["name"]: SerializerSnapshot.from_plain(f["serializer"]) for f in old.config["fields"]}
        new_names = [n for n, _, _ in self.fields]
        migrate = set(old_fields) != set(new_names)
        for name, ser, _ in self.fields:
            if name not in old_fields:
                continue
            result = ser.resolve_compatibility(old_fields[name])
            if result.kind is Compatibility.INCOMPATIBLE:
                return SchemaCompatibility.incompatible(f"field {name!r}: {result.reason}")
            if result.kind is not Compatibility.COMPATIBLE_AS_IS:
                migrate = True
        return SchemaCompatibility.after_migration("record schema changed") if migrate else base


def combine_compatibility(
    results: Sequence[SchemaCompatibility[Any]],
    rebuild: Callable[[list[TypeSerializer[Any]]], TypeSerializer[Any]],
    current: Sequence[TypeSerializer[Any]],
) -> SchemaCompatibility[Any]:
    """The weakest of nested results: incompatible > after migration > reconfigured > as is (SER-3)."""
    kinds = {r.kind for r in results}
    if Compatibility.INCOMPATIBLE in kinds:
        return SchemaCompatibility.incompatible("; ".join(r.reason for r in results if r.reason))
    if Compatibility.COMPATIBLE_AFTER_MIGRATION in kinds:
        return SchemaCompatibility.after_migration("a nested serializer needs migration")
    if Compatibility.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER in kinds:
        nested = [r.reconfigured or s for r, s in zip(results, current, strict=False)]
        return SchemaCompatibility.with_reconfigured(rebuild(nested), "a nested serializer was reconfigured")
    return SchemaCompatibility.as_is()


DEFAULT_KEY_SERIALIZER: TypeSerializer[Any] = MsgpackSerializer()
DEFAULT_VALUE_SERIALIZER: TypeSerializer[Any] = MsgpackSerializer()
VOID_NAMESPACE_SERIALIZER: TypeSerializer[Any] = VoidNamespaceSerializer()
