"""The changelog state backend (chapter CL), run with `statecert certify BACKEND --changelog`: replay order,
truncation only after a completed checkpoint, switching changelog on and off, savepoints, materialization failures.

Each test drives a program of non-commutative changes (list appends, overwrites, map puts and removes) and checks
every restored checkpoint against the state the test recorded at that checkpoint's synchronous part."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.conformance.helpers import key_group_of, keyed_backend, location_for, snapshot_now
from statecert.conformance.suite.test_keyed_state_properties import Sequence_
from statecert.conformance.suite.test_ttl import ALL_KINDS, MAP_READS, ttl_state
from statecert.conformance.suite.test_ttl import descriptor as ttl_descriptor
from statecert.reference.changelog.records import MAGIC
from statecert.reference.checkpointing import create_keyed_backend
from statecert.reference.serializers import LongSerializer, MsgpackSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.errors import InvalidStateValueError
from statecert.spec.handles import ChangelogStateBackendHandle
from statecert.spec.keyed_backend import CheckpointOptions, KeyedBackendParameters, SnapshotType
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.state import (
    VOID_NAMESPACE,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    ManualClock,
    MapStateDescriptor,
    ReducingStateDescriptor,
    SystemClock,
    TtlConfig,
    TtlStateVisibility,
    TtlUpdateType,
    ValueStateDescriptor,
)
from statecert.spec.storage import CheckpointedStateScope

pytestmark = pytest.mark.subject("changelog")

VALUE = ValueStateDescriptor("v", serializer=LongSerializer())
LIST = ListStateDescriptor("l", element_serializer=LongSerializer())
MAP = MapStateDescriptor("m", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())
REDUCING = ReducingStateDescriptor("r", reduce_function=lambda a, b: a * 3 + b, serializer=LongSerializer())
AGGREGATING = AggregatingStateDescriptor(
    "a", aggregate_function=Sequence_(), accumulator_serializer=MsgpackSerializer()
)
STATES = (VALUE, LIST, MAP, REDUCING, AGGREGATING)
KEYS = [f"k{i}" for i in range(8)]
Step = tuple[str, int, int]  # operation, key index, number

STEPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["set", "unset", "append", "extend", "replace", "put", "put_all", "remove", "reduce", "aggregate", "clear"]
        ),
        st.integers(0, 7),
        st.integers(0, 9),
    ),
    min_size=1,
    max_size=30,
)


def apply(backend: Any, step: Step) -> None:
    op, key, number = step
    backend.set_current_key(KEYS[key])
    if op == "set":
        backend.get_or_create_state(VALUE).update(number)
    elif op == "unset":
        backend.get_or_create_state(VALUE).update(None)  # clears (KS-VALUE-3)
    elif op == "append":
        backend.get_or_create_state(LIST).add(number)
    elif op == "extend":
        backend.get_or_create_state(LIST).add_all([number, -number])
    elif op == "replace":
        backend.get_or_create_state(LIST).update([number] * (number % 3))  # [] clears (KS-LIST-2)
    elif op == "put":
        backend.get_or_create_state(MAP).put(f"u{number % 3}", number)
    elif op == "put_all":
        backend.get_or_create_state(MAP).put_all({f"u{number % 3}": -number, f"u{(number + 1) % 3}": number})
    elif op == "remove":
        backend.get_or_create_state(MAP).remove(f"u{number % 3}")
    elif op == "reduce":
        backend.get_or_create_state(REDUCING).add(number)
    elif op == "aggregate":
        backend.get_or_create_state(AGGREGATING).add(str(number))
    else:
        for descriptor in STATES:
            backend.get_or_create_state(descriptor).clear()


def contents(backend: Any) -> dict[str, Any]:
    """Every key's value, list, map, reduced and aggregated value, read through the public API."""
    states = [backend.get_or_create_state(d) for d in STATES]
    out = {}
    for key in KEYS:
        if key_group_of(key, backend.number_of_key_groups) not in backend.key_group_range:
            continue  # another subtask's key
        backend.set_current_key(key)
        value, lst, mp, reduced, aggregated = states
        out[key] = (value.value(), lst.get(), sorted(mp.items()), reduced.get(), aggregated.get())
    return out


def restored(state_backend: Any, handle: Any, **kwargs: Any) -> dict[str, Any]:
    with keyed_backend(state_backend, restore=[handle] if handle is not None else [], **kwargs) as backend:
        return contents(backend)


def materialize(backend: Any, storage: Any) -> None:
    """Checkpoint 1, completed: a materialization, after which changes reach the next checkpoint as log segments
    that its restore replays (CL-2, CL-4)."""
    snapshot_now(backend, location_for(storage, 1), 1)
    backend.notify_checkpoint_complete(1)


def read_live_and_restored(
    state_backend: Any,
    storage: Any,
    descriptor: Any,
    write: Callable[[Any], Any],
    first: Callable[[Any], Any],
    final: Callable[[Any], Any],
    first_at: int,
    final_after: int,
) -> tuple[Any, Any, Any]:
    """After a materialization, `write` at 0 ms, `first` read at `first_at` ms, checkpoint 2 (the log since the
    materialization), then `final` read `final_after` ms later, live and on a backend restored from checkpoint 2 by
    replaying the log: (what `first` read, what `final` read live, what it read restored)."""
    clock = ManualClock()
    with keyed_backend(state_backend, clock=clock) as backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(descriptor)
        materialize(backend, storage)
        write(state)
        clock.advance(first_at)
        first_read = first(state)
        handle = snapshot_now(backend, location_for(storage, 2), 2)
        clock.advance(final_after)
        live = final(state)
    with keyed_backend(state_backend, clock=clock, restore=[handle]) as backend:
        backend.set_current_key("k")
        got = final(backend.get_or_create_state(descriptor))
    return first_read, live, got


def checkpoints(state_backend: Any, storage: Any, runs: list[list[Step]], complete: set[int]) -> Iterator[Any]:
    """One checkpoint after each run of steps (notifying completion only for ids in `complete`); yields
    (checkpoint id, handle, state at the synchronous part)."""
    with keyed_backend(state_backend) as backend:
        for checkpoint_id, steps in enumerate(runs, 1):
            for step in steps:
                apply(backend, step)
            expected = contents(backend)
            handle = backend.snapshot(checkpoint_id, 0, location_for(storage, checkpoint_id)).run()
            if checkpoint_id in complete:
                backend.notify_checkpoint_complete(checkpoint_id)
            else:
                backend.notify_checkpoint_aborted(checkpoint_id)
            yield checkpoint_id, handle, expected


@pytest.mark.requirement("CL-2", "CL-3", "CL-4", "CL-9")
@given(runs=st.lists(STEPS, min_size=2, max_size=4))
def test_every_checkpoint_restores_by_replaying_its_changes_in_order(
    certification: Any, tmp_path_factory: Any, runs: list[list[Step]]
) -> None:
    state_backend = certification.new_backend(tmp_path_factory.mktemp("local"))
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    for checkpoint_id, handle, expected in checkpoints(state_backend, storage, runs, set(range(1, 5))):
        assert handle is None or isinstance(handle, ChangelogStateBackendHandle), (
            f"CL-2: checkpoint {checkpoint_id} returned a {type(handle).__name__}, expected a changelog handle"
        )
        got = restored(state_backend, handle)
        assert got == expected, f"CL-4: checkpoint {checkpoint_id}: expected {expected}, restored {got}"


@pytest.mark.requirement("CL-5", "CL-4")
@given(runs=st.lists(STEPS, min_size=3, max_size=5), complete=st.sets(st.integers(1, 5)))
def test_the_log_is_truncated_only_after_a_checkpoint_with_the_materialization_completes(
    certification: Any, tmp_path_factory: Any, runs: list[list[Step]], complete: set[int]
) -> None:
    """Checkpoints complete or abort at random; every one of them still restores its own state, however far
    materializations have moved on."""
    state_backend = certification.new_backend(tmp_path_factory.mktemp("local"))
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    taken = list(checkpoints(state_backend, storage, runs, complete))
    for checkpoint_id, handle, expected in taken:
        got = restored(state_backend, handle)
        assert got == expected, (
            f"CL-5: checkpoint {checkpoint_id} (completed: {sorted(complete)}) restored {got}, expected {expected}"
        )


@pytest.mark.requirement("CL-4", "KB-RESTORE-2")
@pytest.mark.capability("rescaling")
@given(runs=st.lists(STEPS, min_size=2, max_size=3), new=st.integers(2, 4))
def test_rescaled_replay_keeps_each_key_groups_changes(
    certification: Any, tmp_path_factory: Any, runs: list[list[Step]], new: int
) -> None:
    state_backend = certification.new_backend(tmp_path_factory.mktemp("local"))
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    *_, (checkpoint_id, handle, expected) = checkpoints(state_backend, storage, runs, {1, 2, 3})
    got: dict[str, Any] = {}
    for index in range(new):
        got.update(restored(state_backend, handle, parallelism=new, index=index))
    assert got == expected, f"CL-4: checkpoint {checkpoint_id} restored at parallelism {new}: {got}"


WINDOWED = {
    "list": ListStateDescriptor("wl", element_serializer=StringSerializer()),
    "reducing": ReducingStateDescriptor("wr", reduce_function=lambda a, b: a + b, serializer=StringSerializer()),
    "aggregating": AggregatingStateDescriptor(
        "wa", aggregate_function=Sequence_(), accumulator_serializer=MsgpackSerializer()
    ),
}


@pytest.mark.requirement("CL-4", "CL-9", "KS-MERGE-2")
@pytest.mark.parametrize("kind", sorted(WINDOWED))
@given(
    target=st.lists(st.sampled_from("abc"), max_size=3),
    sources=st.lists(st.lists(st.sampled_from("xyz"), max_size=3), min_size=1, max_size=3),
)
def test_a_merge_replays_from_the_log_as_merged(
    certification: Any, tmp_path_factory: Any, kind: str, target: list[str], sources: list[list[str]]
) -> None:
    """A namespace merge after a materialization is replayed from the log as its result: the target holds what the
    live merge left (None when every namespace was empty: the wrapped state's `get_internal` reads None when
    nothing is stored, CL-9) and the sources nothing."""
    descriptor = WINDOWED[kind]
    state_backend = certification.new_backend(tmp_path_factory.mktemp("local"))
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    names = [f"s{i}" for i in range(len(sources))]
    namespaces = ["t", *names]
    with keyed_backend(state_backend) as backend:
        backend.set_current_key("k")
        state = backend.get_partitioned_state("t", descriptor, StringSerializer())
        state.add("m")  # materialized at checkpoint 1, then cleared in the log
        materialize(backend, storage)
        state.clear()
        for namespace, values in zip(namespaces, [target, *sources], strict=True):
            state.set_current_namespace(namespace)
            for value in values:
                state.add(value)
        state.merge_namespaces("t", names)
        expected = {}
        for namespace in namespaces:
            state.set_current_namespace(namespace)
            expected[namespace] = state.get()
        handle = snapshot_now(backend, location_for(storage, 2), 2)
    with keyed_backend(state_backend, restore=[handle]) as backend:
        backend.set_current_key("k")
        state = backend.get_partitioned_state("t", descriptor, StringSerializer())
        got = {}
        for namespace in namespaces:
            state.set_current_namespace(namespace)
            got[namespace] = state.get()
    ids = ["CL-4"]
    if expected["t"] is None and got["t"] is not None:
        ids.append("CL-9")  # the log recorded an empty merge as a value: get_internal read one where none is stored
    if any(got[name] is not None for name in names):
        ids.append("KS-MERGE-2")
    assert got == expected, (
        f"{', '.join(ids)}: {kind} state {target} merged with sources {sources}: live after the merge {expected}, "
        f"restored from the log {got}"
    )


@pytest.mark.requirement("CL-4", "TTL-4")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("update", list(TtlUpdateType), ids=lambda u: u.value)
@pytest.mark.parametrize("sources_hold", ["values", "nothing"])
@pytest.mark.parametrize("kind", ["list", "reducing"])
def test_a_merge_keeps_its_ttl_through_the_log(
    state_backend: Any, storage: Any, kind: str, sources_hold: str, update: TtlUpdateType
) -> None:
    """A merge replayed from the log leaves each TTL timestamp as the live merge did: a list merge moves each element
    with its timestamp (TTL-4), and a merge whose sources were empty leaves the target as it was. State written at
    0 ms with a 100 ms TTL, merged at 90 ms, checkpointed, then read at 110 ms live and restored."""
    descriptor, write, _ = ttl_state(kind, TtlConfig(100, update))
    clock = ManualClock()
    with keyed_backend(state_backend, clock=clock) as backend:
        backend.set_current_key("k")
        state = backend.get_partitioned_state("target", descriptor, StringSerializer())
        write(state)
        materialize(backend, storage)
        if sources_hold == "values":
            state.set_current_namespace("source")
            write(state)
        clock.advance(90)
        state.merge_namespaces("target", ["source"])
        handle = snapshot_now(backend, location_for(storage, 2), 2)
        clock.advance(20)
        state.set_current_namespace("target")
        live = state.get()
    with keyed_backend(state_backend, clock=clock, restore=[handle]) as backend:
        backend.set_current_key("k")
        got = backend.get_partitioned_state("target", descriptor, StringSerializer()).get()
    if kind == "list":
        assert live is None, (
            f"TTL-4: list elements written at 0 ms and merged at 90 ms read {live!r} at 110 ms of a 100 ms TTL "
            f"({update.value}; a merge is not a write)"
        )
    assert got == live, (
        f"CL-4: {kind} state merged at 90 ms from a source holding {sources_hold} ({update.value}): at 110 ms it "
        f"reads {live!r} live and {got!r} restored from the log"
    )


@pytest.mark.requirement("CL-4", "TTL-2")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("update", list(TtlUpdateType), ids=lambda u: u.value)
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_a_read_replays_with_the_ttl_refresh_it_made(
    state_backend: Any, storage: Any, kind: str, update: TtlUpdateType
) -> None:
    """Written at 0 ms with a 100 ms TTL, read at 80 ms, checkpointed, read at 150 ms live and restored: with
    ON_READ_AND_WRITE the read at 80 ms refreshed the entry, so both still hold it; with ON_CREATE_AND_WRITE it
    expired at 100 ms in both."""
    descriptor, write, read = ttl_state(kind, TtlConfig(100, update))
    _, live, got = read_live_and_restored(state_backend, storage, descriptor, write, read, read, 80, 70)
    refreshed = update is TtlUpdateType.ON_READ_AND_WRITE
    assert (live is not None) == refreshed, (
        f"TTL-2: {kind} state written at 0 ms and read at 80 ms ({update.value}, 100 ms TTL) reads {live!r} at 150 ms"
    )
    assert got == live, (
        f"CL-4: {kind} state written at 0 ms and read at 80 ms ({update.value}, 100 ms TTL): at 150 ms it reads "
        f"{live!r} live and {got!r} restored from the log"
    )


@pytest.mark.requirement("CL-4", "TTL-3")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("update", list(TtlUpdateType), ids=lambda u: u.value)
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_a_read_that_cleans_up_an_expired_entry_replays_its_cleanup(
    state_backend: Any, storage: Any, kind: str, update: TtlUpdateType
) -> None:
    """Written at 0 ms with a 100 ms TTL that returns expired entries until cleaned up, read at 150 ms (which may
    return the expired entry once, and cleans it up), checkpointed: read again, the live state and the one restored
    from the log both hold nothing."""
    descriptor, write, read = ttl_state(
        kind, TtlConfig(100, update, TtlStateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP)
    )
    first, live, got = read_live_and_restored(state_backend, storage, descriptor, write, read, read, 150, 0)
    assert live is None, (
        f"TTL-3: {kind} state written at 0 ms (100 ms TTL, {update.value}, return expired if not cleaned up) read "
        f"{first!r} at 150 ms and then {live!r}: the first read did not clean it up"
    )
    assert got is None, (
        f"CL-4: {kind} state written at 0 ms (100 ms TTL, {update.value}, return expired if not cleaned up) and read "
        f"at 150 ms, which cleaned it up: restored from the log it reads {got!r}"
    )


@pytest.mark.requirement("CL-4", "KS-RED-2")
@pytest.mark.capability("ttl")
def test_a_none_added_to_reducing_state_replays_as_no_change(state_backend: Any, storage: Any) -> None:
    """Reducing state written at 0 ms with a 100 ms TTL (ON_CREATE_AND_WRITE), None added at 60 ms, which leaves
    the value unchanged whether the backend raises or ignores it (KS-RED-2), checkpointed: at 120 ms the live state
    and the one restored from the log both hold nothing, the value expired at 100 ms."""
    descriptor, write, read = ttl_state("reducing", TtlConfig(100, TtlUpdateType.ON_CREATE_AND_WRITE))

    def add_none(state: Any) -> None:
        with contextlib.suppress(InvalidStateValueError):
            state.add(None)

    _, live, got = read_live_and_restored(state_backend, storage, descriptor, write, add_none, read, 60, 60)
    assert live is None, (
        f"KS-RED-2: reducing state written at 0 ms (100 ms TTL, on create and write), None added at 60 ms: at 120 ms "
        f"it reads {live!r}, the add refreshed it"
    )
    assert got is None, (
        f"CL-4: reducing state written at 0 ms (100 ms TTL, on create and write), None added at 60 ms: at 120 ms it "
        f"reads nothing live and {got!r} restored from the log"
    )


@pytest.mark.requirement("CL-4", "TTL-2")
@pytest.mark.capability("ttl")
@pytest.mark.parametrize("read", sorted(MAP_READS))
def test_a_map_read_replays_with_the_ttl_refresh_it_made(state_backend: Any, storage: Any, read: str) -> None:
    """Map entries u1 and u2 written at 0 ms with a 100 ms TTL (ON_READ_AND_WRITE), read at 60 ms (one entry, every
    entry, an iteration stopped after one, `is_empty`), checkpointed: at 120 ms the restored map holds the entries
    the live one does."""
    descriptor = ttl_descriptor("map", TtlConfig(100, TtlUpdateType.ON_READ_AND_WRITE))
    _, live, got = read_live_and_restored(
        state_backend,
        storage,
        descriptor,
        lambda state: (state.put("u1", 1), state.put("u2", 2)),
        MAP_READS[read],
        lambda state: {u for u in ("u1", "u2") if state.get(u) is not None},
        60,
        60,
    )
    assert got == live, (
        f"CL-4: map entries written at 0 ms, {read} at 60 ms (on-read-and-write, 100 ms TTL): at 120 ms "
        f"{sorted(live)} are alive live and {sorted(got)} restored from the log"
    )


@pytest.mark.requirement("CL-4", "KS-MAP-2", "TTL-2")
@pytest.mark.capability("ttl")
def test_an_iteration_logs_under_the_key_it_iterates(state_backend: Any, storage: Any) -> None:
    """Map entries of k1 and k2 written at 0 ms (100 ms TTL, ON_READ_AND_WRITE); at 60 ms an iterator over k1 returns
    an entry and removes the next while k2 is current. At 120 ms the restored map holds what the live one does: k1's
    refreshed entry, and nothing of k2, whose entries expired."""
    descriptor = ttl_descriptor("map", TtlConfig(100, TtlUpdateType.ON_READ_AND_WRITE))
    clock = ManualClock()
    keys = ("k1", "k2")
    with keyed_backend(state_backend, clock=clock) as backend:
        state = backend.get_or_create_state(descriptor)
        materialize(backend, storage)
        for key in keys:
            backend.set_current_key(key)
            state.put_all({"a": 1, "b": 2})
        clock.advance(60)
        backend.set_current_key("k1")
        iterator = state.iterator()
        backend.set_current_key("k2")
        next(iterator)
        next(iterator)
        iterator.remove()
        handle = snapshot_now(backend, location_for(storage, 2), 2)
        clock.advance(60)
        live = {}
        for key in keys:
            backend.set_current_key(key)
            live[key] = sorted(state.items())
    with keyed_backend(state_backend, clock=clock, restore=[handle]) as backend:
        restored_state = backend.get_or_create_state(descriptor)
        got = {}
        for key in keys:
            backend.set_current_key(key)
            got[key] = sorted(restored_state.items())
    assert live["k2"] == [] and len(live["k1"]) == 1, f"KS-MAP-2: at 120 ms the live map holds {live}"
    assert got == live, f"CL-4: at 120 ms the live map holds {live} and the one restored from the log {got}"


def _plain(state_backend: Any, storage: Any, steps: list[Step], kind: SnapshotType) -> tuple[Any, dict[str, Any]]:
    """A checkpoint or savepoint of the wrapped backend alone (changelog off)."""
    with keyed_backend(state_backend.delegate) as backend:
        for step in steps:
            apply(backend, step)
        options = CheckpointOptions(kind)
        return backend.snapshot(1, 0, location_for(storage, 1), options).run(), contents(backend)


@pytest.mark.requirement("CL-6", "CL-7")
@pytest.mark.parametrize(
    "kind",
    [
        SnapshotType.CHECKPOINT,
        pytest.param(SnapshotType.SAVEPOINT_CANONICAL, marks=pytest.mark.capability("canonical_savepoints")),
    ],
)
def test_changelog_switches_on_and_off_through_checkpoints_and_savepoints(
    state_backend: Any, storage: Any, kind: SnapshotType
) -> None:
    steps = [(op, k, n) for n, (op, k) in enumerate([("append", 1), ("set", 2), ("put", 3), ("reduce", 1)] * 5)]
    plain, expected = _plain(state_backend, storage, steps, kind)
    more = [("append", 1, 99), ("remove", 3, 5), ("reduce", 2, 4)]
    with keyed_backend(state_backend, restore=[plain]) as on:  # switched on
        assert contents(on) == expected, f"CL-6: a {kind.value} without changelog restored into changelog"
        for step in more:
            apply(on, step)
        expected = contents(on)
        first = on.snapshot(2, 0, location_for(storage, 2)).run()
        on.notify_checkpoint_complete(2)
        for step in more:
            apply(on, step)
        expected_second = contents(on)
        second = on.snapshot(3, 0, location_for(storage, 3), CheckpointOptions(kind)).run()
    assert isinstance(first, ChangelogStateBackendHandle) and not first.changelog, (
        "CL-6: the first checkpoint after a restore is a materialization without log segments"
    )
    if kind is not SnapshotType.CHECKPOINT:
        assert not isinstance(second, ChangelogStateBackendHandle), "CL-7: a savepoint is the wrapped backend's own"
    for handle, want in ((first, expected), (second, expected_second)):
        params = KeyedBackendParameters(
            "job", "op", StringSerializer(), 128, KeyGroupRange(0, 127), (handle,), SystemClock(), None
        )
        off = create_keyed_backend(state_backend.delegate, params)  # switched off again
        try:
            got = contents(off)
        finally:
            off.dispose()
        assert got == want, f"CL-6: a changelog {type(handle).__name__} restored without changelog: {got}"


class _FailingMaterializations:
    """Storage that refuses every stream but changelog segments: materializations fail, the log uploads (a
    fault-injecting factory over the real one)."""

    def __init__(self, factory: Any) -> None:
        self._factory = factory

    def create_checkpoint_state_output_stream(self, scope: CheckpointedStateScope) -> Any:
        return _SegmentsOnly(self._factory.create_checkpoint_state_output_stream(scope))


class _SegmentsOnly:
    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._first = True

    def write(self, data: bytes) -> int:
        if self._first and not bytes(data).startswith(MAGIC):
            self._stream.discard()
            raise OSError("injected: the storage refuses this stream")
        self._first = False
        return int(self._stream.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __enter__(self) -> _SegmentsOnly:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stream.__exit__(*exc)


@pytest.mark.requirement("CL-8")
def test_failed_materializations_are_tolerated_up_to_the_limit(state_backend: Any, storage: Any) -> None:
    """Materialization at every checkpoint with Flink's default limit of 3 failures in a row, whatever interval
    and limit the certification configured: checkpoints 2-4 reference the first materialization and restore;
    checkpoint 5 fails."""
    state_backend = dataclasses.replace(
        state_backend,
        settings=dataclasses.replace(state_backend.settings, materialize_interval_ms=0, max_failures_allowed=3),
    )
    with keyed_backend(state_backend) as backend:
        apply(backend, ("append", 0, 1))
        materialize(backend, storage)
        handles = {}
        for checkpoint_id in (2, 3, 4):
            apply(backend, ("append", 0, checkpoint_id))
            faulty = _FailingMaterializations(location_for(storage, checkpoint_id))
            handles[checkpoint_id] = (backend.snapshot(checkpoint_id, 0, faulty).run(), contents(backend))
        apply(backend, ("append", 0, 5))
        with pytest.raises(Exception) as failure:
            backend.snapshot(5, 0, _FailingMaterializations(location_for(storage, 5))).run()
        assert "injected" in str(failure.value) or failure.value.__cause__ is not None, (
            "CL-8: expected 'injected' in str(failure.value) or failure.value.__cause__ is not None"
        )
    for checkpoint_id, (handle, expected) in handles.items():
        assert restored(state_backend, handle) == expected, (
            f"CL-8: checkpoint {checkpoint_id}, taken while materializations failed, did not restore its state"
        )


@pytest.mark.requirement("CL-2")
def test_materializations_and_segments_live_in_the_shared_scope(state_backend: Any, storage: Any) -> None:
    handles = [h for _, h, _ in checkpoints(state_backend, storage, [[("append", 1, 1)]] * 3, {1, 2, 3})]
    last = handles[-1]
    assert isinstance(last, ChangelogStateBackendHandle), "CL-2: expected isinstance(last, ChangelogStateBackendHandle)"
    paths = [getattr(s.delegate, "path", None) for s in last.changelog]
    for part in last.materialized:
        paths += [getattr(getattr(part, "delegate", None), "path", None)]
    outside = [p for p in paths if p is not None and "/shared/" not in p]
    assert not outside, f"CL-2: changelog files outside the shared scope: {outside}"


@pytest.mark.requirement("CL-4", "KB-KEYS-1")
def test_keys_of_a_void_namespace_restore(state_backend: Any, storage: Any) -> None:
    """A smoke check that replay registers namespaces as written (the void namespace of non-windowed state)."""
    *_, (_, handle, expected) = checkpoints(state_backend, storage, [[("set", 0, 1)], [("set", 1, 2)]], {1, 2})
    with keyed_backend(state_backend, restore=[handle]) as backend:
        backend.get_or_create_state(VALUE)
        assert sorted(backend.get_keys("v", VOID_NAMESPACE)) == sorted(k for k, v in expected.items() if v[0]), (
            "CL-4, KB-KEYS-1: sorted(backend.get_keys('v', VOID_NAMESPACE)): expected sorted((k for k, v in "
            "expected.items() if v[0]))"
        )


@pytest.mark.requirement("CL-4", "CL-6", "SER-5", "KB-RESTORE-3")
@pytest.mark.capability("schema_evolution")
def test_a_restored_state_registered_after_the_first_materialization_with_a_new_serializer_replays(
    state_backend: Any, storage: Any
) -> None:
    """A restored state that the job registers only after the first checkpoint since the restore (an operator
    registering its state on its first element), with a serializer compatible after migration: that checkpoint's
    materialization holds the state's old bytes (KB-RESTORE-3), the log after it the new serializer's, and a restore
    migrates the materialized state before it replays the log onto it (SER-5)."""
    from statecert.conformance.suite.test_serializer_compatibility import VersionedCount

    old = ValueStateDescriptor("counts", serializer=VersionedCount(1))
    new = ValueStateDescriptor("counts", serializer=VersionedCount(2))
    with keyed_backend(state_backend) as first:
        state = first.get_or_create_state(old)
        for i, key in enumerate(KEYS):
            first.set_current_key(key)
            state.update(i)
        handle = snapshot_now(first, location_for(storage, 1), 1)
    with keyed_backend(state_backend, restore=[handle]) as second:
        snapshot_now(second, location_for(storage, 2), 2)  # the materialization (CL-6), "counts" not registered
        second.notify_checkpoint_complete(2)
        state = second.get_or_create_state(new)
        expected = {}
        for i, key in enumerate(KEYS):
            second.set_current_key(key)
            if i % 2 == 0:
                state.update(state.value() + 100)
            expected[key] = state.value()
        later = snapshot_now(second, location_for(storage, 3), 3)
    with keyed_backend(state_backend, restore=[later]) as restored:
        state = restored.get_or_create_state(new)
        got = {}
        for key in KEYS:
            restored.set_current_key(key)
            got[key] = state.value()
    assert got == expected, (
        f"CL-4, SER-5: checkpoint 3, whose log describes 'counts' with version 2 of its serializer over a "
        f"materialization holding version 1's bytes: expected {expected}, restored {got}"
    )
