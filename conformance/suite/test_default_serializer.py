"""The `msgpack` default serializer a descriptor gets for every role it leaves out (SER-9, SER-10, IF-1): plain data
of every shape reads back equal, live, after a restore and in another backend; anything else, a tuple above all, is
refused before a checkpoint holds it, in keyed and operator state alike."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import fractions
import os
import pickle
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.conformance.helpers import (
    keyed_backend,
    location_for,
    operator_backend,
    raised_from,
    unreferenced_files,
)
from statecert.reference.serializers import LongSerializer, MsgpackSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.errors import StateMigrationError
from statecert.spec.keyed_backend import CheckpointOptions, SnapshotType
from statecert.spec.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)

L, S = LongSerializer(), StringSerializer()

PLAIN = {"list": [1, -2.5, None, True], "text": "é", "bytes": b"\x00\xff", "map": {"k": {"n": 2**63 - 1}}}
DEFAULTED = [
    ValueStateDescriptor("dv"),
    ListStateDescriptor("dl"),
    MapStateDescriptor("dm"),
    ReducingStateDescriptor("dr", reduce_function=lambda a, b: [*a, *b]),
]


@pytest.mark.requirement("SER-9", "SP-1")
@pytest.mark.capability("canonical_savepoints")
@pytest.mark.parametrize("direction", ["ours-into-reference", "reference-into-ours"])
def test_descriptors_without_serializers_use_the_msgpack_default(
    state_backend: Any, reference_backend: Any, storage: Any, direction: str
) -> None:
    """Every role a descriptor leaves out is the `msgpack` serializer of IF-1, so plain data written so moves
    between backends through a canonical savepoint and reads back equal."""
    writer, reader = (
        (state_backend, reference_backend) if direction == "ours-into-reference" else (reference_backend, state_backend)
    )
    with keyed_backend(writer) as backend:
        value, lst, mapping, reducing = (backend.get_or_create_state(d) for d in DEFAULTED)
        backend.set_current_key("k")
        value.update(PLAIN)
        lst.add_all([PLAIN, "b"])
        mapping.put("u", PLAIN)
        reducing.add(["x"])
        reducing.add(["y"])
        options = CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)
        handle = backend.snapshot(1, 0, location_for(storage), options).run()
    with keyed_backend(reader, restore=[handle]) as restored:
        value, lst, mapping, reducing = (restored.get_or_create_state(d) for d in DEFAULTED)
        restored.set_current_key("k")
        got = (value.value(), lst.get(), mapping.get("u"), reducing.get())
        expected = (PLAIN, [PLAIN, "b"], PLAIN, ["x", "y"])
        assert got == expected, f"SER-9 ({direction}): state without serializers read back {got}, expected {expected}"


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=4)
    | st.binary(max_size=4)
    | st.sampled_from([b"\xd6\xff", b"\xd7\xff", b"\xc7\x0c\xff"])
)
"""Scalars of IF-1, bytes holding msgpack's headers of a timestamp among them: plain data, which a reader looking for
timestamps by a search of the bytes alone would refuse."""
PLAIN_DATA = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(SCALARS, inner, max_size=3),
    max_leaves=8,
)
"""IF-1's plain data: maps keyed by any scalar (an int, bytes, None), not only by text, and ints up to 2^64 - 1."""
TUPLE_KEYS = st.lists(SCALARS, max_size=3).map(tuple)


def _holding(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`inner` placed among plain data: as a list element or as a map value."""
    others = st.lists(PLAIN_DATA, max_size=2)
    in_a_list = st.builds(lambda x, xs, at: [*xs[:at], x, *xs[at:]], inner, others, st.integers(0, 2))
    siblings = st.dictionaries(st.text(max_size=4), PLAIN_DATA, max_size=2)
    in_a_map = st.builds(lambda x, k, d: {**d, k: x}, inner, st.text(max_size=4), siblings)
    return in_a_list | in_a_map


class Colour(enum.Enum):
    """A plain `Enum`: its members are no subclass of a plain type."""

    RED = "red"


@dataclasses.dataclass(frozen=True)
class Point:
    """An object of a user's own class."""

    x: int


UNPLAIN_SCALARS = st.one_of(
    st.datetimes(timezones=st.none() | st.just(datetime.timezone.utc)),
    st.dates(),
    st.decimals(allow_nan=False),
    st.fractions(),
    st.complex_numbers(allow_nan=False),
    st.uuids(),
    st.just(Colour.RED),
    st.builds(Point, st.integers()),
    st.builds(msgpack.Timestamp, st.integers(0, 2**32 - 1), st.integers(0, 999_999_999)),
    st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=4)),
    st.integers(min_value=2**64) | st.integers(max_value=-(2**63) - 1),
    st.builds(lambda a, b: f"{a}\udcff{b}", st.text(max_size=2), st.text(max_size=2)),
)
"""Hashable values a user stores by accident that are no plain data of IF-1: datetimes (naive and aware), dates,
decimals, fractions, complex numbers, UUIDs, a plain enum member, a user's object, msgpack's own extension types, and
values of plain types msgpack cannot write: ints outside -2^63..2^64-1, text holding a lone surrogate (as
`os.fsdecode` makes of a file name's undecodable bytes). A default that converts any of them (to its `str`, a
datetime to a msgpack timestamp, text to bytes that are no UTF-8) writes what reads back as another value or not at
all."""
NOT_PLAIN_KEYS = TUPLE_KEYS | st.frozensets(SCALARS, max_size=3) | UNPLAIN_SCALARS
"""Hashable values that are no plain data, a tuple above all: what a map could be keyed by."""
NOT_PLAIN = st.recursive(
    NOT_PLAIN_KEYS | st.sets(SCALARS, max_size=3) | st.dictionaries(NOT_PLAIN_KEYS, PLAIN_DATA, min_size=1, max_size=2),
    _holding,
    max_leaves=4,
)
"""Plain data with something else somewhere (a tuple, a set, a datetime...), or a map keyed by such values, as the
value or nested at any depth."""


class Collect:
    """An aggregate whose accumulator is the list of what was added: plain data, or not, as the inputs are."""

    def create_accumulator(self) -> list[Any]:
        return []

    def add(self, value: Any, acc: list[Any]) -> list[Any]:
        return [*acc, value]

    def get_result(self, acc: list[Any]) -> list[Any]:
        return acc

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return [*a, *b]


class KeyedSide:
    """Keyed state: the backend (its current key set), a state beside the one under test holding 7, read back."""

    open = staticmethod(keyed_backend)
    kept_state = ValueStateDescriptor("kept", serializer=L)

    @classmethod
    def ready(cls, backend: Any) -> Any:
        backend.set_current_key("k")
        return backend

    @classmethod
    def keep(cls, backend: Any) -> None:
        backend.get_or_create_state(cls.kept_state).update(7)

    @classmethod
    def kept(cls, backend: Any) -> Any:
        return backend.get_or_create_state(cls.kept_state).value()


class OperatorSide:
    """Operator state, likewise: a split list holding [7]."""

    open = staticmethod(operator_backend)
    kept_state = ListStateDescriptor("kept", element_serializer=L)

    @classmethod
    def ready(cls, backend: Any) -> Any:
        return backend

    @classmethod
    def keep(cls, backend: Any) -> None:
        backend.get_list_state(cls.kept_state).add(7)

    @classmethod
    def kept(cls, backend: Any) -> Any:
        got = backend.get_list_state(cls.kept_state).get()
        return 7 if got == [7] else got


class Role(NamedTuple):
    """A serializer role a descriptor leaves out: the state holding it, how a value is written in that role, how it
    is read back and what the read gives."""

    side: type[KeyedSide] | type[OperatorSide]
    state: Callable[[Any], Any]
    write: Callable[[Any, Any], None]
    read: Callable[[Any], Any]
    expected: Callable[[Any], Any]


def _put_as_user_key(state: Any, value: Any) -> None:
    state.put(value, 1)


def _put_as_user_value(state: Any, value: Any) -> None:
    state.put("u", value)


def _entries(state: Any) -> list[Any]:
    return list(state.items())


def _user_value(state: Any) -> Any:
    return state.get("u")


def _as_the_only_entry(value: Any) -> list[Any]:
    return [(value, 1)]


def _as_is(value: Any) -> Any:
    return value


ROLES = {
    "value": Role(
        KeyedSide,
        lambda b: b.get_or_create_state(ValueStateDescriptor("defaulted")),
        lambda s, v: s.update(v),
        lambda s: s.value(),
        _as_is,
    ),
    "list-element": Role(
        KeyedSide,
        lambda b: b.get_or_create_state(ListStateDescriptor("defaulted")),
        lambda s, v: s.add_all([v, v]),
        lambda s: s.get(),
        lambda v: [v, v],
    ),
    "map-user-key": Role(
        KeyedSide,
        lambda b: b.get_or_create_state(MapStateDescriptor("defaulted", user_value_serializer=L)),
        _put_as_user_key,
        _entries,
        _as_the_only_entry,
    ),
    "map-user-value": Role(
        KeyedSide,
        lambda b: b.get_or_create_state(MapStateDescriptor("defaulted", user_key_serializer=S)),
        _put_as_user_value,
        _user_value,
        _as_is,
    ),
    "reducing-value": Role(
        KeyedSide,
        lambda b: b.get_or_create_state(ReducingStateDescriptor("defaulted", reduce_function=lambda a, b: b)),
        lambda s, v: s.add(v),
        lambda s: s.get(),
        _as_is,
    ),
    "aggregating-accumulator": Role(
        KeyedSide,
        lambda b: b.get_or_create_state(AggregatingStateDescriptor("defaulted", aggregate_function=Collect())),
        lambda s, v: s.add(v),
        lambda s: s.get(),
        lambda v: [v],
    ),
    "operator-split-element": Role(
        OperatorSide,
        lambda b: b.get_list_state(ListStateDescriptor("defaulted")),
        lambda s, v: s.add(v),
        lambda s: s.get(),
        lambda v: [v],
    ),
    "operator-union-element": Role(
        OperatorSide,
        lambda b: b.get_union_list_state(ListStateDescriptor("defaulted")),
        lambda s, v: s.update([v]),
        lambda s: s.get(),
        lambda v: [v],
    ),
    "broadcast-user-key": Role(
        OperatorSide,
        lambda b: b.get_broadcast_state(MapStateDescriptor("defaulted", user_value_serializer=L)),
        _put_as_user_key,
        _entries,
        _as_the_only_entry,
    ),
    "broadcast-user-value": Role(
        OperatorSide,
        lambda b: b.get_broadcast_state(MapStateDescriptor("defaulted", user_key_serializer=S)),
        _put_as_user_value,
        _user_value,
        _as_is,
    ),
}
EVERY_ROLE = [
    pytest.param(name, marks=[pytest.mark.capability("operator_state")] if role.side is OperatorSide else [])
    for name, role in ROLES.items()
]
"""Each role, operator state's gated on the backend declaring it."""


def _values_for(name: str, values: st.SearchStrategy[Any], keys: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A user key role takes `keys`, the others `values`, None left out: it is no element (KS-LIST-3, OS-5) and clears
    a value (KS-VALUE-3); a user value of None has tests of its own (KS-MAP-1, OS-3)."""
    return (keys if name.endswith("user-key") else values).filter(lambda v: v is not None)


class Level(enum.IntEnum):
    ONE = 1


class Whole(int):
    """An `int` subclass."""


class Real(float):
    """A `float` subclass."""


class Text(str):
    """A `str` subclass, as a user's own string type would be."""


class Blob(bytes):
    """A `bytes` subclass."""


class Items(list[Any]):
    """A `list` subclass."""


def dressed(value: Any) -> Any:
    """`value` with every map an `OrderedDict`, every list, text, bytes, float and int (bools aside) of a subclass
    of its type, and an int 1 the `IntEnum` member `Level.ONE`: subclasses of plain types, which the default writes
    as those types (SER-10)."""
    if isinstance(value, dict):
        return collections.OrderedDict((dressed(k), dressed(v)) for k, v in value.items())
    kinds: dict[type, Callable[[Any], Any]] = {
        list: lambda v: Items(dressed(x) for x in v),
        str: Text,
        bytes: Blob,
        float: Real,
        int: lambda v: Level.ONE if v == 1 else Whole(v),
    }
    dress = kinds.get(type(value))
    return value if dress is None else dress(value)


def _reads_back_equal(certification: Any, tmp_path_factory: Any, name: str, value: Any, written: Any, rid: str) -> None:
    """`written` (`value`, or `value` dressed in subclasses of plain types) written in the role `name` reads back
    equal to `value`, live and after a restore."""
    role = ROLES[name]
    expected = role.expected(value)
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("plain")))
    with role.side.open(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        state = role.state(role.side.ready(backend))
        role.write(state, written)
        got = role.read(state)
        assert got == expected, f"{rid}: {name} written as {written!r} under the msgpack default read {got!r}"
        handle = backend.snapshot(1, 0, location_for(storage)).run()
    with role.side.open(certification.new_backend(tmp_path_factory.mktemp("local")), restore=[handle]) as restored:
        got = role.read(role.state(role.side.ready(restored)))
        assert got == expected, (
            f"{rid}: {name} written as {written!r} under the msgpack default read {got!r} after a restore, "
            f"expected {expected!r}"
        )


@pytest.mark.requirement("SER-9", "SER-10", "SER-1")
@pytest.mark.parametrize("name", EVERY_ROLE)
@given(data=st.data())
def test_plain_data_of_every_shape_reads_back_equal_under_the_msgpack_default(
    certification: Any, tmp_path_factory: Any, name: str, data: st.DataObject
) -> None:
    """Plain data of IF-1 written in a role a descriptor leaves out reads back equal, live and after a restore:
    maps keyed by ints, bytes or None (msgpack's own reader refuses those unless told `strict_map_key=False`), ints
    up to 2^64 - 1, nesting; also when written as subclasses of plain types (SER-10). A user key is any scalar."""
    value = data.draw(_values_for(name, PLAIN_DATA, SCALARS), label="value")
    in_subclasses = data.draw(st.booleans(), label="written as subclasses of plain types")
    written, rid = (dressed(value), "SER-10") if in_subclasses else (value, "SER-9")
    _reads_back_equal(certification, tmp_path_factory, name, value, written, rid)


EACH_PLAIN_SCALAR: list[Any] = [1, 7, 2.5, "t", b"b"]
"""A scalar of each plain type `dressed` puts in a subclass (1 as an `IntEnum` member, other ints as an `int`
subclass): with a list and a map, one of each."""


@pytest.mark.requirement("SER-10", "SER-9")
@pytest.mark.parametrize("name", EVERY_ROLE)
def test_each_subclass_of_a_plain_type_reads_back_equal_under_the_msgpack_default(
    certification: Any, tmp_path_factory: Any, name: str
) -> None:
    """A value of every subclass of a plain type the default writes as that type (an `IntEnum` member, subclasses of
    int, float, str, bytes and list, an `OrderedDict`) reads back equal in every role a descriptor leaves out, live
    and after a restore: each scalar alone as a user key, all of them in one list and one map as any other value.
    The property above dresses what it draws, which a handful of examples may not reach for every type."""
    if name.endswith("user-key"):
        values = list(EACH_PLAIN_SCALAR)
    else:
        values = [[*EACH_PLAIN_SCALAR, list(EACH_PLAIN_SCALAR), {"m": EACH_PLAIN_SCALAR[2]}]]
    for value in values:
        _reads_back_equal(certification, tmp_path_factory, name, value, dressed(value), "SER-10")


def _refusal(exc: BaseException) -> bool:
    """The serializer's TypeError, or msgpack's `OverflowError` or `UnicodeEncodeError` for a value of a plain type it
    cannot write, or an error of the backend's whose cause (or context) one of them is (SER-10)."""
    return raised_from(exc, TypeError, OverflowError, UnicodeEncodeError)


def _write_refused(
    backend: Any, role: Role, value: Any, storage: Any, root: Path, checkpoint_id: int, call: str
) -> None:
    """Writes `value` into the role's state and snapshots into `storage` (under `root`): the write or the snapshot
    must fail with TypeError (SER-10), leaving no file under `root`; the state is cleared after."""
    state = role.state(backend)
    try:
        role.write(state, value)
    except Exception as exc:
        assert _refusal(exc), f"SER-10: {call}: the write raised {exc!r}, expected TypeError"
    else:
        try:
            handle = backend.snapshot(checkpoint_id, 0, location_for(storage, checkpoint_id)).run()
        except Exception as exc:
            assert _refusal(exc), f"SER-10: {call}: the snapshot raised {exc!r}, expected TypeError"
        else:
            raise AssertionError(
                f"SER-10: {call}: expected TypeError at the write or from the snapshot, but run() returned a "
                f"{type(handle).__name__}"
            )
        leftovers = unreferenced_files(root, None)
        assert leftovers == [], f"SER-10: the snapshot refused for {call} left files: {leftovers}"
    state.clear()


def _kept_after_refusals(certification: Any, tmp_path_factory: Any, name: str, values: list[Any]) -> None:
    """Each of `values`, written in the role `name` in turn into one backend, is refused (`_write_refused`); the
    backend goes on: its next snapshot restores the state beside them."""
    role = ROLES[name]
    root = tmp_path_factory.mktemp("unplain")
    storage = FileSystemCheckpointStorage(str(root), file_state_size_threshold=0)
    with role.side.open(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        role.side.keep(role.side.ready(backend))
        for checkpoint_id, value in enumerate(values, start=1):
            call = f"{name} holding {value!r} under the msgpack default"
            _write_refused(backend, role, value, storage, root, checkpoint_id, call)
        last = len(values) + 1
        handle = backend.snapshot(last, 0, location_for(storage, last)).run()
    with role.side.open(certification.new_backend(tmp_path_factory.mktemp("local")), restore=[handle]) as restored:
        got = role.side.kept(role.side.ready(restored))
        assert got == 7, (
            f"SER-10: after {name} holding {values!r} was refused and cleared, the next snapshot restored "
            f"kept={got!r}, not 7"
        )


@pytest.mark.requirement("SER-10", "SER-9", "KB-SNAP-1", "OS-4")
@pytest.mark.parametrize("name", EVERY_ROLE)
@given(data=st.data())
def test_a_value_that_is_not_plain_data_is_refused_by_the_msgpack_default(
    certification: Any, tmp_path_factory: Any, name: str, data: st.DataObject
) -> None:
    """Anything but plain data anywhere in a value written in a role a descriptor leaves out (a tuple above all, which
    would read back as a list, or a map keyed by tuples not at all; a set, a datetime, a decimal, a user's object, a
    msgpack extension type), fails its write or the snapshot holding it with TypeError, never a handle that reads
    back another value; a failed snapshot leaves no file, and once the value is gone the next snapshot restores the
    state beside it."""
    value = data.draw(_values_for(name, NOT_PLAIN, NOT_PLAIN_KEYS), label="value")
    _kept_after_refusals(certification, tmp_path_factory, name, [value])


EACH_KIND_NOT_PLAIN = [
    (1, "a"),
    frozenset({1}),
    datetime.datetime(2026, 11, 30, 12, 0),
    datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.timezone.utc),
    datetime.date(2026, 11, 30),
    decimal.Decimal("1.5"),
    fractions.Fraction(1, 3),
    complex(1, 2),
    uuid.UUID(int=1),
    Colour.RED,
    Point(1),
    msgpack.Timestamp(1, 0),
    msgpack.ExtType(5, b"x"),
    2**64,
    -(2**63) - 1,
    "a\udcff",
]
"""One value of each kind `NOT_PLAIN_KEYS` draws: a default that converts only one kind (a datetime to a msgpack
timestamp, a decimal to its `str`) refuses the others."""


@pytest.mark.requirement("SER-10", "KB-SNAP-1", "OS-4")
@pytest.mark.parametrize("name", EVERY_ROLE)
def test_each_kind_of_value_that_is_not_plain_data_is_refused_by_the_msgpack_default(
    certification: Any, tmp_path_factory: Any, name: str
) -> None:
    """Every kind of value that is not plain data is refused in every role a descriptor leaves out: alone, and as
    the key of a map (a user key alone), and a set as the value, in turn into one backend, which goes on after each
    refusal."""
    if name.endswith("user-key"):
        values = list(EACH_KIND_NOT_PLAIN)
    else:
        values = [v for kind in EACH_KIND_NOT_PLAIN for v in (kind, {kind: 1})] + [{1}]
    _kept_after_refusals(certification, tmp_path_factory, name, values)


LIST_ROLES = ("list-element", "operator-split-element", "operator-union-element")
"""The roles of `ROLES` that are list elements: keyed, split and union list state."""
REFUSED_ELEMENTS = [(1, "a"), {1}, 2**64, "a\udcff", msgpack.ExtType(5, b"x")]
"""Elements the msgpack default refuses (SER-10): a tuple, a set, an int msgpack cannot write, text with a lone
surrogate, an extension type."""


@pytest.mark.requirement("KS-LIST-3", "OS-5", "SER-10")
@pytest.mark.parametrize("name", [param for param in EVERY_ROLE if param.values[0] in LIST_ROLES])
@pytest.mark.parametrize("op", ["add_all", "update"])
def test_a_list_write_refused_for_one_element_appends_none_of_the_others(
    certification: Any, tmp_path_factory: Any, name: str, op: str
) -> None:
    """`add_all` or `update` of elements one of which the default refuses at the write leaves the list as it was:
    neither the elements before the refused one appended (a caller that retries the batch would hold them twice)
    nor the old ones replaced. A backend that serializes only in its snapshot raises nothing here and is not asked."""
    role = ROLES[name]
    with role.side.open(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        state = role.state(role.side.ready(backend))
        for refused in REFUSED_ELEMENTS:
            state.update(["keep"])
            batch = ["x", refused, "y"]
            try:
                getattr(state, op)(batch)
            except Exception as exc:
                call = f"{name} list state holding ['keep']: {op}({batch!r})"
                assert _refusal(exc), f"SER-10: {call} raised {exc!r}, expected TypeError"
                got = state.get()
                rid = "KS-LIST-3" if role.side is KeyedSide else "OS-5"
                assert got == ["keep"], f"{rid}: {call} raised {type(exc).__name__}, and the list became {got!r}"


# role -> (side, registration, descriptor naming the `long` serializer for the role, descriptor leaving it out, write)
WRITTEN_AS_LONGS: dict[str, tuple[Any, Any, Any, Any, Any]] = {
    "value": (
        KeyedSide,
        lambda b, d: b.get_or_create_state(d),
        ValueStateDescriptor("defaulted", serializer=L),
        ValueStateDescriptor("defaulted"),
        lambda s: s.update(5),
    ),
    "map-user-key": (
        KeyedSide,
        lambda b, d: b.get_or_create_state(d),
        MapStateDescriptor("defaulted", user_key_serializer=L, user_value_serializer=S),
        MapStateDescriptor("defaulted", user_value_serializer=S),
        lambda s: s.put(5, "five"),
    ),
    "operator-split-element": (
        OperatorSide,
        lambda b, d: b.get_list_state(d),
        ListStateDescriptor("defaulted", element_serializer=L),
        ListStateDescriptor("defaulted"),
        lambda s: s.add(5),
    ),
}


@pytest.mark.requirement("SER-7", "SER-9", "SER-3")
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=[pytest.mark.capability("operator_state")] if entry[0] is OperatorSide else [])
        for name, entry in WRITTEN_AS_LONGS.items()
    ],
)
def test_state_written_by_another_serializer_is_incompatible_with_the_msgpack_default(
    certification: Any, tmp_path: Any, name: str
) -> None:
    """State written with the `long` serializer and registered after a restore by a descriptor that leaves that
    role's serializer out: the `msgpack` default, of another id, is incompatible (SER-3), so the registration fails
    with StateMigrationError (SER-7) instead of reading 8-byte longs as msgpack."""
    side, register, written_with, defaulted, write = WRITTEN_AS_LONGS[name]
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"))
    with side.open(certification.new_backend(tmp_path / "written")) as backend:
        write(register(side.ready(backend), written_with))
        handle = backend.snapshot(1, 0, location_for(storage)).run()
    with side.open(certification.new_backend(tmp_path / "restored"), restore=[handle]) as restored:
        try:
            state = register(side.ready(restored), defaulted)
        except StateMigrationError:
            return
        raise AssertionError(
            f"SER-7: {name} written with the long serializer and registered again without one: expected "
            f"StateMigrationError (msgpack is another id, SER-3), got {type(state).__name__}"
        )


class _MakesDirectory:
    """A pickle that, when loaded, creates `path`: the trace a hostile savepoint's code would leave."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.path),))


def _hostile_encodings(traces: Path) -> dict[str, bytes]:
    """Bytes a hostile savepoint holds where the `msgpack` default is to read a value: a pickle of every protocol
    (msgpack reads none of them whole), and one array of msgpack extension types of every application code, each
    holding a pickle. A default that unpickles what msgpack cannot read, or an extension's data, leaves a trace."""
    encodings = {
        f"a pickle of protocol {p}": pickle.dumps(_MakesDirectory(traces / f"pickle-{p}"), protocol=p)
        for p in range(pickle.HIGHEST_PROTOCOL + 1)
    }
    extensions = [msgpack.ExtType(c, pickle.dumps(_MakesDirectory(traces / f"extension-{c}"))) for c in range(128)]
    encodings["extension types 0-127 each holding a pickle"] = msgpack.packb(extensions)
    stamp = msgpack.Timestamp(1_700_000_000, 5)  # msgpack decodes a timestamp (type -1) itself, past any ext_hook
    encodings["a msgpack timestamp"] = msgpack.packb(stamp)
    encodings["a msgpack timestamp in an array"] = msgpack.packb([1, stamp])
    encodings["a msgpack timestamp as a map's value"] = msgpack.packb({"t": stamp})
    return encodings


def _plain_data(value: Any) -> bool:
    """Whether `value` is IF-1's plain data, in the containers the state API hands it out in (a map's entries as
    pairs): never a msgpack `ExtType` (a tuple of its own) or `Timestamp`."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return True
    if isinstance(value, list | tuple) and not isinstance(value, msgpack.ExtType):
        return all(_plain_data(v) for v in value)
    if isinstance(value, dict):
        return all(_plain_data(k) and _plain_data(v) for k, v in value.items())
    return False


class _Verbatim(MsgpackSerializer):
    """Writes `data` for whatever it is given, under the `msgpack` default's snapshot: how the reference writes a
    hostile savepoint that names the default for bytes it never wrote."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def serialize(self, value: Any) -> bytes:
        return self.data

    def deserialize(self, data: bytes) -> Any:
        return data


class _Defaulting:
    """A backend whose state descriptors get `serializer` in every role they leave out."""

    _REGISTRATIONS = ("get_or_create_state", "get_list_state", "get_union_list_state", "get_broadcast_state")
    _ROLES = (
        "serializer",
        "element_serializer",
        "user_key_serializer",
        "user_value_serializer",
        "accumulator_serializer",
    )

    def __init__(self, backend: Any, serializer: Any) -> None:
        self.backend, self.serializer = backend, serializer

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.backend, name)
        if name not in self._REGISTRATIONS:
            return attribute

        def register(descriptor: Any, *args: Any) -> Any:
            fields = [f.name for f in dataclasses.fields(descriptor)]
            left_out = [r for r in self._ROLES if r in fields and getattr(descriptor, r) is None]
            return attribute(dataclasses.replace(descriptor, **dict.fromkeys(left_out, self.serializer)), *args)

        return register


@pytest.mark.requirement("SER-8", "IF-1")
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            name,
            marks=[pytest.mark.capability("operator_state" if role.side is OperatorSide else "canonical_savepoints")],
        )
        for name, role in ROLES.items()
    ],
)
def test_the_msgpack_default_never_unpickles_what_a_savepoint_holds(
    certification: Any, reference_backend: Any, tmp_path: Path, name: str
) -> None:
    """A savepoint whose state names the `msgpack` default holds pickles where a value is, bare or as msgpack
    extension types, or msgpack timestamps: restoring it and reading the state gives plain data or an error, and
    never runs a pickle, as a default falling back to `pickle.loads` for bytes msgpack cannot read ("state of an
    older version") would; an extension type or a timestamp, which plain data never holds, is an error."""
    role = ROLES[name]
    traces = tmp_path / "traces"
    traces.mkdir()
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    for i, (encoding, data) in enumerate(_hostile_encodings(traces).items(), start=1):
        with role.side.open(reference_backend) as writer:
            role.write(role.state(_Defaulting(role.side.ready(writer), _Verbatim(data))), b"hostile")
            options = CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)
            handle = writer.snapshot(i, 0, location_for(storage, i), options).run()
        try:
            with role.side.open(certification.new_backend(tmp_path / f"local-{i}"), restore=[handle]) as restored:
                read = role.read(role.state(role.side.ready(restored)))
                outcome = f"{read!r}"[:200]
        except Exception as exc:  # an error is what SER-8 allows; what it forbids is the trace below
            read, outcome = None, f"{type(exc).__name__}: {exc}"[:200]
        ran = sorted(p.name for p in traces.iterdir())
        call = f"{name} under the msgpack default, restored from {encoding}"
        assert ran == [], f"SER-8: {call}: expected an error or plain data, and no code run; got {outcome}, {ran} ran"
        assert _plain_data(read), f"SER-8: {call}: expected an error or plain data, got {outcome}"
