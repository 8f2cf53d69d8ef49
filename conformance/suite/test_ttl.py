"""State time-to-live on the backend's injected clock (chapter TTL): expiry, refresh, visibility, per element and
per entry, and timestamps that survive snapshots, restores and canonical savepoints between backends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from statecert.conformance.capabilities import declared, supports
from statecert.conformance.helpers import (
    create_subtasks,
    first_canonical_entry,
    keyed_backend,
    location_for,
    rewritten_canonical_stream,
    snapshot_now,
)
from statecert.conformance.suite.test_keyed_state_properties import Sequence_
from statecert.reference.checkpointing import take_snapshot
from statecert.reference.serializers import LongSerializer, MsgpackSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.errors import CheckpointFormatError, StateMigrationError
from statecert.spec.keyed_backend import CheckpointOptions, SnapshotType
from statecert.spec.metadata import CheckpointKind
from statecert.spec.state import (
    VOID_NAMESPACE,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    ManualClock,
    MapStateDescriptor,
    ReducingStateDescriptor,
    TtlConfig,
    TtlStateVisibility,
    TtlUpdateType,
    ValueStateDescriptor,
)

KEYS = StringSerializer()


def descriptor(kind: str, ttl: TtlConfig | None, name: str = "t") -> Any:
    if kind == "value":
        return ValueStateDescriptor(name, ttl=ttl, serializer=LongSerializer())
    if kind == "list":
        return ListStateDescriptor(name, ttl=ttl, element_serializer=LongSerializer())
    return MapStateDescriptor(
        name, ttl=ttl, user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer()
    )


# Per kind: write one value, read it back (None when absent or expired).
WRITE: dict[str, Callable[[Any, int], None]] = {
    "value": lambda state, v: state.update(v),
    "list": lambda state, v: state.add(v),
    "map": lambda state, v: state.put("u", v),
}
READ: dict[str, Callable[[Any], Any]] = {
    "value": lambda state: state.value(),
    "list": lambda state: (state.get() or [None])[-1],
    "map": lambda state: state.get("u"),
}
KINDS = sorted(WRITE)


def ttl_backend(state_backend: Any, clock: ManualClock, **kwargs: Any) -> Any:
    return keyed_backend(state_backend, clock=clock, **kwargs)


@pytest.mark.requirement("TTL-1", "TTL-3")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("kind", KINDS)
def test_entry_expires_after_ttl_and_is_not_returned(state_backend: Any, clock: ManualClock, kind: str) -> None:
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor(kind, TtlConfig(100)))
        WRITE[kind](state, 1)
        clock.advance(99)
        assert READ[kind](state) == 1, f"TTL-1: {kind} state expired 99 ms into a 100 ms TTL"
        clock.advance(1)
        assert READ[kind](state) is None, f"TTL-1: {kind} state not expired at 100 ms of a 100 ms TTL"


@pytest.mark.requirement("TTL-3")
@pytest.mark.capability("ttl")
def test_expired_map_entry_is_not_contained(state_backend: Any, clock: ManualClock) -> None:
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor("map", TtlConfig(100)))
        state.put("old", 1)
        clock.advance(150)
        assert not state.contains("old"), "TTL-3: contains() is true for an expired map entry"
        assert list(state.keys()) == [] and list(state.values()) == [], "TTL-3: an expired map entry was iterated"


def folding(kind: str, ttl: TtlConfig) -> Any:
    """Reducing or aggregating state of strings, concatenated in the order they are added."""
    if kind == "reducing":
        return ReducingStateDescriptor("tf", reduce_function=lambda a, b: a + b, serializer=StringSerializer(), ttl=ttl)
    return AggregatingStateDescriptor(
        "tf", aggregate_function=Sequence_(), accumulator_serializer=MsgpackSerializer(), ttl=ttl
    )


ALL_KINDS = sorted([*KINDS, "aggregating", "reducing"])


def ttl_state(kind: str, ttl: TtlConfig) -> tuple[Any, Callable[[Any], None], Callable[[Any], Any]]:
    """State of any kind with `ttl`, a write of one value to it, and a read of it (None when absent or expired)."""
    if kind in WRITE:
        return descriptor(kind, ttl), lambda state: WRITE[kind](state, 1), READ[kind]
    return folding(kind, ttl), lambda state: state.add("a"), lambda state: state.get()


def written_acted_read(
    state_backend: Any, clock: ManualClock, kind: str, update_type: TtlUpdateType, act: Callable[[Any], Any]
) -> tuple[Any, Any]:
    """State of `kind` (any of ALL_KINDS) with a 100 ms TTL written at 0 ms, `act` on it at 60 ms, read at 120 ms:
    (what `act` returned, what the read got)."""
    descriptor, write, read = ttl_state(kind, TtlConfig(100, update_type))
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor)
        write(state)
        clock.advance(60)
        acted = act(state)
        clock.advance(60)
        return acted, read(state)


@pytest.mark.requirement("TTL-2")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("update_type", list(TtlUpdateType), ids=lambda u: u.value)
def test_reads_refresh_only_with_on_read_and_write(
    state_backend: Any, clock: ManualClock, update_type: TtlUpdateType, kind: str
) -> None:
    _, _, read = ttl_state(kind, TtlConfig(100, update_type))
    first, got = written_acted_read(state_backend, clock, kind, update_type, read)
    assert first is not None, f"TTL-1: {kind} state written at 0 ms read None at 60 ms of a 100 ms TTL"
    refreshed = update_type is TtlUpdateType.ON_READ_AND_WRITE
    expected = first if refreshed else None
    assert got == expected, (
        f"TTL-2: {kind} state with {update_type.value}, read at 60 ms and 120 ms of a 100 ms TTL: "
        f"expected {expected!r} at 120 ms, got {got!r}"
    )


# Per kind: write the value WRITE wrote (1) again, as a whole.
WRITE_AGAIN: dict[str, Callable[[Any], None]] = {
    "value": lambda state: state.update(1),
    "list": lambda state: state.update([1]),
    "map": lambda state: state.put("u", 1),
}


@pytest.mark.requirement("TTL-2")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("update_type", list(TtlUpdateType), ids=lambda u: u.value)
def test_writing_the_stored_value_again_refreshes_it(
    state_backend: Any, clock: ManualClock, update_type: TtlUpdateType, kind: str
) -> None:
    """A write is a write even when it stores what is already stored: a backend may not skip it as a no-op."""
    _, got = written_acted_read(state_backend, clock, kind, update_type, WRITE_AGAIN[kind])
    assert got == 1, (
        f"TTL-2: {kind} state with {update_type.value} written at 0 ms and written the same value again at 60 ms "
        f"(100 ms TTL): at 120 ms expected 1, got {got!r}"
    )


def _first(iterable: Any) -> list[Any]:
    """Only the first entry of an iteration (stopped early)."""
    return [next(iter(iterable))]


# Map reads at 60 ms of entries u1 and u2 written at 0 ms -> what a read returns, and which user keys it read.
MAP_READS: dict[str, Callable[[Any], tuple[Any, set[str]]]] = {
    "get": lambda m: (m.get("u1"), {"u1"}),
    "contains": lambda m: (m.contains("u1"), {"u1"}),
    "items": lambda m: (got := list(m.items()), {k for k, _ in got}),
    "keys": lambda m: (got := list(m.keys()), set(got)),
    "values": lambda m: (got := list(m.values()), {f"u{v}" for v in got}),
    "iterator": lambda m: (got := list(m.iterator()), {k for k, _ in got}),
    "first-of-items": lambda m: (got := _first(m.items()), {k for k, _ in got}),
    "first-of-iterator": lambda m: (got := _first(m.iterator()), {k for k, _ in got}),
    "is_empty": lambda m: (m.is_empty(), set()),
}


@pytest.mark.requirement("TTL-2")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("read", sorted(MAP_READS))
@pytest.mark.parametrize("update_type", list(TtlUpdateType), ids=lambda u: u.value)
def test_a_map_read_refreshes_the_entries_it_returns(
    state_backend: Any, clock: ManualClock, update_type: TtlUpdateType, read: str
) -> None:
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor("map", TtlConfig(100, update_type)))
        state.put("u1", 1)
        state.put("u2", 2)
        clock.advance(60)
        _, returned = MAP_READS[read](state)
        clock.advance(60)
        refreshed = returned if update_type is TtlUpdateType.ON_READ_AND_WRITE else set()
        alive = {u for u in ("u1", "u2") if state.get(u) is not None}
        assert alive == refreshed, (
            f"TTL-2: map entries u1, u2 written at 0 ms, {read} at 60 ms ({update_type.value}, 100 ms TTL), which "
            f"returned {sorted(returned)}: expected {sorted(refreshed)} alive at 120 ms, got {sorted(alive)}"
        )


@pytest.mark.requirement("TTL-4")
@pytest.mark.capability("ttl")
def test_ttl_per_list_element_and_map_entry(state_backend: Any, clock: ManualClock) -> None:
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        lst = backend.get_or_create_state(descriptor("list", TtlConfig(100), "tl"))
        mp = backend.get_or_create_state(descriptor("map", TtlConfig(100), "tm"))
        lst.add(1)
        mp.put("old", 1)
        clock.advance(60)
        lst.add(2)
        mp.put("new", 2)
        clock.advance(60)
        assert lst.get() == [2], f"TTL-4: expected the fresh list element only, got {lst.get()!r}"
        assert list(mp.items()) == [("new", 2)], f"TTL-4: expected the fresh map entry only, got {list(mp.items())}"
        clock.advance(100)
        assert lst.get() is None and list(mp.items()) == [], "TTL-4: expired list elements or map entries returned"


# Batches of writes: the milliseconds before each, and its values (list elements; map entries under "u<value>").
BATCHES = st.lists(
    st.tuples(st.integers(0, 60), st.lists(st.integers(0, 9), min_size=1, max_size=3, unique=True)),
    min_size=1,
    max_size=5,
)


@pytest.mark.requirement("TTL-1", "TTL-4")
@pytest.mark.capability("ttl")
@given(batches=BATCHES, one_at_a_time=st.booleans())
@example(batches=[(0, [0, 1]), (60, [2])], one_at_a_time=False)  # a batch re-stamping the first one's values
def test_every_element_and_entry_expires_a_ttl_after_its_own_write(
    state_backend: Any, batches: list[tuple[int, list[int]]], one_at_a_time: bool
) -> None:
    """Batches of writes at drawn times, each an `add_all` and a `put_all` (or an `add` and a `put` per value), then
    the clock moves on in steps: at each step the list holds exactly the elements, in order, and the map exactly the
    entries whose own write is less than a TTL ago (`ON_CREATE_AND_WRITE`: the reads refresh nothing)."""
    ttl = 100
    clock = ManualClock(1_700_000_000_000)
    calls = "add, put" if one_at_a_time else "add_all, put_all"
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        lst = backend.get_or_create_state(descriptor("list", TtlConfig(ttl), "tl"))
        mp = backend.get_or_create_state(descriptor("map", TtlConfig(ttl), "tm"))
        elements: list[tuple[int, int]] = []  # (written at, value), in order
        entries: dict[str, tuple[int, int]] = {}  # user key -> (value, written at)
        for wait, values in batches:
            clock.advance(wait)
            if one_at_a_time:
                for v in values:
                    lst.add(v)
                    mp.put(f"u{v}", v)
            else:
                lst.add_all(values)
                mp.put_all({f"u{v}": v for v in values})
            elements += [(clock.now_ms(), v) for v in values]
            entries.update({f"u{v}": (v, clock.now_ms()) for v in values})
        for _ in range(7):
            now = clock.now_ms()
            alive = [v for at, v in elements if at + ttl > now]
            got = lst.get()
            assert (got or []) == alive and (got is None) == (not alive), (
                f"TTL-4: list elements written by {calls} after these waits (ms) and values {batches}, {ttl} ms TTL: "
                f"{now - elements[-1][0]} ms after the last write expected {alive or None}, got {got!r}"
            )
            alive_entries = {u: v for u, (v, at) in entries.items() if at + ttl > now}
            got_entries = dict(mp.items())
            assert got_entries == alive_entries, (
                f"TTL-4: map entries written by {calls} after these waits (ms) and values {batches}, {ttl} ms TTL: "
                f"{now - elements[-1][0]} ms after the last write expected {alive_entries}, got {got_entries}"
            )
            clock.advance(20)


@pytest.mark.requirement("TTL-4", "KS-MERGE-1")
@pytest.mark.capability("ttl")
def test_a_list_merge_moves_each_element_with_its_timestamp(state_backend: Any, clock: ManualClock) -> None:
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(
            ListStateDescriptor("tml", ttl=TtlConfig(100), element_serializer=LongSerializer()), StringSerializer()
        )
        state.set_current_namespace("source")
        state.add(1)  # written at 0 ms: expires at 100 ms
        clock.advance(60)
        state.set_current_namespace("target")
        state.add(2)  # written at 60 ms: expires at 160 ms
        clock.advance(30)
        state.merge_namespaces("target", ["source"])  # at 90 ms
        state.set_current_namespace("target")
        got = sorted(state.get() or [])
        assert got == [1, 2], f"KS-MERGE-1: merged list read {got!r} at 90 ms, expected [1, 2]"
        clock.advance(20)
        got = state.get()
        assert got == [2], (
            f"TTL-4: at 110 ms the element written at 0 ms (100 ms TTL) and merged at 90 ms must have expired; "
            f"got {got!r} (a merge is not a write: it keeps each element's timestamp)"
        )
        clock.advance(60)
        got = state.get()
        assert got is None, f"TTL-1: the element written at 60 ms read {got!r} at 170 ms of a 100 ms TTL"


# Which of a merge's namespaces hold a value written at 0 ms (expired by the merge at 110 ms) -> those written at 60 ms
# (alive): "target" and "s1", "s2" the two sources, each value its own letter.
MERGE_CASES = {
    "one-source-expired": ({"s1"}, {"target", "s2"}),
    "target-expired": ({"target"}, {"s1", "s2"}),
    "all-expired": ({"target", "s1", "s2"}, set()),
    "only-an-expired-source": ({"s1"}, set()),
}


@pytest.mark.requirement("TTL-3", "KS-MERGE-1")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("case", sorted(MERGE_CASES))
@pytest.mark.parametrize("kind", ["aggregating", "reducing"])
def test_a_merge_folds_no_expired_value(state_backend: Any, clock: ManualClock, kind: str, case: str) -> None:
    """Flink's TTL reduce and aggregate functions drop expired input from a merge as from an add; the merged
    value's timestamp is left open (Flink refreshes it when two values fold and keeps it when one is moved)."""
    expired, alive = MERGE_CASES[case]
    letters = {"target": "t", "s1": "a", "s2": "b"}
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(folding(kind, TtlConfig(100)), StringSerializer())
        for group, then in ((expired, 60), (alive, 50)):  # 0 ms, 60 ms, and the merge at 110 ms
            for ns in sorted(group):
                state.set_current_namespace(ns)
                state.add(letters[ns])
            clock.advance(then)
        state.merge_namespaces("target", ["s1", "s2"])
        state.set_current_namespace("target")
        got = state.get()
        expected = "".join(sorted(letters[ns] for ns in alive))
        assert "".join(sorted(got or "")) == expected, (
            f"TTL-3: {kind} merge_namespaces('target', ['s1', 's2']) at 110 ms of a 100 ms TTL, values of "
            f"{sorted(expired)} written at 0 ms and of {sorted(alive)} at 60 ms: expected the letters "
            f"{expected!r} in any order, got {got!r} (an expired value is never folded in)"
        )


@pytest.mark.requirement("TTL-3")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("update_type", list(TtlUpdateType), ids=lambda u: u.value)
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_return_expired_if_not_cleaned_up(
    state_backend: Any, clock: ManualClock, kind: str, update_type: TtlUpdateType
) -> None:
    """An expired entry may be returned by one read, which cleans it up: the next read returns nothing."""
    ttl = TtlConfig(100, update_type, TtlStateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP)
    descriptor, write, read = ttl_state(kind, ttl)
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor)
        write(state)
        clock.advance(500)
        first = read(state)
        assert first in (None, 1, "a"), f"TTL-3: an expired {kind} entry may be returned or not, got {first!r}"
        second = read(state)
        assert second is None, (
            f"TTL-3: the read that returned {first!r} should have cleaned the expired {kind} entry up; the next "
            f"read returned {second!r}"
        )


@pytest.mark.requirement("TTL-3", "KS-LIST-2", "KS-MAP-4", "IF-4")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("visibility", list(TtlStateVisibility), ids=lambda v: v.value)
@pytest.mark.parametrize("kind", ["list", "map"])
def test_a_read_of_only_expired_elements_leaves_no_empty_entry(
    state_backend: Any, reference_backend: Any, storage: Any, clock: ManualClock, kind: str, visibility: Any
) -> None:
    """Lists whose elements all expired, and maps whose every entry expired, are read: a read may clean them up
    (it must with `RETURN_EXPIRED_IF_NOT_CLEANED_UP`, TTL-3), but never into an entry without elements, which no
    list or map state has (KS-LIST-2, KS-MAP-4) and a canonical savepoint cannot hold (IF-4); Flink's TTL list and
    map states left such entries on the heap (FLINK-21413). The keys cleaned up are no longer listed, and the
    checkpoint and the canonical savepoint taken after the reads restore, here and in statecert's heap backend."""
    ttl = TtlConfig(100, TtlUpdateType.ON_CREATE_AND_WRITE, visibility)
    ttl_descriptor = descriptor(kind, ttl)
    keys = [f"k{i}" for i in range(10)]
    with ttl_backend(state_backend, clock) as backend:
        state = backend.get_or_create_state(ttl_descriptor)
        for i, key in enumerate(keys):
            backend.set_current_key(key)
            for j in range(1 + i % 3):
                if kind == "list":
                    state.add(j)
                else:
                    state.put(f"u{j}", j)
        clock.advance(500)
        for key in keys:
            backend.set_current_key(key)
            if kind == "list":
                state.get()
            else:
                for j in range(3):
                    state.get(f"u{j}")
        listed = sorted(backend.get_keys(ttl_descriptor.name, VOID_NAMESPACE))
        if visibility is TtlStateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP:
            assert listed == [], (
                f"TTL-3: {kind} state of 10 keys, every element expired and read (which cleans it up): "
                f"get_keys still lists {listed}"
            )
        handles = {"checkpoint": backend.snapshot(1, 0, location_for(storage, 1)).run()}
        if supports(declared(state_backend), "canonical_savepoints"):
            options = CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)
            handles["canonical savepoint"] = backend.snapshot(2, 0, location_for(storage, 2), options).run()
    restores = [("checkpoint", state_backend)]
    if "canonical savepoint" in handles:
        restores += [("canonical savepoint", state_backend), ("canonical savepoint", reference_backend)]
    for taken, into in restores:
        where = f"the {taken} after the reads, restored into {'statecert' if into is reference_backend else 'it'}"
        handle = handles[taken]
        try:
            with ttl_backend(into, clock, restore=[handle] if handle else []) as restored:
                state = restored.get_or_create_state(ttl_descriptor)
                for key in keys:
                    restored.set_current_key(key)
                    got = state.get() if kind == "list" else sorted(state.items())
                    assert got in (None, []), f"TTL-3: {kind} state of {key}, expired, {where}: read {got!r}"
        except CheckpointFormatError as exc:
            rule = "KS-LIST-2" if kind == "list" else "KS-MAP-4"
            raise AssertionError(
                f"IF-4, {rule}: {kind} state read with every element expired ({visibility.value}): {where} failed: "
                f"{exc}"
            ) from None


# A map iteration of one entry "u" -> 1, as a list, and what it may hold when it returns that entry.
MAP_ITERATIONS: dict[str, tuple[Callable[[Any], list[Any]], list[Any]]] = {
    "items": (lambda m: list(m.items()), [("u", 1)]),
    "keys": (lambda m: list(m.keys()), ["u"]),
    "values": (lambda m: list(m.values()), [1]),
    "iterator": (lambda m: list(m.iterator()), [("u", 1)]),
}


@pytest.mark.requirement("TTL-3")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("read", sorted(MAP_ITERATIONS))
def test_an_expired_map_entry_an_iteration_returns_is_cleaned_up(
    state_backend: Any, clock: ManualClock, read: str
) -> None:
    """With `RETURN_EXPIRED_IF_NOT_CLEANED_UP`, an iteration may return an expired entry once and cleans it up, as
    Flink's `TtlMapState` iterator removes what it finds expired: the next iteration and `get` return nothing."""
    iterate, returned = MAP_ITERATIONS[read]
    ttl = TtlConfig(100, TtlUpdateType.ON_CREATE_AND_WRITE, TtlStateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP)
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor("map", ttl))
        state.put("u", 1)
        clock.advance(500)
        first = iterate(state)
        assert first in ([], returned), f"TTL-3: {read}() of an expired entry gave {first!r}"
        second, got = iterate(state), state.get("u")
        assert (second, got) == ([], None), (
            f"TTL-3: {read}() gave {first!r} for an entry expired 400 ms before, then {read}() gave {second!r} and "
            f"get('u') {got!r}: expected [] and None (a read that returns an expired entry cleans it up)"
        )


@pytest.mark.requirement("TTL-1", "TTL-2", "TTL-3")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("kind", ["aggregating", "reducing"])
def test_reducing_and_aggregating_state_expire_and_start_again_from_no_value(
    state_backend: Any, clock: ManualClock, kind: str
) -> None:
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(folding(kind, TtlConfig(100)))
        state.add("a")
        clock.advance(60)
        state.add("b")  # a write: the value's timestamp is now 60 ms
        clock.advance(99)
        got = state.get()
        assert got == "ab", f"TTL-2: {kind} state added to at 0 and 60 ms read {got!r} at 159 ms of a 100 ms TTL"
        clock.advance(100)  # 259 ms: expired at 160 ms, and not read since
        state.add("c")
        got = state.get()
        assert got == "c", (
            f"TTL-3: add('c') at 259 ms to {kind} state that expired at 160 ms: expected 'c', got {got!r} "
            "(the expired value must not be folded into the new one)"
        )
        clock.advance(100)
        got = state.get()
        assert got is None, f"TTL-1: {kind} state added to at 259 ms read {got!r} at 359 ms of a 100 ms TTL"


def snapshot_of_one_write(
    state_backend: Any, storage: Any, clock: ManualClock, kind: str, ttl: TtlConfig | None
) -> Any:
    """The handle of a snapshot taken at 50 ms of state of `kind` with `ttl`, written 1 for key "k" at 0 ms."""
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        WRITE[kind](backend.get_or_create_state(descriptor(kind, ttl)), 1)
        clock.advance(50)
        return snapshot_now(backend, location_for(storage))


@pytest.mark.requirement("TTL-6")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("kind", KINDS)
def test_timestamps_survive_snapshot_and_restore(
    state_backend: Any, storage: Any, clock: ManualClock, kind: str
) -> None:
    handle = snapshot_of_one_write(state_backend, storage, clock, kind, TtlConfig(100))
    with ttl_backend(state_backend, clock, restore=[handle]) as restored:
        restored.set_current_key("k")
        state = restored.get_or_create_state(descriptor(kind, TtlConfig(100)))
        clock.advance(40)
        assert READ[kind](state) == 1, f"TTL-6: restored {kind} state expired 90 ms into a 100 ms TTL"
        clock.advance(20)
        got = READ[kind](state)
        assert got is None, (
            f"TTL-6: restored {kind} state written at 0 ms was returned at 110 ms of a 100 ms TTL (got {got!r}): "
            "the restore reset its timestamp"
        )


@pytest.mark.requirement("TTL-6", "KB-SNAP-3")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("kind", KINDS)
def test_a_refresh_after_the_snapshot_call_is_not_in_the_snapshot(
    state_backend: Any, storage: Any, clock: ManualClock, kind: str
) -> None:
    """With `ON_READ_AND_WRITE`, a read after `snapshot()` returned refreshes the entry's timestamp: a write after
    the synchronous part like any other, so the snapshot keeps the timestamp of the call. A backend that writes the
    refreshed timestamp in place ("only a timestamp", past its copy-on-write) hands the snapshot the later one, and
    the restored entry lives past its time."""
    ttl = TtlConfig(100, update_type=TtlUpdateType.ON_READ_AND_WRITE)
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor(kind, ttl))
        WRITE[kind](state, 1)  # at 0 ms
        task = backend.snapshot(1, 0, location_for(storage))
        clock.advance(60)
        assert READ[kind](state) == 1, f"TTL-2: {kind} state read at 60 ms of a 100 ms TTL"  # refreshed to 60 ms
        handle = task.run()
    clock.advance(50)  # 110 ms: expired by the timestamp of the call (0 ms), not by the refreshed one (60 ms)
    with ttl_backend(state_backend, clock, restore=[handle]) as restored:
        restored.set_current_key("k")
        got = READ[kind](restored.get_or_create_state(descriptor(kind, ttl)))
    assert got is None, (
        f"TTL-6: {kind} state written at 0 ms, snapshot at 0 ms, read (refreshed) at 60 ms after the call, restored "
        f"and read at 110 ms of a 100 ms TTL: expected it expired, got {got!r}"
    )


@pytest.mark.requirement("TTL-5")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("switch", ["enabled", "disabled"])
def test_switching_ttl_on_restore_migrates_or_is_refused(
    state_backend: Any, storage: Any, clock: ManualClock, kind: str, switch: str
) -> None:
    """Restored state registered with TTL switched on or off: migrated as Flink 2.x does (the value survives;
    switched off it never expires, switched on it expires the duration after the registration), or refused with
    `StateMigrationError` as Flink 1.x did, and then still there as it was."""
    before, after = (None, TtlConfig(100)) if switch == "enabled" else (TtlConfig(100), None)
    handle = snapshot_of_one_write(state_backend, storage, clock, kind, before)
    with ttl_backend(state_backend, clock, restore=[handle]) as restored:
        restored.set_current_key("k")
        try:
            state = restored.get_or_create_state(descriptor(kind, after))
        except StateMigrationError:
            got = READ[kind](restored.get_or_create_state(descriptor(kind, before)))
            assert got == 1, f"TTL-5: {kind} state refused with TTL {switch} reads {got!r} as it was, expected 1"
            return
        got = READ[kind](state)
        assert got == 1, f"TTL-5: {kind} state migrated with TTL {switch} reads {got!r}, expected 1"
        clock.advance(99)
        got = READ[kind](state)
        assert got == 1, f"TTL-5: {kind} state migrated with TTL {switch} at 50 ms reads {got!r} at 149 ms, expected 1"
        clock.advance(1)
        got = READ[kind](state)
        expected = None if switch == "enabled" else 1
        assert got == expected, (
            f"TTL-5: {kind} state migrated with TTL {switch} at 50 ms (100 ms TTL) reads {got!r} at 150 ms, "
            f"expected {expected!r}"
        )


@pytest.mark.requirement("TTL-5", "TTL-6")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ttl_ms", [60, 200])
def test_a_changed_duration_counts_from_the_restored_timestamp(
    state_backend: Any, storage: Any, clock: ManualClock, kind: str, ttl_ms: int
) -> None:
    """What a snapshot keeps is the last access, not an expiry instant: restored with another duration, an entry
    expires that duration after its last access (Flink's TtlValue holds lastAccessTimestamp)."""
    handle = snapshot_of_one_write(state_backend, storage, clock, kind, TtlConfig(100))
    with ttl_backend(state_backend, clock, restore=[handle]) as restored:
        restored.set_current_key("k")
        state = restored.get_or_create_state(descriptor(kind, TtlConfig(ttl_ms)))
        clock.advance(ttl_ms - 51)
        got = READ[kind](state)
        assert got == 1, (
            f"TTL-5: {kind} state written at 0 ms with a 100 ms TTL, restored with {ttl_ms} ms: expected 1 at "
            f"{ttl_ms - 1} ms, got {got!r}"
        )
        clock.advance(1)
        got = READ[kind](state)
        assert got is None, (
            f"TTL-5: {kind} state written at 0 ms with a 100 ms TTL, restored with {ttl_ms} ms: expected it expired "
            f"at {ttl_ms} ms, got {got!r}"
        )


@pytest.mark.requirement("TTL-6", "SP-1")
@pytest.mark.capability("ttl", "canonical_savepoints")
@pytest.mark.parametrize("direction", ["ours-into-reference", "reference-into-ours"])
@pytest.mark.parametrize("kind", KINDS)
def test_ttl_state_moves_between_backends_through_a_canonical_savepoint(
    state_backend: Any, reference_backend: Any, storage: Any, direction: str, kind: str
) -> None:
    writer, reader = (
        (state_backend, reference_backend) if direction == "ours-into-reference" else (reference_backend, state_backend)
    )
    clock = ManualClock(1_700_000_000_000)  # a realistic epoch time: every byte of the timestamp matters
    (subtask,) = create_subtasks(writer, KEYS, 1, 128, clock=clock)
    subtask.keyed.set_current_key("k")
    WRITE[kind](subtask.keyed.get_or_create_state(descriptor(kind, TtlConfig(1000))), 7)
    location = storage.create_checkpoint_storage("job").initialize_location_for_savepoint(1)
    pointer = take_snapshot([subtask], location, 1, 128, kind=CheckpointKind.SAVEPOINT_CANONICAL)
    subtask.dispose()
    operator = storage.load_checkpoint(pointer).operator("op")
    clock.advance(900)
    (restored,) = create_subtasks(reader, KEYS, 1, 128, clock=clock, restore_from=operator)
    restored.keyed.set_current_key("k")
    state = restored.keyed.get_or_create_state(descriptor(kind, TtlConfig(1000)))
    assert READ[kind](state) == 7, f"TTL-6 ({direction}): {kind} state expired 900 ms into a 1000 ms TTL"
    clock.advance(200)
    got = READ[kind](state)
    assert got is None, f"TTL-6 ({direction}): {kind} state returned 1100 ms into a 1000 ms TTL (got {got!r})"
    restored.dispose()


@pytest.mark.requirement("TTL-1", "TTL-6")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("ttl_ms", [2**62, 2**63 - 1], ids=["2^62", "Long.MAX_VALUE"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_ttl_as_long_as_a_long_never_wraps(state_backend: Any, storage: Any, kind: str, ttl_ms: int) -> None:
    """A TTL as long as Java's long allows, a user's "never expire": an entry written at an epoch time is there ten
    years on, live and restored. Expiry taken as last access + TTL in 64 bits wraps to the past and expires it at
    once; Flink's `TtlUtils.getExpirationTimestamp` saturates at Long.MAX_VALUE."""
    clock = ManualClock(1_700_000_000_000)
    ten_years = 10 * 365 * 86_400_000
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor(kind, TtlConfig(ttl_ms)))
        WRITE[kind](state, 7)
        clock.advance(ten_years)
        got = READ[kind](state)
        assert got == 7, f"TTL-1: {kind} state under a TTL of {ttl_ms} ms, read ten years on: expected 7, got {got!r}"
        handle = snapshot_now(backend, location_for(storage))
    clock.advance(ten_years)
    with ttl_backend(state_backend, clock, restore=[handle]) as restored:
        restored.set_current_key("k")
        got = READ[kind](restored.get_or_create_state(descriptor(kind, TtlConfig(ttl_ms))))
        assert got == 7, (
            f"TTL-6: {kind} state under a TTL of {ttl_ms} ms, restored twenty years on: expected 7, got {got!r}"
        )


@pytest.mark.requirement("TTL-1", "TTL-6")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("behind_ms", [1, 5_000], ids=["1 ms", "5 s"])
@pytest.mark.parametrize("kind", KINDS)
def test_an_entry_last_accessed_ahead_of_the_clock_expires_a_ttl_after_that_access(
    state_backend: Any, storage: Any, kind: str, behind_ms: int
) -> None:
    """Clocks go back: a job restored on a machine whose clock is behind the one that wrote its state (or after a
    clock step) reads entries whose last access lies ahead of its clock. Such an entry is not expired: it expires a TTL
    after its last access, as Flink's `TtlUtils.expired` compares that access plus the TTL with the clock. An age
    taken as a distance, or as an unsigned difference, expires every such entry at once."""
    written_at = 1_700_000_000_000
    with ttl_backend(state_backend, ManualClock(written_at)) as backend:
        backend.set_current_key("k")
        WRITE[kind](backend.get_or_create_state(descriptor(kind, TtlConfig(1000))), 7)
        handle = snapshot_now(backend, location_for(storage))
    clock = ManualClock(written_at - behind_ms)
    with ttl_backend(state_backend, clock, restore=[handle]) as restored:
        restored.set_current_key("k")
        state = restored.get_or_create_state(descriptor(kind, TtlConfig(1000)))
        got = READ[kind](state)
        call = f"{kind} state written at {written_at} ms with a 1000 ms TTL, restored at {clock.now_ms()} ms"
        assert got == 7, f"TTL-1: {call}: expected 7, got {got!r}"
        clock.advance(behind_ms + 999)
        got = READ[kind](state)
        assert got == 7, f"TTL-1: {call}, read at {clock.now_ms()} ms (999 ms after the write): expected 7, got {got!r}"
        clock.advance(1)
        got = READ[kind](state)
        assert got is None, f"TTL-1: {call}, read at {clock.now_ms()} ms (the TTL after the write): got {got!r}"


@pytest.mark.requirement("SER-5", "TTL-6")
@pytest.mark.capability("ttl", "schema_evolution")
def test_ttl_state_migrates_and_keeps_its_timestamps(state_backend: Any, storage: Any, clock: ManualClock) -> None:
    from statecert.reference.serializers import RecordSerializer

    v1 = RecordSerializer([("name", StringSerializer(), "")])
    v2 = RecordSerializer([("name", StringSerializer(), ""), ("visits", LongSerializer(), 0)])
    ttl = TtlConfig(100)
    with ttl_backend(state_backend, clock) as backend:
        backend.set_current_key("k")
        backend.get_or_create_state(ValueStateDescriptor("p", ttl=ttl, serializer=v1)).update({"name": "ada"})
        handle = snapshot_now(backend, location_for(storage))
    clock.advance(60)
    with ttl_backend(state_backend, clock, restore=[handle]) as restored:
        restored.set_current_key("k")
        state = restored.get_or_create_state(ValueStateDescriptor("p", ttl=ttl, serializer=v2))
        got = state.value()
        assert got == {"name": "ada", "visits": 0}, f"SER-5: TTL state after migration reads {got!r}"
        clock.advance(50)
        assert state.value() is None, "TTL-6: migrating TTL state reset its timestamp"


@pytest.mark.requirement("FMT-15", "IF-5", "TTL-6")
@pytest.mark.capability("ttl", "canonical_savepoints")
@pytest.mark.parametrize("kind", ["value", "list", "map"])
def test_a_ttl_entry_without_its_timestamp_is_refused_on_restore(
    state_backend: Any, reference_backend: Any, clock: ManualClock, tmp_path: Any, kind: str
) -> None:
    """A canonical savepoint of TTL state whose first value (list element, map value) was cut to 5 bytes, shorter
    than the 8-byte last-access timestamp IF-5 puts before it, stream size and checksum recorded anew: restoring it
    and reading the state raises CheckpointFormatError naming the stream, never a value read without its timestamp
    (it would never expire) or another error."""
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    ttl_descriptor = descriptor(kind, TtlConfig(60_000))
    with ttl_backend(reference_backend, clock) as backend:
        state = backend.get_or_create_state(ttl_descriptor)
        for i in range(20):
            backend.set_current_key(f"k{i}")
            WRITE[kind](state, i)
        options = CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)
        handle = backend.snapshot(1, 0, location_for(storage), options).run()

    def cut(header: Any, blocks: dict[int, list[list[Any]]]) -> Any:
        entry = first_canonical_entry(header, blocks, ttl_descriptor.name)
        if kind == "value":
            entry[3] = entry[3][:5]
        elif kind == "list":
            entry[3][0] = entry[3][0][:5]
        else:
            entry[3][0][1] = entry[3][0][1][:5]
        return header

    hostile = rewritten_canonical_stream(handle, tmp_path / "hostile-ttl", cut)
    read: list[Any] = []
    with pytest.raises(CheckpointFormatError, match="hostile-ttl"):
        with ttl_backend(state_backend, clock, restore=[hostile]) as restored:
            state = restored.get_or_create_state(ttl_descriptor)
            for i in range(20):
                restored.set_current_key(f"k{i}")
                read.append(READ[kind](state))
        raise AssertionError(f"FMT-15: TTL {kind} state with a value shorter than its timestamp restored as {read}")
