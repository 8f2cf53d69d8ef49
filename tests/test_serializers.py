"""Serializers and schema compatibility (chapter SER)."""

from __future__ import annotations

import enum
import importlib.util
import math
import pickle
import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecert.conformance.interleaving import Interleaving
from statecert.conformance.suite.test_default_serializer import dressed
from statecert.reference.serializers import (
    BooleanSerializer,
    BytesSerializer,
    DoubleSerializer,
    EnumSerializer,
    JavaDoubleSerializer,
    LongSerializer,
    MsgpackSerializer,
    RecordSerializer,
    StringSerializer,
    TupleSerializer,
    restore_serializer,
)
from statecert.spec.errors import StateMigrationError
from statecert.spec.serializers import Compatibility, SerializerSnapshot

PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)
CASES: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (StringSerializer(), st.text()),
    (LongSerializer(), st.integers(-(2**63), 2**63 - 1)),
    (DoubleSerializer(), st.floats(allow_nan=False)),
    (BooleanSerializer(), st.booleans()),
    (BytesSerializer(), st.binary()),
    (MsgpackSerializer(), PLAIN),
    (
        TupleSerializer(StringSerializer(), LongSerializer()),
        st.tuples(st.text(), st.integers(-(2**63), 2**63 - 1)),
    ),
    (EnumSerializer(["a", "b", "c"]), st.sampled_from(["a", "b", "c"])),
    (
        RecordSerializer([("total", LongSerializer(), 0), ("name", StringSerializer(), "")]),
        st.fixed_dictionaries({"total": st.integers(-(2**63), 2**63 - 1), "name": st.text()}),
    ),
]
# Record fields: names may repeat (the last field of a name wins), values of every bin length msgpack
# distinguishes (bin 8 up to 255 bytes, bin 16 up to 65,535, bin 32 beyond), and more than 15 fields (map 16).
FIELD_NAMES = st.text(max_size=3)
RECORD_VALUES = st.sampled_from([0, 1, 255, 256, 65_535, 65_536, 70_000]).map(lambda n: "y" * n) | st.text()


@pytest.mark.requirement("SER-1")
@pytest.mark.parametrize(("serializer", "values"), CASES, ids=lambda c: getattr(c, "serializer_id", ""))
@given(data=st.data())
def test_serializer_round_trips(serializer: Any, values: st.SearchStrategy[Any], data: st.DataObject) -> None:
    value = data.draw(values)
    assert serializer.deserialize(serializer.serialize(value)) == value, f"{serializer}.round_trip({value!r})"


@pytest.mark.requirement("SER-1", "KB-SNAP-2")
@pytest.mark.parametrize(("serializer", "values"), CASES, ids=lambda c: getattr(c, "serializer_id", ""))
@settings(max_examples=10)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_one_serializer_round_trips_in_two_threads_taking_turns(
    serializer: Any, values: st.SearchStrategy[Any], data: st.DataObject, seed: int
) -> None:
    """A backend may call one serializer from its task thread and a snapshot's asynchronous part at once (there is
    no duplicate()): each thread's values round-trip while the other's calls interleave at random bytecodes."""
    ours, theirs = (data.draw(st.lists(values, min_size=20, max_size=40), label=name) for name in ("here", "beside"))

    def round_trip(items: list[Any]) -> list[Any]:
        return [serializer.deserialize(serializer.serialize(value)) for value in items]

    got_here, got_beside = Interleaving(seed, switch_probability=0.05).run(
        lambda: round_trip(ours), lambda: round_trip(theirs)
    )
    for name, sent, got in (("here", ours, got_here), ("beside", theirs, got_beside)):
        wrong = [(value, back) for value, back in zip(sent, got, strict=True) if value != back]
        assert not wrong, f"{serializer}: round trips in the thread {name} gave (value, got) {wrong[:3]}"


@pytest.mark.requirement("SER-1")
@given(fields=st.lists(st.tuples(FIELD_NAMES, st.text(max_size=4)), max_size=20), data=st.data())
def test_record_is_the_msgpack_map_of_its_fields_bytes(fields: list[tuple[str, str]], data: st.DataObject) -> None:
    """The record serializer packs by hand (it is on every state access's path): its bytes must stay the msgpack
    map of each field's bytes that earlier checkpoints hold, and read back as the record."""
    strings = StringSerializer()
    serializer = RecordSerializer([(name, strings, default) for name, default in fields])
    defaults = dict(fields)
    names = st.sampled_from(sorted(defaults)) | FIELD_NAMES if defaults else FIELD_NAMES
    value = data.draw(st.dictionaries(names, RECORD_VALUES, max_size=20), label="value")
    expected = msgpack.packb(
        {name: strings.serialize(value.get(name, defaults[name])) for name in defaults}, use_bin_type=True
    )
    packed = serializer.serialize(value)
    assert packed == expected, f"RecordSerializer({fields}).serialize({value!r}): expected {expected!r}, got {packed!r}"
    record = {name: value.get(name, default) for name, default in defaults.items()}
    assert serializer.deserialize(packed) == record, f"RecordSerializer({fields}).deserialize({packed!r})"
    assert serializer.deserialize(msgpack.packb({})) == defaults, f"RecordSerializer({fields}).deserialize(b'\\x80')"


@pytest.mark.requirement("SER-1")
@pytest.mark.parametrize("fields", [1, 15, 16])
@pytest.mark.parametrize("length", [0, 255, 256, 65_535, 65_536])
def test_record_bytes_at_msgpack_header_boundaries(fields: int, length: int) -> None:
    """Each size where msgpack changes its bin or map header (bin 8/16/32, fixmap/map 16), packed as msgpack does."""
    longs, strings = LongSerializer(), StringSerializer()
    serializer = RecordSerializer([("s", strings, "")] + [(f"f{i}", longs, i) for i in range(1, fields)])
    value = {"s": "y" * length}
    expected = msgpack.packb(
        {"s": strings.serialize(value["s"]), **{f"f{i}": longs.serialize(i) for i in range(1, fields)}},
        use_bin_type=True,
    )
    packed = serializer.serialize(value)
    assert packed == expected, (
        f"{fields}-field record with a {length}-byte field: expected {expected[:12]!r}..., got {packed[:12]!r}..."
    )
    assert serializer.deserialize(packed)["s"] == value["s"]


LONG_EDGES = [-(2**63) - 1, -(2**63), 2**63 - 1, 2**63, 0.0, "1", None]


class GeneralPathLong(LongSerializer):
    """A LongSerializer the record serializer does not recognise: its records take the general msgpack path."""


def outcome(function: Any, argument: Any) -> Any:
    """What a call gives: its value, or the type of the error it raises."""
    try:
        return function(argument)
    except (TypeError, ValueError) as exc:
        return type(exc)


@pytest.mark.requirement("SER-1", "SER-8")
@given(
    name=FIELD_NAMES,
    default=st.integers(-(2**63), 2**63 - 1),
    field=st.none() | st.integers(-(2**64), 2**64) | st.sampled_from(LONG_EDGES) | st.booleans() | st.floats(),
    damage=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, 40),
)
def test_a_record_of_one_long_reads_and_writes_as_the_general_path(
    name: str, default: int, field: Any, damage: list[tuple[int, int]], cut: int
) -> None:
    """A record of a single long is packed and read by one struct (the simulator's and the Spark runner's state):
    it must give the general path's bytes, values and errors, for values out of range or not ints (a field left
    out takes the default), and for bytes in its layout that are damaged, cut short or another msgpack encoding."""
    value = {} if field is None else {name: field}
    fast = RecordSerializer([(name, LongSerializer(), default)])
    general = RecordSerializer([(name, GeneralPathLong(), default)])
    packed = outcome(general.serialize, value)
    assert outcome(fast.serialize, value) == packed, f"RecordSerializer.serialize({value!r})"
    data = bytearray(packed if isinstance(packed, bytes) else general.serialize({name: default}))
    for at, byte in damage:
        data[at % len(data)] = byte
    other_encoding = msgpack.packb({name: bytes(8)}, use_bin_type=False)  # str 8 header where bin 8 was
    for candidate in (bytes(data), bytes(data[:cut]), other_encoding):
        assert outcome(fast.deserialize, candidate) == outcome(general.deserialize, candidate), (
            f"RecordSerializer.deserialize({candidate!r})"
        )


@pytest.mark.requirement("SER-2", "SER-4")
@pytest.mark.parametrize(("serializer", "values"), CASES, ids=lambda c: getattr(c, "serializer_id", ""))
def test_snapshot_restores_an_equal_serializer(serializer: Any, values: Any) -> None:
    snapshot = serializer.snapshot_configuration()
    assert SerializerSnapshot.from_plain(snapshot.to_plain()) == snapshot
    restored = restore_serializer(snapshot)
    assert restored.snapshot_configuration() == snapshot
    assert restored.resolve_compatibility(snapshot).kind is Compatibility.COMPATIBLE_AS_IS


@pytest.mark.requirement("SER-3")
def test_other_serializer_id_is_incompatible() -> None:
    result = LongSerializer().resolve_compatibility(StringSerializer().snapshot_configuration())
    assert result.kind is Compatibility.INCOMPATIBLE and "str" in result.reason


@pytest.mark.requirement("SER-3")
def test_enum_with_added_value_needs_reconfiguration_that_keeps_old_ordinals() -> None:
    old = EnumSerializer(["red", "green"])
    written = old.serialize("green")
    new = EnumSerializer(["blue", "red", "green"])
    result = new.resolve_compatibility(old.snapshot_configuration())
    assert result.kind is Compatibility.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER
    assert result.reconfigured is not None
    assert result.reconfigured.deserialize(written) == "green"
    assert result.reconfigured.deserialize(result.reconfigured.serialize("blue")) == "blue"


@pytest.mark.requirement("SER-3")
def test_enum_with_removed_value_is_incompatible() -> None:
    result = EnumSerializer(["red"]).resolve_compatibility(EnumSerializer(["red", "green"]).snapshot_configuration())
    assert result.kind is Compatibility.INCOMPATIBLE and "green" in result.reason


@pytest.mark.requirement("SER-3", "SER-5")
def test_record_with_added_field_is_compatible_after_migration() -> None:
    v1 = RecordSerializer([("name", StringSerializer(), "")])
    v2 = RecordSerializer([("name", StringSerializer(), ""), ("age", LongSerializer(), 0)])
    result = v2.resolve_compatibility(v1.snapshot_configuration())
    assert result.kind is Compatibility.COMPATIBLE_AFTER_MIGRATION
    old_reader = restore_serializer(v1.snapshot_configuration())
    migrated = v2.deserialize(v2.serialize(old_reader.deserialize(v1.serialize({"name": "ada"}))))
    assert migrated == {"name": "ada", "age": 0}


@pytest.mark.requirement("SER-3")
def test_record_with_field_of_other_type_is_incompatible() -> None:
    v1 = RecordSerializer([("n", StringSerializer(), "")])
    v2 = RecordSerializer([("n", LongSerializer(), 0)])
    assert v2.resolve_compatibility(v1.snapshot_configuration()).kind is Compatibility.INCOMPATIBLE


@pytest.mark.requirement("SER-3")
def test_tuple_compatibility_is_the_weakest_of_its_fields() -> None:
    old = TupleSerializer(StringSerializer(), EnumSerializer(["a"]))
    new = TupleSerializer(StringSerializer(), EnumSerializer(["a", "b"]))
    result = new.resolve_compatibility(old.snapshot_configuration())
    assert result.kind is Compatibility.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER
    other_arity = TupleSerializer(StringSerializer())
    assert other_arity.resolve_compatibility(old.snapshot_configuration()).kind is Compatibility.INCOMPATIBLE


@pytest.mark.requirement("SER-4", "SER-8")
def test_unknown_serializer_id_is_a_migration_error_not_an_import() -> None:
    snapshot = SerializerSnapshot("os:system", 1, {})
    with pytest.raises(StateMigrationError, match="unknown serializer 'os:system'"):
        restore_serializer(snapshot)


@pytest.mark.requirement("SER-10")
@given(PLAIN)
def test_msgpack_default_writes_subclasses_of_plain_types_as_those_types(value: Any) -> None:
    """Maps as `OrderedDict`s, lists, texts, bytes, floats and ints of subclasses, an `IntEnum` (the suite's
    `dressed`): written as the plain value is, and read back equal to it."""
    serializer = MsgpackSerializer()
    written = dressed(value)
    got = serializer.deserialize(serializer.serialize(written))
    assert got == value, f"MsgpackSerializer round trip of {written!r}: expected {value!r}, got {got!r}"
    assert serializer.serialize(written) == serializer.serialize(value), f"{written!r} written unlike {value!r}"


@pytest.mark.requirement("SER-10")
@given(st.binary())
def test_msgpack_default_writes_a_bytearray_or_memoryview_as_bytes(data: bytes) -> None:
    serializer = MsgpackSerializer()
    for written in (bytearray(data), memoryview(data)):
        got = serializer.serialize(written)
        assert got == serializer.serialize(data), f"MsgpackSerializer().serialize({written!r}) gave {got!r}"


@pytest.mark.requirement("SER-10")
@pytest.mark.parametrize(
    "value",
    [(), (1, "a"), [1, (2,)], {"k": (1,)}, {(1, 2): 3}, {1, 2}, frozenset(), object(), 1j],
    ids=["empty-tuple", "tuple", "in-a-list", "in-a-map", "tuple-keys", "set", "frozenset", "object", "complex"],
)
def test_msgpack_default_refuses_what_is_not_plain_data(value: Any) -> None:
    """A tuple (it would read back as a list, and a map keyed by tuples not at all), a set, an object: TypeError."""
    with pytest.raises(TypeError, match="not plain data"):
        MsgpackSerializer().serialize(value)


EXTENSIONS = st.sampled_from(
    [
        msgpack.ExtType(5, b"abc"),
        msgpack.ExtType(127, b""),
        msgpack.Timestamp(1, 0),
        msgpack.Timestamp(2**40, 7),
        msgpack.Timestamp(-1, 5),
    ]
)
HOLDING_AN_EXTENSION = st.recursive(
    EXTENSIONS,
    lambda inner: (
        st.builds(
            lambda before, it, after: [*before, it, *after],
            st.lists(PLAIN, max_size=2),
            inner,
            st.lists(PLAIN, max_size=2),
        )
        | st.builds(
            lambda entries, key, it: {**entries, key: it}, st.dictionaries(st.text(max_size=3), PLAIN), st.text(), inner
        )
    ),
    max_leaves=4,
)
# bytes that look like msgpack's extension headers inside a bin: plain data, which must round-trip
EXTENSION_LOOKALIKES = st.lists(
    st.sampled_from([b"\xd6\xff", b"\xd7\xff", b"\xc7\x0c\xff", b"\xd4\x05"]) | st.binary(max_size=3), max_size=6
).map(b"".join)


def _spec_only_msgpack_default() -> Any:
    """The spec-only example's msgpack default (examples/spec-only-backend), which authors copy: loaded from its
    file, as it imports only `statecert.spec`, msgpack and mmh3."""
    path = Path(__file__).resolve().parent.parent / "examples" / "spec-only-backend" / "spec_only_serializers.py"
    spec = importlib.util.spec_from_file_location("spec_only_serializers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MsgpackSerializer()


MSGPACK_DEFAULTS = pytest.mark.parametrize(
    "serializer", [MsgpackSerializer(), _spec_only_msgpack_default()], ids=["reference", "spec-only-example"]
)


@pytest.mark.requirement("SER-10", "IF-1")
@MSGPACK_DEFAULTS
@given(value=HOLDING_AN_EXTENSION)
def test_msgpack_default_refuses_an_extension_type_at_any_depth(serializer: Any, value: Any) -> None:
    """msgpack packs its `ExtType` and `Timestamp` past `default`; IF-1's plain data never holds an extension type,
    so the default refuses to write one (TypeError, SER-10) and refuses bytes holding one (ValueError, IF-1)."""
    with pytest.raises(TypeError, match="not plain data"):
        serializer.serialize(value)
    packed = msgpack.packb(value, use_bin_type=True)
    with pytest.raises(ValueError, match="not a msgpack value"):
        got = serializer.deserialize(packed)
        pytest.fail(f"{type(serializer).__name__}().deserialize({packed!r}) gave {got!r}, expected ValueError")


@pytest.mark.requirement("SER-10", "IF-1")
@MSGPACK_DEFAULTS
@given(value=st.lists(EXTENSION_LOOKALIKES | PLAIN, max_size=4) | EXTENSION_LOOKALIKES)
def test_msgpack_default_round_trips_bytes_that_look_like_extension_headers(serializer: Any, value: Any) -> None:
    got = serializer.deserialize(serializer.serialize(value))
    assert got == value, f"{type(serializer).__name__} round trip of {value!r}: got {got!r}"


@pytest.mark.requirement("SER-8")
def test_msgpack_serializer_never_unpickles() -> None:
    class Boom:
        def __reduce__(self) -> tuple[Any, ...]:
            return (exec, ("raise SystemExit('unpickled!')",))

    payload = pickle.dumps(Boom())
    try:
        value = MsgpackSerializer().deserialize(payload)
    except ValueError:
        return  # an error is an allowed outcome; code execution (SystemExit) is not
    assert not isinstance(value, Boom), f"MsgpackSerializer().deserialize(pickle) gave {value!r}"


@pytest.mark.requirement("SER-8")
@given(st.binary(max_size=64))
def test_default_serializers_turn_arbitrary_bytes_into_data_or_an_error(data: bytes) -> None:
    record = RecordSerializer([("total", LongSerializer(), 0), ("name", StringSerializer(), "")])
    for serializer in (MsgpackSerializer(), TupleSerializer(StringSerializer(), LongSerializer()), record):
        try:
            value = serializer.deserialize(data)
        except (ValueError, TypeError):
            continue
        assert isinstance(value, str | bytes | int | float | bool | list | dict | tuple | type(None)), (
            f"{serializer}.deserialize({data!r}) gave a {type(value).__name__}"
        )


def _nested(depth: int, leaf: Any) -> Any:
    """`leaf` inside `depth` containers, lists and maps by turns."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {b"\xd4\x05": value}
    return value


@pytest.mark.requirement("SER-9", "SER-10", "IF-1")
@MSGPACK_DEFAULTS
@pytest.mark.parametrize("depth", [100, 400, 510])
def test_msgpack_default_walks_plain_data_as_deep_as_msgpack_writes_it(serializer: Any, depth: int) -> None:
    """msgpack writes plain data nested up to 511 containers deep, past Python's recursion limit for a walk of one
    call per level: bytes that look like extension headers at the bottom must round-trip, an extension type there is
    refused with TypeError, and bytes holding a timestamp there with ValueError, never RecursionError."""
    plain = _nested(depth, [b"\xd6\xff\x00\x00\x00\x00", b"\xc7\x0c\xff"])
    got = serializer.deserialize(serializer.serialize(plain))
    assert got == plain, f"{type(serializer).__name__}: plain data {depth} containers deep read back as another value"
    with pytest.raises(TypeError, match="not plain data"):
        serializer.serialize(_nested(depth, [msgpack.ExtType(5, b"x")]))
    with pytest.raises(ValueError, match="not a msgpack value"):
        serializer.deserialize(msgpack.packb(_nested(depth, [msgpack.Timestamp(1, 0)]), use_bin_type=True))


NAN_BITS = st.integers(1, 2**52 - 1).flatmap(
    lambda payload: st.sampled_from([0x7FF0000000000000, 0xFFF0000000000000]).map(lambda high: high | payload)
)
"""The bits of every NaN: exponent all ones, a payload other than 0, either sign."""


@pytest.mark.requirement("IF-1", "KG-1")
@given(bits=NAN_BITS)
def test_every_nan_is_written_as_java_writes_it_and_is_one_key(bits: int) -> None:
    """`double` and `java-double` write every NaN as Java's `doubleToLongBits` does (7ff8000000000000), as Flink's
    `DoubleSerializer` writes it: a NaN computed (`inf - inf` has its sign bit set on x86) and `float("nan")` are one
    key, of one key group, and a NaN of any bits reads back as NaN."""
    nan = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    for serializer in (DoubleSerializer(), JavaDoubleSerializer()):
        written = serializer.serialize(nan)
        expected = bytes.fromhex("7ff8000000000000")
        assert written == expected, (
            f"{serializer}.serialize(NaN {bits:016x}): expected {expected.hex()}, got {written.hex()}"
        )
        assert serializer.key_hash(nan) == serializer.key_hash(math.nan), f"{serializer}.key_hash(NaN {bits:016x})"
        read = serializer.deserialize(bits.to_bytes(8, "big"))
        assert math.isnan(read), f"{serializer}.deserialize({bits:016x}) = {read!r}"
    computed = math.inf - math.inf
    assert DoubleSerializer().serialize(computed) == DoubleSerializer().serialize(math.nan)


@pytest.mark.requirement("SER-1")
@pytest.mark.parametrize("fields", [65_535, 65_536])
def test_record_bytes_at_the_map_32_boundary(fields: int) -> None:
    """A record of 65,536 fields or more has msgpack's map 32 header, as msgpack packs the dict of its fields."""
    longs = LongSerializer()
    serializer = RecordSerializer([(f"f{i}", longs, i) for i in range(fields)])
    expected = msgpack.packb({f"f{i}": longs.serialize(i) for i in range(fields)}, use_bin_type=True)
    packed = serializer.serialize({})
    assert packed[:5] == expected[:5], f"{fields}-field record: header {packed[:5]!r}, expected {expected[:5]!r}"
    assert packed == expected, f"{fields}-field record: bytes differ from msgpack's"


@pytest.mark.requirement("IF-1", "SER-10")
def test_a_timestamp_among_every_timestamp_header_is_refused() -> None:
    """msgpack decodes its timestamp extension itself (no `ext_hook`): a value holding one is refused however many
    other bytes that look like timestamp headers lie beside it."""
    data = msgpack.packb([msgpack.Timestamp(1, 0), b"\xd6\xff\xd7\xff\xc7\x0c\xff"], use_bin_type=True)
    with pytest.raises(ValueError, match="timestamp"):
        MsgpackSerializer().deserialize(data)


@pytest.mark.requirement("KG-1")
@given(
    key=st.tuples(st.text(max_size=8), st.integers(-(2**63), 2**63 - 1)) | st.binary(max_size=16).map(lambda b: (b,))
)
def test_a_key_hash_is_a_java_int(key: tuple[Any, ...]) -> None:
    """A key's hash is a 32-bit integer (KG-1), the `int` `MathUtils.murmurHash` takes: murmur3-32 of the serialized
    bytes, signed, for the serializers without a Java counterpart."""
    serializer = (
        TupleSerializer(StringSerializer(), LongSerializer()) if len(key) == 2 else TupleSerializer(BytesSerializer())
    )
    value = serializer.key_hash(key)
    assert -(2**31) <= value < 2**31, f"KG-1: {serializer!r}.key_hash({key!r}) = {value}: not a 32-bit int"


@pytest.mark.requirement("SER-2")
def test_serializers_are_equal_and_hash_alike_exactly_when_their_snapshots_are() -> None:
    same = [
        TupleSerializer(StringSerializer(), LongSerializer()),
        TupleSerializer(StringSerializer(), LongSerializer()),
    ]
    assert same[0] == same[1] and hash(same[0]) == hash(same[1]) and len(set(same)) == 1
    others = [TupleSerializer(LongSerializer(), StringSerializer()), EnumSerializer(["a"]), EnumSerializer(["b"])]
    for other in others:
        assert same[0] != other, f"SER-2: {same[0]!r} == {other!r}: their snapshots differ"
    assert EnumSerializer(["a"]) != EnumSerializer(["b"]), "SER-2: enums of other names compare equal"


class _Size(enum.IntEnum):
    SMALL = 1


@pytest.mark.requirement("SER-1", "SER-10")
@pytest.mark.parametrize("value", [True, False, 1.5, "1", None])
def test_a_long_serializer_refuses_what_is_not_an_integer(value: Any) -> None:
    with pytest.raises(TypeError, match="LongSerializer expects int"):
        LongSerializer().serialize(value)


@pytest.mark.requirement("SER-1")
def test_a_long_serializer_writes_an_int_subclass_as_its_value() -> None:
    assert LongSerializer().serialize(_Size.SMALL) == LongSerializer().serialize(1)


@pytest.mark.requirement("IF-1")
@pytest.mark.parametrize("ordinal", [-1, 3, 2**31 - 1])
def test_an_enum_ordinal_outside_its_names_is_a_value_error(ordinal: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        EnumSerializer(["a", "b", "c"]).deserialize(struct.pack(">i", ordinal))


@pytest.mark.requirement("SER-3")
def test_an_enum_against_another_serializer_is_incompatible() -> None:
    result = EnumSerializer(["a"]).resolve_compatibility(StringSerializer().snapshot_configuration())
    assert result is not None and result.kind is Compatibility.INCOMPATIBLE, f"SER-3: got {result!r}"


@pytest.mark.requirement("SER-3", "SER-5")
def test_a_record_whose_field_needs_reconfiguring_is_migrated() -> None:
    """A field whose serializer is not compatible as is (an enum's names reordered: its ordinals are the old ones
    only through the reconfigured serializer) makes the record compatible after migration, not as is."""
    old = RecordSerializer([("colour", EnumSerializer(["red", "green"]), "red")])
    new = RecordSerializer([("colour", EnumSerializer(["green", "red"]), "red")])
    result = new.resolve_compatibility(old.snapshot_configuration())
    assert result.kind is Compatibility.COMPATIBLE_AFTER_MIGRATION, f"SER-3: {result.kind}, expected after migration"


@pytest.mark.requirement("TTL-5")
@pytest.mark.parametrize("change", ["enabled", "disabled"])
def test_turning_ttl_on_or_off_for_restored_state_is_refused_saying_which(change: str) -> None:
    """TTL-5: restored state keeps its TTL setting; the StateMigrationError says which change was asked for."""
    import types

    from statecert.reference.format.state_meta import StateMetaInfo
    from statecert.reference.migration import resolve_state_serializers
    from statecert.reference.serializers import VoidNamespaceSerializer
    from statecert.spec.state import StateKind, TtlConfig, ValueStateDescriptor

    longs, namespaces = LongSerializer(), VoidNamespaceSerializer()
    written_with_ttl = change == "disabled"
    meta = StateMetaInfo(
        "s",
        StateKind.VALUE,
        namespaces.snapshot_configuration(),
        {"value": longs.snapshot_configuration()},
        written_with_ttl,
    )
    descriptor = ValueStateDescriptor("s", ttl=None if written_with_ttl else TtlConfig(1000), serializer=longs)
    with pytest.raises(StateMigrationError, match=f"TTL cannot be {change}"):
        resolve_state_serializers(types.SimpleNamespace(meta=meta), descriptor, {"value": longs}, namespaces)
