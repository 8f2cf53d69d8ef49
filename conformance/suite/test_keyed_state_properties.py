"""Keyed state semantics over generated inputs (chapter KS): maps small and large, equal-but-distinct keys,
non-commutative functions, merges with any number of sources, nested defaults, and keys whose bytes are prefixes
of each other. Each property of stored state is checked on the live backend and again after a snapshot and restore
(a returned default is not stored)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from statecert.conformance.helpers import keyed_backend, location_for, snapshot_now
from statecert.reference.serializers import LongSerializer, MsgpackSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.state import (
    VOID_NAMESPACE,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    ManualClock,
    MapStateDescriptor,
    ReducingStateDescriptor,
    TtlConfig,
    ValueStateDescriptor,
)

NS = StringSerializer()
MAP = MapStateDescriptor("m", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())
CONCAT = ReducingStateDescriptor("concat", reduce_function=lambda a, b: a + b, serializer=StringSerializer())


class Sequence_:
    """A non-commutative aggregate: the accumulator records the order of additions and merges."""

    def create_accumulator(self) -> list[str]:
        return []

    def add(self, value: str, acc: list[str]) -> list[str]:
        return [*acc, value]

    def get_result(self, acc: list[str]) -> str:
        return "".join(acc)

    def merge(self, a: list[str], b: list[str]) -> list[str]:
        return [*a, *b]


class Sum:
    """A commutative aggregate over integers."""

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: int, acc: int) -> int:
        return acc + value

    def get_result(self, acc: int) -> int:
        return acc

    def merge(self, a: int, b: int) -> int:
        return a + b


class Product:
    """A commutative aggregate whose falsy accumulator (0) is not its identity (1): an accumulator of 0 taken for
    "nothing stored" changes the result, while any order or grouping of merges gives the same."""

    def create_accumulator(self) -> int:
        return 1

    def add(self, value: int, acc: int) -> int:
        return acc * value

    def get_result(self, acc: int) -> int:
        return acc

    def merge(self, a: int, b: int) -> int:
        return a * b


class TripleMinus:
    """A non-commutative aggregate starting from 1, whose accumulator passes through 0 and negatives."""

    def create_accumulator(self) -> int:
        return 1

    def add(self, value: int, acc: int) -> int:
        return acc * 3 - value

    def get_result(self, acc: int) -> int:
        return acc

    def merge(self, a: int, b: int) -> int:
        return a * b


SEQUENCE = AggregatingStateDescriptor("seq", aggregate_function=Sequence_(), accumulator_serializer=MsgpackSerializer())


def restored_copy(certification: Any, tmp_path_factory: Any, backend: Any, **kwargs: Any) -> Any:
    """A new backend of the type under test restored from a snapshot of `backend` (which stays open)."""
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("props")))
    handle = snapshot_now(backend, location_for(storage))
    fresh = certification.new_backend(tmp_path_factory.mktemp("local"))
    return keyed_backend(fresh, restore=[handle] if handle else [], **kwargs)


def map_views(state: Any) -> dict[str, Any]:
    return {
        "items": sorted(state.items()),
        "keys": sorted(state.keys()),
        "values": sorted(state.values()),
        "iterator": sorted(state.iterator()),
    }


@pytest.mark.requirement("KS-MAP-2", "KS-MAP-3")
@given(
    size=st.one_of(st.integers(0, 20), st.integers(100, 300), st.sampled_from([1023, 1025, 2049])),
    extra=st.dictionaries(st.text(max_size=8), st.integers(-(2**63), 2**63 - 1), max_size=20),
)
@pytest.mark.heavy
def test_map_views_list_every_entry_once_small_and_large(
    certification: Any, tmp_path_factory: Any, size: int, extra: dict[str, int]
) -> None:
    entries = {f"u{i:05d}": i * 7919 for i in range(size)} | extra
    expected = {
        "items": sorted(entries.items()),
        "keys": sorted(entries),
        "values": sorted(entries.values()),
        "iterator": sorted(entries.items()),
    }
    backend_type = certification.new_backend(tmp_path_factory.mktemp("local"))
    with keyed_backend(backend_type) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(MAP)
        state.put_all(entries)
        got = map_views(state)
        for view in expected:
            assert got[view] == expected[view], (
                f"KS-MAP-2: {view}() of a map of {len(entries)} entries lists {len(got[view])}"
            )
        with restored_copy(certification, tmp_path_factory, backend) as restored:
            restored.set_current_key("k")
            got = map_views(restored.get_or_create_state(MAP))
            for view in expected:
                assert got[view] == expected[view], (
                    f"KS-MAP-2: after restore, {view}() of a map of {len(entries)} entries lists {len(got[view])}"
                )


EQUAL_BUT_DISTINCT = [1, True, 1.0, 0, False, 0.0, -0.0, math.nan, "1", b"1"]
"""Keys equal in Python (or, NaN, unequal to itself) but serialized differently, or alike: each is one key."""


def afresh(key: Any) -> Any:
    """An equal key as another object: a float read back is a new object (a NaN found by identity is not found by
    value, and -0.0 == 0.0)."""
    return float(repr(key)) if isinstance(key, float) else key


@pytest.mark.requirement("KS-3", "KB-KEYS-1", "KB-RESTORE-1")
def test_equal_but_distinct_keys_are_different_keys(certification: Any, tmp_path_factory: Any) -> None:
    """Keys, and namespaces, equal in Python but serialized differently are different: each holds its own entry,
    and `get_keys` and `get_keys_and_namespaces` list each (a backend de-duplicating them with a set lists one)."""
    value = ValueStateDescriptor("v", serializer=StringSerializer())
    windowed = ValueStateDescriptor("w", serializer=StringSerializer())
    state_backend = certification.new_backend(tmp_path_factory.mktemp("local"))
    with keyed_backend(state_backend, key_serializer=MsgpackSerializer()) as backend:
        state = backend.get_or_create_state(value)
        for key in EQUAL_BUT_DISTINCT:
            backend.set_current_key(key)
            state.update(repr(key))
        backend.set_current_key("k")
        by_namespace = backend.get_or_create_state(windowed, MsgpackSerializer())
        for namespace in EQUAL_BUT_DISTINCT:
            by_namespace.set_current_namespace(namespace)
            by_namespace.update(repr(namespace))
        copy = restored_copy(certification, tmp_path_factory, backend, key_serializer=MsgpackSerializer())
        with copy as restored:
            for when, keyed in (("KS-3: ", backend), ("KB-RESTORE-1: after restore, ", restored)):
                state = keyed.get_or_create_state(value)
                for key in reversed(EQUAL_BUT_DISTINCT):
                    keyed.set_current_key(afresh(key))
                    assert state.value() == repr(key), (
                        f"KS-3, KB-KEYS-1, KB-RESTORE-1: {when}set_current_key({key!r}).value(): expected "
                        f"{key!r}'s value, got {state.value()!r}"
                    )
                assert keyed.num_state_entries("v") == len(EQUAL_BUT_DISTINCT), (
                    f"KS-3, KB-KEYS-1, KB-RESTORE-1: {when}{len(EQUAL_BUT_DISTINCT)} distinct keys hold "
                    f"{keyed.num_state_entries('v')} entries"
                )
            listed = {  # after the reads, so that a backend conflating the keys fails KS-3 first
                'get_keys("v", VOID_NAMESPACE)': sorted(repr(k) for k in backend.get_keys("v", VOID_NAMESPACE)),
                'get_keys_and_namespaces("v")': sorted(repr(k) for k, _ in backend.get_keys_and_namespaces("v")),
                'get_keys_and_namespaces("w")': sorted(repr(n) for _, n in backend.get_keys_and_namespaces("w")),
            }
            want = sorted(repr(k) for k in EQUAL_BUT_DISTINCT)
            wrong = [f"{call}: expected {want}, got {got}" for call, got in listed.items() if got != want]
            assert not wrong, "KB-KEYS-1: " + "; ".join(wrong)


def _listed_or_refused(listing: Any, *args: Any) -> Any:
    """What `listing(*args)` yields, or "KeyError" when it raises it (KB-KEYS-1 lets a name no state has do either)."""
    try:
        return list(listing(*args))
    except KeyError:
        return "KeyError"


@pytest.mark.requirement("KB-KEYS-1", "KB-RESTORE-1")
@given(
    entries=st.dictionaries(
        st.tuples(st.text(max_size=6), st.integers(-(2**63), 2**63 - 1)), st.text(max_size=4), min_size=1, max_size=30
    ),
    absent=st.integers(-(2**63), 2**63 - 1),
)
def test_a_restored_state_lists_its_keys_before_it_is_registered_again(
    certification: Any, tmp_path_factory: Any, entries: dict[tuple[str, int], str], absent: int
) -> None:
    """`get_keys` and `get_keys_and_namespaces` list a restored state's keys and namespaces before the application
    registers the state again, and the same after it does: Flink's backends register a restored state's meta
    information while restoring. A non-windowed state's keys are listed under the void namespace (KS-NS-1). A name
    no state has lists nothing or raises `KeyError`."""
    windowed = ValueStateDescriptor("restored", serializer=StringSerializer())
    plain = ValueStateDescriptor("plain", serializer=StringSerializer())
    by_namespace: dict[Any, list[str]] = {}
    for key, namespace in entries:
        by_namespace.setdefault(namespace, []).append(key)
    by_namespace.setdefault(absent, [])
    keys = sorted({key for key, _ in entries})
    expected: dict[str, list[tuple[str, Any]]] = {
        "restored": sorted(entries, key=repr),
        "plain": [(key, VOID_NAMESPACE) for key in keys],
    }
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        for (key, namespace), value in entries.items():
            backend.set_current_key(key)
            backend.get_partitioned_state(namespace, windowed, LongSerializer()).update(value)
            backend.get_or_create_state(plain).update(value)
        with restored_copy(certification, tmp_path_factory, backend) as restored:
            for when in ("before the states are registered again", "after they are registered again"):
                if when.startswith("after"):
                    restored.get_or_create_state(windowed, LongSerializer())
                    restored.get_or_create_state(plain)
                for name, want in expected.items():
                    pairs = sorted(restored.get_keys_and_namespaces(name), key=repr)
                    assert pairs == sorted(want, key=repr), (
                        f"KB-KEYS-1: after restore, {when}, get_keys_and_namespaces({name!r}): expected "
                        f"{sorted(want, key=repr)[:5]} ({len(want)} pairs), got {pairs[:5]} ({len(pairs)} pairs)"
                    )
                for name, namespace, want_keys in [
                    *(("restored", namespace, sorted(ks)) for namespace, ks in by_namespace.items()),
                    ("plain", VOID_NAMESPACE, keys),
                ]:
                    listed = sorted(restored.get_keys(name, namespace))
                    assert listed == want_keys, (
                        f"KB-KEYS-1: after restore, {when}, get_keys({name!r}, {namespace!r}): expected {want_keys}, "
                        f"got {listed}"
                    )
            for keyed in (backend, restored):
                unknown = [
                    _listed_or_refused(keyed.get_keys, "never registered", absent),
                    _listed_or_refused(keyed.get_keys_and_namespaces, ""),
                ]
                assert all(got in ([], "KeyError") for got in unknown), (
                    f"KB-KEYS-1: get_keys('never registered', {absent}), get_keys_and_namespaces(''), of states no "
                    f"backend has: expected nothing or KeyError, got {unknown}"
                )


NONE_OR_PLAIN = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=4), st.booleans())
"""Map user values, None half the time: the msgpack default writes None."""


MAP_READS = ("contains", "get", "items", "keys", "values", "iterator", "is_empty")
"""The reads of keyed map state; broadcast state offers the first three (OS-3)."""


def map_as_read(state: Any, user_keys: Any, reads: Sequence[str] = MAP_READS) -> dict[str, Any]:
    """What each of `reads` of map (or broadcast) state gives, for `user_keys` where it takes one, in a form
    compared by value."""
    read: dict[str, Callable[[], Any]] = {
        "contains": lambda: {k: state.contains(k) for k in user_keys},
        "get": lambda: {k: state.get(k) for k in user_keys},
        "items": lambda: sorted(state.items(), key=repr),
        "keys": lambda: sorted(state.keys(), key=repr),
        "values": lambda: sorted(state.values(), key=repr),
        "iterator": lambda: sorted(state.iterator(), key=repr),
        "is_empty": lambda: state.is_empty(),
    }
    return {name: read[name]() for name in reads}


def map_expected(entries: dict[str, Any], user_keys: Any, reads: Sequence[str] = MAP_READS) -> dict[str, Any]:
    """What `map_as_read` should give for a map holding `entries`."""
    expected = {
        "contains": {k: k in entries for k in user_keys},
        "get": {k: entries.get(k) for k in user_keys},
        "items": sorted(entries.items(), key=repr),
        "keys": sorted(entries, key=repr),
        "values": sorted(entries.values(), key=repr),
        "iterator": sorted(entries.items(), key=repr),
        "is_empty": not entries,
    }
    return {name: expected[name] for name in reads}


@pytest.mark.requirement("KS-MAP-1", "KS-MAP-2", "KS-MAP-4", "KB-RESTORE-1")
@pytest.mark.parametrize(
    "ttl", [None, pytest.param(TtlConfig(100_000), marks=pytest.mark.capability("ttl"))], ids=["plain", "ttl"]
)
@given(entries=st.dictionaries(st.text(max_size=6), NONE_OR_PLAIN, min_size=1, max_size=20))
def test_a_map_user_value_of_none_is_an_entry(
    certification: Any, tmp_path_factory: Any, ttl: TtlConfig | None, entries: dict[str, Any]
) -> None:
    """`put(user_key, None)` with a user value serializer that writes None (the msgpack default) stores an entry:
    `contains` is true, `get` gives None, the views list it and the map is not empty, live and after a restore, as
    Flink's map state stores null user values. Removing the entries of None leaves the others; removing the last
    leaves the map empty (KS-MAP-4). A backend that tells a user key's presence by `get(...) is not None`, or takes
    a None value for expired, loses them."""
    descriptor = MapStateDescriptor(
        "m0", user_key_serializer=StringSerializer(), user_value_serializer=MsgpackSerializer(), ttl=ttl
    )
    clock = ManualClock(1_000_000)
    asked = [*entries, "absent" if "absent" not in entries else "absent!"]
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local")), clock=clock) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor)
        first = list(entries.items())[: len(entries) // 2]
        for user_key, value in first:
            state.put(user_key, value)
        state.put_all(dict(list(entries.items())[len(first) :]))
        expected = map_expected(entries, asked)
        got = map_as_read(state, asked)
        wrong = {read: (expected[read], got[read]) for read in expected if got[read] != expected[read]}
        assert not wrong, f"KS-MAP-1: after put of {entries}, (expected, got) per read: {wrong}"
        with restored_copy(certification, tmp_path_factory, backend, clock=clock) as restored:
            restored.set_current_key("k")
            state = restored.get_or_create_state(descriptor)
            got = map_as_read(state, asked)
            wrong = {read: (expected[read], got[read]) for read in expected if got[read] != expected[read]}
            assert not wrong, f"KB-RESTORE-1: after restore of {entries}, (expected, got) per read: {wrong}"
            left = {k: v for k, v in entries.items() if v is not None}
            for user_key in sorted(set(entries) - set(left)):
                state.remove(user_key)
            expected = map_expected(left, asked)
            got = map_as_read(state, asked)
            wrong = {read: (expected[read], got[read]) for read in expected if got[read] != expected[read]}
            assert not wrong, (
                f"KS-MAP-4: after restore of {entries} and removing the user keys of None, (expected, got) per "
                f"read: {wrong}"
            )


@pytest.mark.requirement("KS-3", "KS-MAP-1", "KB-RESTORE-1")
def test_equal_but_distinct_user_keys_are_different_entries(certification: Any, tmp_path_factory: Any) -> None:
    descriptor = MapStateDescriptor("m", user_key_serializer=MsgpackSerializer(), user_value_serializer=NS)
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor)
        for user_key in EQUAL_BUT_DISTINCT:
            state.put(user_key, repr(user_key))
        with restored_copy(certification, tmp_path_factory, backend) as restored:
            restored.set_current_key("k")
            restored_state = restored.get_or_create_state(descriptor)
            for when, read in (("KS-3: ", state), ("KB-RESTORE-1: after restore, ", restored_state)):
                for user_key in EQUAL_BUT_DISTINCT:
                    got = read.get(afresh(user_key))
                    assert got == repr(user_key), f"KS-3, KS-MAP-1, KB-RESTORE-1: {when}get({user_key!r}) gave {got!r}"
                entries = sorted(repr(v) for v in read.values())
                assert len(entries) == len(EQUAL_BUT_DISTINCT), (
                    f"KS-3, KS-MAP-1, KB-RESTORE-1: {when}{len(EQUAL_BUT_DISTINCT)} distinct user keys list "
                    f"{len(entries)} entries: {entries}"
                )


def one_java_hash(kind: str) -> st.SearchStrategy[list[Any]]:
    """Distinct keys sharing one `key_hash`: strings of as many "Aa" / "BB" blocks (Java's `String.hashCode` gives
    "Aa" and "BB" the same 2112), or longs whose high and low 32 bits XOR to one value (`Long.hashCode`)."""
    if kind == "str":
        return st.integers(1, 4).flatmap(
            lambda n: st.lists(
                st.lists(st.sampled_from(["Aa", "BB"]), min_size=n, max_size=n).map("".join),
                min_size=2,
                max_size=2**n,
                unique=True,
            )
        )
    return st.integers(0, 2**32 - 1).flatmap(
        lambda xor: st.lists(
            st.integers(0, 2**32 - 1).map(lambda high: ((high << 32) | (high ^ xor)) - (2**64 if high >> 31 else 0)),
            min_size=2,
            max_size=20,
            unique=True,
        )
    )


KEY_KINDS = {"str": StringSerializer(), "long": LongSerializer()}


@pytest.mark.requirement("KS-3", "KB-RESTORE-1")
@pytest.mark.parametrize("kind", sorted(KEY_KINDS))
@given(data=st.data())
def test_keys_of_one_hash_are_different_keys(
    certification: Any, tmp_path_factory: Any, kind: str, data: st.DataObject
) -> None:
    """Keys are told apart by their bytes, not by the hash their serializer gives for key groups (KS-3): keys of
    one `key_hash` each hold their own value, and map user keys of one hash their own entry, live and after a
    restore. A table or key cache indexed by that hash alone gives one key another's entry."""
    serializer = KEY_KINDS[kind]
    keys = data.draw(one_java_hash(kind), label="keys")
    user_keys = data.draw(one_java_hash("str"), label="user keys")
    assert len({serializer.key_hash(k) for k in keys}) == 1, (
        f"KS-3, KB-RESTORE-1: the strategy's keys share a hash: {keys}"
    )
    value = ValueStateDescriptor("v", serializer=LongSerializer())
    entries = MapStateDescriptor("m", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local")), key_serializer=serializer) as b:
        for i, key in enumerate(keys):
            b.set_current_key(key)
            b.get_or_create_state(value).update(i)
            for j, user_key in enumerate(user_keys):
                b.get_or_create_state(entries).put(user_key, 1000 * i + j)
        with restored_copy(certification, tmp_path_factory, b, key_serializer=serializer) as restored:
            for when, keyed in (("KS-3: ", b), ("KB-RESTORE-1: after restore, ", restored)):
                for i, key in reversed(list(enumerate(keys))):
                    keyed.set_current_key(key)
                    got = keyed.get_or_create_state(value).value()
                    assert got == i, (
                        f"KS-3, KB-RESTORE-1: {when}set_current_key({key!r}).value() of {keys}: expected {i}, got {got}"
                    )
                    items = dict(keyed.get_or_create_state(entries).items())
                    expected = {user_key: 1000 * i + j for j, user_key in enumerate(user_keys)}
                    assert items == expected, (
                        f"KS-3, KB-RESTORE-1: {when}set_current_key({key!r}), items() of the map: expected "
                        f"{expected}, got {items}"
                    )


@pytest.mark.requirement("KS-3", "KB-STATE-1", "KB-RESTORE-1")
@given(namespaces=one_java_hash("long"), user_keys=one_java_hash("str"))
def test_namespaces_of_one_hash_are_different_namespaces(
    certification: Any, tmp_path_factory: Any, namespaces: list[int], user_keys: list[str]
) -> None:
    """Namespaces are told apart by their bytes too (KS-3): value, list and map state of one key in long namespaces
    of one `Long.hashCode` (windows whose start times' halves XOR alike) each hold their own entry, live and after a
    restore, and `get_keys` finds the key in each. A namespace cache or table indexed by that hash alone gives one
    window another's state."""
    serializer = LongSerializer()
    value = ValueStateDescriptor("v", serializer=LongSerializer())
    elements = ListStateDescriptor("l", element_serializer=LongSerializer())
    entries = MapStateDescriptor("m", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())
    assert len({serializer.key_hash(n) for n in namespaces}) == 1, (
        f"KS-3, KB-STATE-1, KB-RESTORE-1: namespaces of one hash: {namespaces}"
    )
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        backend.set_current_key("k")
        for j, namespace in enumerate(namespaces):
            backend.get_partitioned_state(namespace, value, serializer).update(j)
            backend.get_partitioned_state(namespace, elements, serializer).add_all([j, -j])
            backend.get_partitioned_state(namespace, entries, serializer).put(user_keys[j % len(user_keys)], j)
        with restored_copy(certification, tmp_path_factory, backend) as restored:
            for when, keyed in (("KS-3: ", backend), ("KB-RESTORE-1: after restore, ", restored)):
                keyed.set_current_key("k")
                for j, namespace in reversed(list(enumerate(namespaces))):
                    got = (
                        keyed.get_partitioned_state(namespace, value, serializer).value(),
                        keyed.get_partitioned_state(namespace, elements, serializer).get(),
                        dict(keyed.get_partitioned_state(namespace, entries, serializer).items()),
                    )
                    want = (j, [j, -j], {user_keys[j % len(user_keys)]: j})
                    assert got == want, (
                        f"KS-3, KB-STATE-1, KB-RESTORE-1: {when}value, list and map state of key k in "
                        f"namespace {namespace} of {namespaces}: "
                        f"expected {want}, got {got}"
                    )
                    for name in ("v", "l", "m"):
                        keys = list(keyed.get_keys(name, namespace))
                        assert keys == ["k"], (
                            f"KS-3, KB-STATE-1, KB-RESTORE-1: {when}get_keys({name!r}, {namespace}) of "
                            f"{namespaces}: {keys}"
                        )


@pytest.mark.requirement("KB-STATE-1")
@given(
    writes=st.lists(st.tuples(st.sampled_from(["w1", "w2", "w3", ""]), st.integers(-(2**63), 2**63 - 1)), max_size=12)
)
def test_partitioned_state_selects_the_namespace_asked_for_at_every_call(
    certification: Any, tmp_path_factory: Any, writes: list[tuple[str, int]]
) -> None:
    """`get_partitioned_state(namespace, ...)` selects `namespace` at every call, for a state object it created
    before too, as Flink's `getPartitionedState` sets the namespace on its cached state each time (a window operator
    asks for its state per window and element). Each write goes through a fresh call; then every window reads its
    own latest value, in another order. A backend that selects the namespace only when it creates the state writes
    every window's values into the first one."""
    value = ValueStateDescriptor("v", serializer=LongSerializer())
    namespaces = StringSerializer()
    expected: dict[str, int | None] = dict.fromkeys(["w1", "w2", "w3", ""])
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        backend.set_current_key("k")
        for namespace, number in writes:
            backend.get_partitioned_state(namespace, value, namespaces).update(number)
            expected[namespace] = number
        got = {n: backend.get_partitioned_state(n, value, namespaces).value() for n in reversed(list(expected))}
    assert got == expected, (
        f"KB-STATE-1: get_partitioned_state(namespace, v).update(x) for (namespace, x) in {writes}, then each "
        f"namespace's value(): expected {expected}, got {got}"
    )


# A state of each of three kinds (one namespace serializer), how a step writes to it and reads it (its value, its
# list's elements, its map's entry under "u"), and what a write leaves in a model of it.
THREE_STATES = (
    ValueStateDescriptor("own-v", serializer=LongSerializer()),
    ListStateDescriptor("own-l", element_serializer=LongSerializer()),
    MapStateDescriptor("own-m", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer()),
)
WRITE_OF_KIND: tuple[Callable[[Any, int], None], ...] = (
    lambda state, v: state.update(v),
    lambda state, v: state.add(v),
    lambda state, v: state.put("u", v),
)
READ_OF_KIND: tuple[Callable[[Any], Any], ...] = (
    lambda state: state.value(),
    lambda state: state.get(),
    lambda state: state.get("u"),
)


def written(kind: int, before: Any, value: int) -> Any:
    """The model of `THREE_STATES[kind]` after `WRITE_OF_KIND[kind]` wrote `value` to what held `before`."""
    return [*(before or []), value] if kind == 1 else value


NAMESPACE_STEPS = st.lists(
    st.tuples(st.sampled_from(["namespace", "write", "read"]), st.integers(0, 2), st.sampled_from(["w1", "w2", ""])),
    max_size=25,
)


@pytest.mark.requirement("KS-NS-2", "KS-3")
@given(steps=NAMESPACE_STEPS)
@example(steps=[("namespace", 0, "w2"), ("write", 1, "w1")])  # the list written after the value's namespace moved
def test_each_state_keeps_a_current_namespace_of_its_own(
    certification: Any, tmp_path_factory: Any, steps: list[tuple[str, int, str]]
) -> None:
    """Three states (value, list, map) of one key, each created in namespace "w1"; then steps that select a
    namespace of one state, write to one state (the step's index as the value) or read one, checked against a model in
    which each state has its own current namespace; last, every state's every namespace is read. A backend holding
    one current namespace for all its states (as it holds one current key) writes and reads in the namespace that was
    selected last on any state."""
    current = ["w1", "w1", "w1"]
    stored: dict[tuple[int, str], Any] = {}  # (state, namespace) -> value, list of elements, or the map's "u"
    done: list[str] = []
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        backend.set_current_key("k")
        states = [backend.get_partitioned_state("w1", d, NS) for d in THREE_STATES]
        for step, (what, which, namespace) in enumerate(steps):
            state, name = states[which], THREE_STATES[which].name
            if what == "namespace":
                state.set_current_namespace(namespace)
                current[which] = namespace
                done.append(f"{name}.set_current_namespace({namespace!r})")
            elif what == "write":
                WRITE_OF_KIND[which](state, step)
                at = (which, current[which])
                stored[at] = written(which, stored.get(at), step)
                done.append(f"{name} <- {step}")
            else:
                got, expected = READ_OF_KIND[which](state), stored.get((which, current[which]))
                assert got == expected, (
                    f"KS-NS-2: after {done}, reading {name} (its namespace {current[which]!r}): expected "
                    f"{expected!r}, got {got!r}"
                )
                done.append(f"read {name}")
        for which, state in enumerate(states):
            for namespace in ("w1", "w2", ""):
                state.set_current_namespace(namespace)
                got, expected = READ_OF_KIND[which](state), stored.get((which, namespace))
                assert got == expected, (
                    f"KS-NS-2: after {done}, {THREE_STATES[which].name} in namespace {namespace!r}: "
                    f"expected {expected!r}, got {got!r}"
                )


HANDLE_STEPS = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from(["write", "read"]), st.sampled_from(["k0", "k1"])), max_size=25
)


@pytest.mark.requirement("KB-STATE-1", "KS-2")
@pytest.mark.parametrize("kind", [0, 1, 2], ids=["value", "list", "map"])
@given(steps=HANDLE_STEPS)
@example(steps=[(1, "write", "k1"), (0, "write", "k1"), (1, "read", "k1")])  # handle 1 read after handle 0 wrote
def test_every_handle_of_a_state_reads_what_any_of_them_wrote(
    certification: Any, tmp_path_factory: Any, kind: int, steps: list[tuple[int, str, str]]
) -> None:
    """Three handles of one state: from `get_or_create_state` twice and `get_partitioned_state` once (in one
    namespace). Steps write through one handle (the step's index as the value) or read through one, for one of two
    keys, checked against one model of the state: every handle reads what any handle last wrote. A backend handing
    out a new handle per call, each caching what it last read or wrote, serves a value another handle overwrote."""
    descriptor, write, read = THREE_STATES[kind], WRITE_OF_KIND[kind], READ_OF_KIND[kind]
    stored: dict[str, Any] = {}
    done: list[str] = []
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        backend.set_current_key("k0")
        handles = [
            backend.get_or_create_state(descriptor, NS),
            backend.get_or_create_state(descriptor, NS),
            backend.get_partitioned_state("w", descriptor, NS),
        ]
        for handle in handles:
            handle.set_current_namespace("w")
        for step, (which, what, key) in enumerate(steps):
            backend.set_current_key(key)
            if what == "write":
                write(handles[which], step)
                stored[key] = written(kind, stored.get(key), step)
                done.append(f"handle {which} <- {step} (key {key})")
            else:
                got = read(handles[which])
                assert got == stored.get(key), (
                    f"KB-STATE-1: {descriptor.name!r} after {done}, read through handle {which} for key {key!r}: "
                    f"expected {stored.get(key)!r}, got {got!r}"
                )
                done.append(f"read handle {which} (key {key})")


def check_folds_in_order(
    certification: Any, tmp_path_factory: Any, descriptor: Any, values: list[str], requirement: str
) -> None:
    """Adding `values` to reducing or aggregating state that concatenates gives them in order, live, and adding "!"
    after a snapshot and restore appends to the restored value."""
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor)
        for v in values:
            state.add(v)
        assert state.get() == "".join(values), (
            f"{requirement}: adding {values} to {descriptor.name!r}: expected {''.join(values)!r}, got {state.get()!r}"
        )
        with restored_copy(certification, tmp_path_factory, backend) as restored:
            restored.set_current_key("k")
            state = restored.get_or_create_state(descriptor)
            state.add("!")
            assert state.get() == "".join(values) + "!", (
                f"{requirement}: adding {values} to {descriptor.name!r}, restoring, then adding '!': expected "
                f"{''.join(values) + '!'!r}, got {state.get()!r}"
            )


@pytest.mark.requirement("KS-RED-1", "KB-RESTORE-1")
@given(st.lists(st.text(alphabet="abcxyz", min_size=1, max_size=3), min_size=1, max_size=12))
def test_reducing_applies_the_function_in_order(certification: Any, tmp_path_factory: Any, values: list[str]) -> None:
    check_folds_in_order(certification, tmp_path_factory, CONCAT, values, "KS-RED-1")


@pytest.mark.requirement("KS-AGG-1", "KB-RESTORE-1")
@given(st.lists(st.text(alphabet="abcxyz", min_size=1, max_size=3), min_size=1, max_size=12))
def test_aggregating_adds_in_order(certification: Any, tmp_path_factory: Any, values: list[str]) -> None:
    check_folds_in_order(certification, tmp_path_factory, SEQUENCE, values, "KS-AGG-1")


FALSY: tuple[Any, ...] = (0, 0.0, "", False, b"", [], {})
PLAIN = st.one_of(
    st.sampled_from(FALSY),
    st.integers(-2, 2),
    st.booleans(),
    st.text(max_size=2),
    st.lists(st.integers(0, 1), max_size=2),
)
MINUS = ReducingStateDescriptor("minus", reduce_function=lambda a, b: a * 3 - b, serializer=LongSerializer())
TRIPLE = AggregatingStateDescriptor("triple", aggregate_function=TripleMinus(), accumulator_serializer=LongSerializer())


@pytest.mark.requirement("KS-VALUE-1", "KS-LIST-1", "KS-MAP-1", "KS-RED-1", "KS-AGG-1", "KB-RESTORE-1")
@given(values=st.lists(PLAIN, min_size=1, max_size=6), numbers=st.lists(st.integers(-2, 2), min_size=1, max_size=8))
@example(values=list(FALSY), numbers=[0, 9, 1])  # the reduction and the accumulator each pass through 0
def test_falsy_values_are_values_like_any_other(
    certification: Any, tmp_path_factory: Any, values: list[Any], numbers: list[int]
) -> None:
    """0, 0.0, "", False, b"", [] and {} are stored values, not "nothing stored": each reads back as itself (type
    included) from value, list and map state and keeps a default from showing; a reducing value or an aggregating
    accumulator of 0 is folded into like any other (KS-RED-1: reduce(accumulated, added), never the added value
    alone), live and after a snapshot and restore."""
    value = ValueStateDescriptor("v", serializer=MsgpackSerializer(), default="the default")
    elements = ListStateDescriptor("l", element_serializer=MsgpackSerializer())
    entries = MapStateDescriptor(
        "m", user_key_serializer=MsgpackSerializer(), user_value_serializer=MsgpackSerializer()
    )
    as_map: dict[Any, Any] = {"": values[0], 0: values[-1], **{f"k{i}": v for i, v in enumerate(values)}}
    want = {
        "value": repr(values[-1]),
        "list": repr(values),
        "map": sorted((repr(k), repr(v)) for k, v in as_map.items()),
        "map get": [repr(v) for v in as_map.values()],
        "reducing": functools.reduce(lambda a, b: a * 3 - b, numbers),
        "aggregating": functools.reduce(lambda acc, v: acc * 3 - v, numbers, 1),
    }

    calls = {
        "value": f"KS-VALUE-1: value() after update() of each of {values!r}",
        "list": f"KS-LIST-1: get() after add_all({values!r})",
        "map": f"KS-MAP-2: items() after put_all({as_map!r})",
        "map get": f"KS-MAP-1: contains() and get() of each of {list(as_map)!r}",
        "reducing": f"KS-RED-1: get() after add() of each of {numbers} with reduce(a, b) = a * 3 - b",
        "aggregating": f"KS-AGG-1: get() after add() of each of {numbers} to accumulator 1 with add = acc * 3 - v",
    }

    def check(backend: Any, when: str) -> None:
        backend.set_current_key("k")
        stored = backend.get_or_create_state(entries)
        got = {
            "value": repr(backend.get_or_create_state(value).value()),
            "list": repr(backend.get_or_create_state(elements).get()),
            "map": sorted((repr(k), repr(v)) for k, v in stored.items()),
            "map get": [repr(stored.get(k)) if stored.contains(k) else "not contained" for k in as_map],
            "reducing": backend.get_or_create_state(MINUS).get(),
            "aggregating": backend.get_or_create_state(TRIPLE).get(),
        }
        wrong = [
            f"{calls[what]}{when}: expected {want[what]}, got {got[what]}" for what in want if got[what] != want[what]
        ]
        assert not wrong, "KS-VALUE-1, KS-LIST-1, KS-MAP-1, KS-RED-1, KS-AGG-1, KB-RESTORE-1: " + "; ".join(wrong)

    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        backend.set_current_key("k")
        for v in values:
            backend.get_or_create_state(value).update(v)
        backend.get_or_create_state(elements).add_all(values)
        backend.get_or_create_state(entries).put_all(as_map)
        for n in numbers:
            backend.get_or_create_state(MINUS).add(n)
            backend.get_or_create_state(TRIPLE).add(n)
        check(backend, "")
        with restored_copy(certification, tmp_path_factory, backend) as restored:
            check(restored, ", then a snapshot and restore (KB-RESTORE-1)")


@pytest.mark.requirement("KS-MERGE-1", "KS-MERGE-2", "KS-MERGE-3", "KB-RESTORE-1")
@pytest.mark.parametrize("kind", ["list", "reducing", "aggregating"])
@given(
    target=st.lists(st.integers(-3, 3), max_size=3),
    sources=st.lists(st.lists(st.integers(-3, 3), max_size=3), min_size=1, max_size=4),
)
def test_merge_with_any_number_of_sources(
    certification: Any, tmp_path_factory: Any, kind: str, target: list[int], sources: list[list[int]]
) -> None:
    """The folds multiply: the order of a merge is left open, and a value or accumulator of 0 (falsy, but not the
    identity) must be merged like any other."""
    descriptor = {
        "list": ListStateDescriptor("ml", element_serializer=LongSerializer()),
        "reducing": ReducingStateDescriptor("mr", reduce_function=lambda a, b: a * b, serializer=LongSerializer()),
        "aggregating": AggregatingStateDescriptor(
            "ma", aggregate_function=Product(), accumulator_serializer=LongSerializer()
        ),
    }[kind]
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor, NS)
        names = [f"s{i}" for i in range(len(sources))]
        for ns, values in [("t", target), *zip(names, sources, strict=True)]:
            state.set_current_namespace(ns)
            for v in values:
                state.add(v)
        state.merge_namespaces("t", (name for name in names))  # any Iterable: a one-shot generator too
        everything = target + [v for vs in sources for v in vs]
        state.set_current_namespace("t")
        got = state.get()
        expected: Any = {
            "list": sorted(everything) or None,
            "reducing": math.prod(everything) if everything else None,
            "aggregating": math.prod(everything) if everything else None,
        }[kind]
        assert (sorted(got) if kind == "list" and got else got) == expected, (
            f"KS-MERGE-1: merge of {target} with sources {sources}: expected {expected}, got {got}"
        )
        for name in names:
            state.set_current_namespace(name)
            assert state.get() is None, f"KS-MERGE-2: source {name} still holds {state.get()!r} after the merge"
        assert backend.num_state_entries(descriptor.name) == (1 if everything else 0), (
            f"KS-MERGE-2: {backend.num_state_entries(descriptor.name)} entries after merging into one namespace"
        )
        with restored_copy(certification, tmp_path_factory, backend) as copy:
            copy.set_current_key("k")
            state = copy.get_or_create_state(descriptor, NS)
            got_back = {}
            for ns in ["t", *names]:
                state.set_current_namespace(ns)
                value = state.get()
                got_back[ns] = sorted(value) if kind == "list" and value else value
            want = {"t": expected, **dict.fromkeys(names)}
            assert got_back == want, (
                f"KB-RESTORE-1: merge of {target} with sources {sources}, snapshotted and restored: expected "
                f"{want}, got {got_back}"
            )


SIZES = (0, 1, 255, 256, 65_535, 65_536, 70_001, 1 << 20)
TEXT = StringSerializer()
SIZED = (
    ValueStateDescriptor("sized-v", serializer=TEXT),
    ListStateDescriptor("sized-l", element_serializer=TEXT),
    MapStateDescriptor("sized-m", user_key_serializer=TEXT, user_value_serializer=TEXT),
)


INNER_SIZE_LIMIT = 70_001
"""The largest list element and map user key or value the test writes: past the 16-bit boundary, as a store may
limit key sizes."""


def _sized(size: int) -> tuple[str, list[str], dict[str, str]]:
    """A value of `size` bytes ("" for 0), and a list and a map with empty texts and one of `size` bytes (at most
    INNER_SIZE_LIMIT), user keys included."""
    inner = min(size, INNER_SIZE_LIMIT)
    return "x" * size, ["", "y" * inner, ""], {"": "", "k" * inner: "v" * inner, "e": ""}


def _write_sized(states: list[Any], size: int) -> None:
    value, elements, entries = states
    sized = _sized(size)
    value.update(sized[0])
    elements.add_all(sized[1])
    entries.put_all(sized[2])


def _as_read(value: Any, elements: Any, entries: Any) -> tuple[Any, ...]:
    """A value, a list and a map as `_read_sized` gives them: the map's items sorted."""
    return value, elements, sorted(entries.items())


def _read_sized(states: list[Any]) -> tuple[Any, ...]:
    value, elements, entries = states
    return _as_read(value.value(), elements.get(), dict(entries.items()))


@pytest.mark.requirement("KS-1", "KS-VALUE-1", "KS-LIST-1", "KS-MAP-1", "KB-RESTORE-1")
def test_empty_and_large_values_keep_their_size(certification: Any, tmp_path_factory: Any) -> None:
    """Values, list elements, user keys and user values of any size are values: zero bytes (the empty text under
    `StringSerializer`) read back as the empty text, not as nothing stored (a check `if not stored` on the bytes
    makes it None), and values of 64 KiB and more (up to 1 MiB; 70,001 bytes in lists and maps) come back whole
    through a snapshot (a length kept in 16 bits cuts them)."""
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        states = [backend.get_or_create_state(d) for d in SIZED]
        for size in SIZES:
            backend.set_current_key(f"k{size}")
            _write_sized(states, size)
        expected = {size: _as_read(*_sized(size)) for size in SIZES}
        with restored_copy(certification, tmp_path_factory, backend) as restored:
            for when, b in (("as written", backend), ("restored", restored)):
                b_states = [b.get_or_create_state(d) for d in SIZED]
                for size in SIZES:
                    b.set_current_key(f"k{size}")
                    got = _read_sized(b_states)
                    if got != expected[size]:
                        shown = [(part if len(repr(part)) < 80 else f"<{len(repr(part))} chars>") for part in got]
                        inner = min(size, INNER_SIZE_LIMIT)
                        pytest.fail(
                            f"KS-1: {when}, key k{size}: value 'x' * {size}, list ['', 'y' * {inner}, ''], map "
                            f"{{'': '', 'k' * {inner}: 'v' * {inner}, 'e': ''}}: got {shown}"
                        )


KEY_SIZES = (0, 1, 65_535, 65_536, 70_001)
"""Sizes of keys and namespaces, in bytes: either side of the 16-bit boundary."""


@pytest.mark.requirement("KS-3", "KB-RESTORE-1")
def test_keys_and_namespaces_of_any_size_come_back_whole(certification: Any, tmp_path_factory: Any) -> None:
    """Keys and namespaces are their serializer's bytes whatever their length, as values are (KS-1): a key or a
    namespace of 64 KiB and more is an entry of its own, live and through a snapshot (a length kept in 16 bits cuts
    it to another key, or to none)."""
    descriptor = ValueStateDescriptor("sized-keys", serializer=LongSerializer())
    expected = {("k" * k, "n" * n): i for i, (k, n) in enumerate((k, n) for k in KEY_SIZES for n in (0, 70_001))}

    def read(b: Any) -> dict[tuple[str, str], Any]:
        state = b.get_or_create_state(descriptor, NS)
        got = {}
        for key, namespace in expected:
            b.set_current_key(key)
            state.set_current_namespace(namespace)
            got[(key, namespace)] = state.value()
        return got

    def shown(entries: dict[tuple[str, str], Any]) -> dict[str, Any]:
        return {f"key of {len(k)}, namespace of {len(n)}": v for (k, n), v in entries.items()}

    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        state = backend.get_or_create_state(descriptor, NS)
        for (key, namespace), value in expected.items():
            backend.set_current_key(key)
            state.set_current_namespace(namespace)
            state.update(value)
        with restored_copy(certification, tmp_path_factory, backend) as restored:
            for when, b in (("as written", backend), ("restored", restored)):
                got = read(b)
                listed = sorted((len(k), len(n)) for k, n in b.get_keys_and_namespaces("sized-keys"))
                assert got == expected and listed == sorted((len(k), len(n)) for k, n in expected), (
                    f"KS-3: {when}: value() per key and namespace: expected {shown(expected)}, got {shown(got)}; "
                    f"get_keys_and_namespaces() lengths: {listed}"
                )


@pytest.mark.requirement("KS-VALUE-2")
def test_nested_default_is_a_fresh_copy(state_backend: Any) -> None:
    default = {"counts": [1, 2], "meta": {"tags": ["a"]}}
    descriptor = ValueStateDescriptor("d", serializer=MsgpackSerializer(), default=default)
    with keyed_backend(state_backend) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor)
        first = state.value()
        first["counts"].append(3)
        first["meta"]["tags"].append("b")
        backend.set_current_key("other")
        assert state.value() == {"counts": [1, 2], "meta": {"tags": ["a"]}}, (
            f"KS-VALUE-2: mutating a nested part of a returned default changed later reads: {state.value()!r}"
        )


@pytest.mark.requirement("KS-4", "KB-RESTORE-1")
@given(
    keys=st.lists(st.text(alphabet="ab", max_size=4), unique=True, max_size=25),
    cleared=st.sets(st.integers(0, 24)),
)
def test_entry_counts_survive_restore(
    certification: Any, tmp_path_factory: Any, keys: list[str], cleared: set[int]
) -> None:
    descriptors = [
        ValueStateDescriptor("v", serializer=LongSerializer()),
        ListStateDescriptor("l", element_serializer=LongSerializer()),
        MAP,
    ]
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        states = [backend.get_or_create_state(d) for d in descriptors]
        for i, key in enumerate(keys):
            backend.set_current_key(key)
            states[0].update(i)
            states[1].add_all([i, i])
            states[2].put_all({"x": i, "y": i})
            if i in cleared:
                states[i % 3].clear()
        before = {d.name: backend.num_state_entries(d.name) for d in descriptors}
        total = backend.num_state_entries()
        with restored_copy(certification, tmp_path_factory, backend) as restored:
            for d in descriptors:
                restored.get_or_create_state(d)
            after = {d.name: restored.num_state_entries(d.name) for d in descriptors}
            assert after == before, f"KS-4: entry counts before a snapshot {before}, after restoring it {after}"
            assert restored.num_state_entries() == total, (
                "KS-4, KB-RESTORE-1: restored.num_state_entries(): expected total"
            )


PREFIX_KEYS = ["", "a", "ab", "abc", "b", "a\x00", "ab\x00c"]


@pytest.mark.requirement("KS-4", "KS-3", "KB-RESTORE-1")
@pytest.mark.parametrize("kind", ["value", "list", "map"])
@given(cleared=st.sampled_from(PREFIX_KEYS))
def test_clearing_one_key_keeps_keys_that_share_its_prefix(
    certification: Any, tmp_path_factory: Any, kind: str, cleared: str
) -> None:
    descriptor = {
        "value": ValueStateDescriptor("v", serializer=LongSerializer()),
        "list": ListStateDescriptor("l", element_serializer=LongSerializer()),
        "map": MAP,
    }[kind]
    read = {"value": lambda s: s.value(), "list": lambda s: s.get(), "map": lambda s: sorted(s.items())}[kind]
    write = {
        "value": lambda s, i: s.update(i),
        "list": lambda s, i: s.add(i),
        "map": lambda s, i: s.put("u", i),
    }[kind]
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        state = backend.get_or_create_state(descriptor, NS)
        for ns in ("n1", "n2", "n10"):
            state.set_current_namespace(ns)
            for i, key in enumerate(PREFIX_KEYS):
                backend.set_current_key(key)
                write(state, i)
        expected = {}
        for ns in ("n1", "n2", "n10"):
            state.set_current_namespace(ns)
            for key in PREFIX_KEYS:
                backend.set_current_key(key)
                expected[(key, ns)] = read(state)
        backend.set_current_key(cleared)
        state.set_current_namespace("n1")  # "n2" differs in its last byte only, "n10" extends it
        state.clear()
        expected[(cleared, "n1")] = [] if kind == "map" else None
        with restored_copy(certification, tmp_path_factory, backend) as restored:
            restored_state = restored.get_or_create_state(descriptor, NS)
            for when, keyed, read_from in (
                ("", backend, state),
                (", snapshotted and restored,", restored, restored_state),
            ):
                for (key, ns), value in expected.items():
                    keyed.set_current_key(key)
                    read_from.set_current_namespace(ns)
                    assert read(read_from) == value, (
                        f"KS-4: after clear() of key {cleared!r} in namespace 'n1'{when} key {key!r} in {ns!r} reads "
                        f"{read(read_from)!r}, expected {value!r}"
                    )
