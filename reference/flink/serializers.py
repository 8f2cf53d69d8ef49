"""Flink's serializer snapshots as its keyed state streams record them, and Python decoders for the values of Flink's
built-in serializers: `Long`, `Integer`, `Short`, `Byte`, `Double`, `Float`, `Boolean`, `Character`, `String`, the
void namespace, `Tuple`s, `Row`s, lists and maps of them.

A snapshot of any other serializer is skipped when its layout is known (Kryo's and the POJO serializer's: a class
name and framed maps) and its values become `Undecodable(<serializer class>)`; its bytes are never interpreted. A
snapshot whose layout is unknown cannot be skipped (its length is not recorded): the stream is refused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statecert.reference.flink.java_input import JavaDataInput

PROXY_VERSION = 2  # TypeSerializerSnapshotSerializationProxy
COMPOSITE_MAGIC = 911108  # CompositeTypeSerializerSnapshot
NESTED_MAGIC = 1333245  # NestedSerializersSnapshotDelegate
OPTIONAL_MAP_HEADER = 5440760593776  # LinkedOptionalMapSerializer
MAX_NESTING = 32

_BASE = "org.apache.flink.api.common.typeutils.base."
SCALARS = {
    f"{_BASE}LongSerializer$LongSerializerSnapshot": "long",
    f"{_BASE}IntSerializer$IntSerializerSnapshot": "int",
    f"{_BASE}ShortSerializer$ShortSerializerSnapshot": "short",
    f"{_BASE}ByteSerializer$ByteSerializerSnapshot": "byte",
    f"{_BASE}DoubleSerializer$DoubleSerializerSnapshot": "double",
    f"{_BASE}FloatSerializer$FloatSerializerSnapshot": "float",
    f"{_BASE}BooleanSerializer$BooleanSerializerSnapshot": "boolean",
    f"{_BASE}CharSerializer$CharSerializerSnapshot": "char",
    f"{_BASE}StringSerializer$StringSerializerSnapshot": "string",
    "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot": "void",
}
# composite snapshots: kind, and what their outer snapshot holds
COMPOSITES = {
    f"{_BASE}ListSerializerSnapshot": "list",
    f"{_BASE}MapSerializerSnapshot": "map",
    "org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot": "tuple",
    "org.apache.flink.api.java.typeutils.runtime.RowSerializer$RowSerializerSnapshot": "row",
    "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot": "timer",
}
# snapshots skipped whole: a class name, then this many framed optional maps
SKIPPED = {
    "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot": 3,
    "org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot": 3,
}


@dataclass(frozen=True)
class Undecodable:
    """A value of a serializer this reader does not decode: only its serializer's class is told."""

    serializer: str

    def __str__(self) -> str:
        return f"<undecodable: {self.serializer}>"


@dataclass(frozen=True)
class FlinkSerializer:
    """A serializer, as its snapshot describes it: `kind` is a scalar's name, `list`, `map`, `tuple`, `row`,
    `timer`, or `undecodable`; `fields` are the nested serializers; `row_kind`: a row's mask starts with its kind."""

    snapshot_class: str
    kind: str
    fields: tuple[FlinkSerializer, ...] = ()
    row_kind: bool = True
    type_class: str = ""

    @property
    def decodable(self) -> bool:
        return self.kind not in ("undecodable", "timer") and all(f.decodable for f in self.fields)

    @property
    def name(self) -> str:
        """A short name: the scalar's, or the composite's with its fields'."""
        if self.kind == "undecodable":
            return self.type_class or self.snapshot_class
        if self.fields:
            return f"{self.kind}<{', '.join(f.name for f in self.fields)}>"
        return self.kind

    def decode(self, inp: JavaDataInput) -> Any:
        """One value, read as Flink's serializer writes it."""
        kind = self.kind
        if kind == "long":
            return inp.read_long()
        if kind == "int":
            return inp.read_int()
        if kind == "short":
            return inp.read_short()
        if kind == "byte":
            return inp.read_byte()
        if kind == "double":
            return inp.read_double()
        if kind == "float":
            return inp.read_float()
        if kind == "boolean":
            return inp.read_boolean()
        if kind == "char":
            return chr(inp.read_unsigned_short())
        if kind == "string":
            return read_string(inp)
        if kind == "void":
            inp.read_byte()
            return None
        if kind == "tuple":
            return tuple(f.decode(inp) for f in self.fields)
        if kind == "row":
            return self._row(inp)
        if kind == "list":
            return [self.fields[0].decode(inp) for _ in range(inp.read_count("list elements"))]
        if kind == "map":
            entries = {}
            for _ in range(inp.read_count("map entries")):
                key = self.fields[0].decode(inp)
                entries[key] = None if inp.read_boolean() else self.fields[1].decode(inp)
            return entries
        raise inp.fail(f"values of {self.name} are not decodable")

    def _row(self, inp: JavaDataInput) -> tuple[Any, ...]:
        offset = 2 if self.row_kind else 0
        bits = offset + len(self.fields)
        mask = inp.read((bits + 7) // 8)
        nulls = [bool(mask[i // 8] & (0x80 >> (i % 8))) for i in range(bits)]
        return tuple(None if nulls[offset + i] else f.decode(inp) for i, f in enumerate(self.fields))


def read_string(inp: JavaDataInput) -> str | None:
    """`StringValue.readString`: a variable-length length plus one, then each UTF-16 unit variable-length."""

    def varint() -> int:
        value: int = inp.read_unsigned_byte()
        if value < 0x80:
            return value
        value &= 0x7F
        shift = 7
        while (current := inp.read_unsigned_byte()) >= 0x80:
            value |= (current & 0x7F) << shift
            shift += 7
            if shift > 35:
                raise inp.fail("a string length or character of more than 5 bytes")
        return int(value | (current << shift))

    length = varint()
    if length == 0:
        return None
    if length - 1 > inp.remaining():
        raise inp.fail(f"a string of {length - 1} characters in {inp.remaining()} bytes")
    units = [varint() for _ in range(length - 1)]
    if any(u > 0xFFFF for u in units):
        raise inp.fail("a string character beyond UTF-16")
    return b"".join(u.to_bytes(2, "big") for u in units).decode("utf-16-be", "surrogatepass")


def _skip_optional_maps(inp: JavaDataInput, count: int) -> None:
    for _ in range(count):
        if inp.read_long() != OPTIONAL_MAP_HEADER:
            raise inp.fail("a serializer snapshot's map without its header")
        for _ in range(inp.read_count("snapshot map entries", 4)):
            inp.read_utf()
            for _ in range(2):  # the key's frame, then the value's
                if inp.read_boolean():
                    inp.read(inp.read_count("framed snapshot bytes"))


def _nested(inp: JavaDataInput, depth: int) -> tuple[FlinkSerializer, ...]:
    if inp.read_int() != NESTED_MAGIC:
        raise inp.fail("nested serializer snapshots without their magic number")
    if inp.read_int() != 1:
        raise inp.fail("nested serializer snapshots of an unknown version")
    return tuple(read_versioned_snapshot(inp, depth + 1) for _ in range(inp.read_count("nested serializers", 6)))


def read_versioned_snapshot(inp: JavaDataInput, depth: int = 0) -> FlinkSerializer:
    """`TypeSerializerSnapshot.readVersionedSnapshot`: class name, version, the snapshot's own bytes."""
    if depth > MAX_NESTING:
        raise inp.fail(f"serializer snapshots nested more than {MAX_NESTING} deep")
    snapshot_class = inp.read_utf()
    version = inp.read_int()
    if snapshot_class in SCALARS:
        return FlinkSerializer(snapshot_class, SCALARS[snapshot_class])
    if snapshot_class in COMPOSITES:
        kind = COMPOSITES[snapshot_class]
        if inp.read_int() != COMPOSITE_MAGIC:
            raise inp.fail(f"{snapshot_class} (version {version}) without the composite snapshot's magic number")
        outer_version = inp.read_int()
        row_kind, type_class = True, ""
        if kind == "tuple":
            type_class = inp.read_utf()
        elif kind == "row":
            row_kind = inp.read_boolean() if outer_version >= 4 else outer_version >= 3
        fields = _nested(inp, depth)
        expected = {"list": 1, "map": 2, "timer": 2}.get(kind)
        if expected is not None and len(fields) != expected:
            raise inp.fail(f"{snapshot_class} with {len(fields)} nested serializers")
        return FlinkSerializer(snapshot_class, kind, fields, row_kind, type_class)
    if snapshot_class in SKIPPED:
        type_class = inp.read_utf()
        _skip_optional_maps(inp, SKIPPED[snapshot_class])
        return FlinkSerializer(snapshot_class, "undecodable", type_class=type_class)
    raise inp.fail(f"a serializer snapshot this reader cannot skip: {snapshot_class} (version {version})")


def read_serializer_snapshot(inp: JavaDataInput) -> FlinkSerializer:
    """`TypeSerializerSnapshotSerializationUtil.readSerializerSnapshot`: the proxy's version, then the snapshot."""
    version = inp.read_int()
    if version != PROXY_VERSION:
        raise inp.fail(f"a serializer snapshot proxy of version {version}, not {PROXY_VERSION}")
    return read_versioned_snapshot(inp)
