"""The keyed state backend: snapshots, restore, migration on restore, lifecycle (chapter KB, SER-5..7, TTL-5)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import pytest

from statecert.conformance.helpers import (
    LOCAL_DIR,
    REJECTED,
    FailingStreamFactory,
    assert_snapshot_fails,
    end_a_snapshot_at,
    files_of,
    key_group_of,
    keyed_backend,
    listed_stream_handles,
    location_for,
    rebuilt_handle,
    run_beside_a_twin,
    run_while,
    snapshot_now,
    unreferenced_files,
)
from statecert.conformance.interleaving import Interleaving
from statecert.reference.serializers import (
    EnumSerializer,
    LongSerializer,
    MsgpackSerializer,
    RecordSerializer,
    StringSerializer,
)
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.errors import (
    BackendClosedError,
    CheckpointFormatError,
    IllegalStateError,
    SnapshotCancelledError,
    StateMigrationError,
    UnsupportedSnapshotError,
)
from statecert.spec.keyed_backend import CheckpointOptions, SnapshotType
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.state import (
    VOID_NAMESPACE,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    TtlConfig,
    ValueStateDescriptor,
)

VALUE = ValueStateDescriptor("v", serializer=LongSerializer())
LIST = ListStateDescriptor("l", element_serializer=StringSerializer())
MAP = MapStateDescriptor("m", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())


def contents(backend: Any) -> dict[tuple[str, str], Any]:
    """Everything in the value, list and map states, read through the public API (registering them)."""
    out: dict[tuple[str, str], Any] = {}
    for descriptor in (VALUE, LIST, MAP):
        state = backend.get_or_create_state(descriptor)
        for key in _keys(backend, descriptor.name):
            backend.set_current_key(key)
            value = (
                state.value() if descriptor is VALUE else state.get() if descriptor is LIST else sorted(state.items())
            )
            out[(descriptor.name, key)] = value
    return out


def diff(expected: dict[Any, Any], got: dict[Any, Any]) -> str:
    """Up to five entries that differ, as (state, key): expected -> got."""
    differing = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
    return ", ".join(f"{k}: {expected.get(k)!r} -> {got.get(k)!r}" for k in differing[:5]) + (
        f" and {len(differing) - 5} more" if len(differing) > 5 else ""
    )


def _keys(backend: Any, name: str) -> list[str]:
    return sorted({k for k, _ in backend.get_keys_and_namespaces(name)})


def fill(backend: Any, keys: range, tag: str = "") -> None:
    """Key k<i> gets value i, list element <tag>i and map entry u<i>; a tagged fill writes other values (i plus
    1000 per tag character) over an earlier one, so a write over an existing entry changes it."""
    v, lst, m = (backend.get_or_create_state(d) for d in (VALUE, LIST, MAP))
    for i in keys:
        backend.set_current_key(f"k{i}")
        value = i + 1000 * len(tag)
        v.update(value)
        lst.add(f"{tag}{i}")
        m.put(f"u{i}", value)


def restore(state_backend: Any, handle: Any, **kwargs: Any) -> Any:
    return keyed_backend(state_backend, restore=[handle] if handle else [], **kwargs)


@pytest.mark.requirement("KB-1", "KB-SNAP-1", "KB-RESTORE-1")
def test_snapshot_and_restore_give_the_same_entries(state_backend: Any, storage: Any) -> None:
    with keyed_backend(state_backend) as backend:
        fill(backend, range(50))
        before = contents(backend)
        handle = snapshot_now(backend, location_for(storage))
    assert handle is not None and handle.key_group_range == KeyGroupRange(0, 127), (
        "KB-1, KB-SNAP-1, KB-RESTORE-1: expected handle is not None and handle.key_group_range == KeyGroupRange(0, 127)"
    )
    with restore(state_backend, handle) as restored:
        assert contents(restored) == before, "KB-1, KB-SNAP-1, KB-RESTORE-1: contents(restored): expected before"


@pytest.mark.requirement("KB-KEY-2", "KB-KEY-1")
@pytest.mark.parametrize("access", ["read", "write"])
@pytest.mark.parametrize("side", ["below", "above"])
def test_key_outside_range_is_rejected(state_backend: Any, access: str, side: str) -> None:
    """Subtask 1 of 3 owns key groups 43-85 of 128: a key of key group 42 or 86, just outside either end, is refused
    (a check against the range's end alone takes the keys below its start)."""
    with keyed_backend(state_backend, parallelism=3, index=1) as backend:
        state = backend.get_or_create_state(VALUE)
        group = 42 if side == "below" else 86
        outside = next(f"k{i}" for i in range(100_000) if key_group_of(f"k{i}") == group)
        try:
            backend.set_current_key(outside)
        except IllegalStateError:
            return  # refused at once
        call = f"set_current_key({outside!r}) (key group {group}, range 43-85) then a {access}"
        with pytest.raises(IllegalStateError):
            state.value() if access == "read" else state.update(1)
            pytest.fail(f"KB-KEY-2: {call}: expected IllegalStateError, got none")
        count = backend.num_state_entries()
        assert count == 0, f"KB-KEY-2: {call}: expected nothing stored, got {count} entries"


@pytest.mark.requirement("KB-KEY-1", "ERR-3")
def test_none_key_is_rejected(state_backend: Any) -> None:
    with keyed_backend(state_backend) as backend, pytest.raises(REJECTED):
        backend.set_current_key(None)


@pytest.mark.requirement("KB-SNAP-2", "KB-SNAP-3", "KB-SNAP-4")
def test_writes_after_synchronous_part_are_not_in_snapshot(state_backend: Any, storage: Any) -> None:
    with keyed_backend(state_backend) as backend:
        fill(backend, range(20))
        backend.set_current_key("k3")
        backend.get_or_create_state(LIST).clear()  # a clear before the snapshot must be in it
        backend.set_current_key("k2")
        backend.get_or_create_state(MAP).put("second", 2)  # a map of two user keys
        expected = contents(backend)
        task = backend.snapshot(1, 0, location_for(storage))
        # writes of every kind after the synchronous part
        fill(backend, range(10, 30), tag="late-")
        backend.set_current_key("k0")
        backend.get_or_create_state(VALUE).clear()
        backend.get_or_create_state(MAP).remove("u0")
        backend.set_current_key("k1")  # clears of a list and a map (a backend emptying them in place loses them)
        backend.get_or_create_state(LIST).clear()
        backend.get_or_create_state(MAP).clear()
        backend.set_current_key("k2")  # one user key of two removed, and a list's elements replaced
        backend.get_or_create_state(MAP).remove("second")
        backend.get_or_create_state(LIST).update(["replaced"])
        # keeps writing while the asynchronous part runs
        handle = run_while(task, lambda: fill(backend, range(5), tag="during-"), state_backend)
    with restore(state_backend, handle) as restored:
        got = contents(restored)
    cleared = ("l", "k3")  # cleared before the call
    assert got.get(cleared) == expected.get(cleared), (
        f"KB-SNAP-4: k3's list, cleared before snapshot(), restored as {got.get(cleared)!r}, expected no entry"
    )
    assert got == expected, f"KB-SNAP-3: the snapshot saw writes made after its synchronous part: {diff(expected, got)}"


def _step(round_: int, backend: Any, read: list[Any], i: int) -> None:
    """Read or write number `i` of a round, of every kind in turn over keys k0..k1999 (half of them not filled):
    values set and cleared, list elements added, replaced and cleared, map entries put and removed; what a read
    returns goes to `read`."""
    value, elements, entries = (backend.get_or_create_state(d) for d in (VALUE, LIST, MAP))
    backend.set_current_key(f"k{(7 * i + round_) % 2_000}")
    step = i % 8
    if step == 0:
        value.update(i + 100_000 * round_)
    elif step == 1:
        elements.add(f"r{round_}-{i}")
    elif step == 2:
        entries.put(f"u{i % 5}", i)
    elif step == 3:
        entries.remove(f"u{(i + 1) % 5}")
    elif step == 4:
        elements.update([f"x{i}"]) if i % 16 == 4 else elements.clear()
    elif step == 5:
        value.clear()
    elif step == 6:
        read.append((value.value(), elements.get(), sorted(entries.items())))
    else:
        read.append(entries.get(f"u{i % 5}"))


@pytest.mark.requirement("KB-SNAP-2", "KB-SNAP-3")
@pytest.mark.capability("async_snapshots")
@pytest.mark.heavy
def test_the_task_thread_keeps_reading_and_writing_while_the_asynchronous_part_runs(
    certification: Any, state_backend: Any, storage: Any
) -> None:
    """`run()` may run in another thread while the backend keeps processing (KB-SNAP-2). Two snapshots of 1,000
    keys each run with reads and writes of every kind in the task thread from their start to their end, the two
    threads taking turns at points the run's seed chooses (`run_beside_a_twin`): each restores the state at its
    call, and the task's reads and its state afterwards, and a third snapshot's, are those of a twin backend given
    the same calls without snapshots. A backend whose task thread and asynchronous part share a scratch buffer (Flink
    duplicates its serializers for the asynchronous part so that they share none) mixes values."""
    with keyed_backend(state_backend) as backend, keyed_backend(state_backend) as twin:
        fill(backend, range(1_000))
        fill(twin, range(1_000))
        for round_ in range(2):
            expected = contents(backend)
            task = backend.snapshot(round_ + 1, 0, location_for(storage, round_ + 1))
            step = functools.partial(_step, round_)
            seed, snapshot = certification.settings.seed + round_, f"snapshot {round_ + 1} of 2"
            handle, call = run_beside_a_twin(task, step, backend, twin, seed, snapshot)
            live, twin_state = contents(backend), contents(twin)
            assert live == twin_state, f"KB-SNAP-2: {call}: the state afterwards: {diff(twin_state, live)}"
            with restore(state_backend, handle) as restored:
                got = contents(restored)
            assert got == expected, f"KB-SNAP-2, KB-SNAP-3: {call}, restored: {diff(expected, got)}"
        # what the task wrote while the last asynchronous part ran is in the next snapshot (a backend writing logs or
        # increments between snapshots may lose it from them only); neither backend changed since the last round
        with restore(state_backend, snapshot_now(backend, location_for(storage, 3), 3)) as restored:
            got = contents(restored)
        assert got == twin_state, f"KB-SNAP-2: a third snapshot, taken after the two, restored: {diff(twin_state, got)}"


class _AppendInPlace:
    """An aggregate function whose `add` changes its accumulator in place, below its top level, and returns it, as
    Flink jobs commonly write them (`acc.items.add(value); return acc`)."""

    def create_accumulator(self) -> dict[str, list[Any]]:
        return {"n": []}

    def add(self, value: Any, accumulator: dict[str, list[Any]]) -> dict[str, list[Any]]:
        accumulator["n"].append(value)
        return accumulator

    def get_result(self, accumulator: dict[str, list[Any]]) -> list[Any]:
        return list(accumulator["n"])

    def merge(self, a: dict[str, list[Any]], b: dict[str, list[Any]]) -> dict[str, list[Any]]:
        a["n"].extend(b["n"])
        return a


def _extend_in_place(accumulated: dict[str, list[Any]], added: dict[str, list[Any]]) -> dict[str, list[Any]]:
    accumulated["n"].extend(added["n"])
    return accumulated


PLAIN = MsgpackSerializer()
MUTABLE: dict[str, Any] = {
    "value": ValueStateDescriptor("mutable-v", serializer=PLAIN),
    "list": ListStateDescriptor("mutable-l", element_serializer=PLAIN),
    "map": MapStateDescriptor("mutable-m", user_key_serializer=StringSerializer(), user_value_serializer=PLAIN),
    "reducing": ReducingStateDescriptor("mutable-r", reduce_function=_extend_in_place, serializer=PLAIN),
    "aggregating": AggregatingStateDescriptor(
        "mutable-a", aggregate_function=_AppendInPlace(), accumulator_serializer=PLAIN
    ),
}
MUTABLE["map-iterated"] = MUTABLE["map"]
CHANGED_IN_PLACE = {
    "value": "v = value(); v['n'].append(-1); update(v)",
    "list": "e = get(); e[0]['n'].append(-1); e.append({'n': [-2]}); update(e)",
    "map": "v = get('u'); v['n'].append(-1); put('u', v)",
    "map-iterated": "[(u, v)] = items(); v['n'].append(-1); put(u, v)",
    "reducing": "add({'n': [-1]}) with reduce(a, b) = a['n'].extend(b['n']) or a",
    "aggregating": "add(-1) with an add that appends to its accumulator's list",
}
"""How each kind's object is changed in place: below its top level, where a copy that is not deep (`copy.copy`)
still shares what the change reaches."""


def _write_mutable(state: Any, kind: str, i: int) -> None:
    """Key i's first write: an object holding a list holding i."""
    if kind == "list":
        state.add({"n": [i]})
    elif kind.startswith("map"):
        state.put("u", {"n": [i]})
    elif kind == "aggregating":
        state.add(i)
    else:
        (state.update if kind == "value" else state.add)({"n": [i]})


def _change_in_place(state: Any, kind: str) -> None:
    """Read the current key's object, change it in place and write it back (CHANGED_IN_PLACE says how)."""
    if kind == "value":
        value = state.value()
        value["n"].append(-1)
        state.update(value)
    elif kind == "list":
        elements = state.get()
        elements[0]["n"].append(-1)
        elements.append({"n": [-2]})
        state.update(elements)
    elif kind == "map":
        value = state.get("u")
        value["n"].append(-1)
        state.put("u", value)
    elif kind == "map-iterated":
        [(user_key, value)] = list(state.items())
        value["n"].append(-1)
        state.put(user_key, value)
    else:
        state.add({"n": [-1]} if kind == "reducing" else -1)


def _read_mutable(state: Any, kind: str) -> Any:
    return state.value() if kind == "value" else state.get("u") if kind.startswith("map") else state.get()


MUTABLE_KEYS = [f"k{i}" for i in range(10)]


def _write_every_mutable(backend: Any, kind: str) -> tuple[Any, dict[str, Any]]:
    """Register `kind`'s MUTABLE state and write each of MUTABLE_KEYS's first object; the state and a deep copy of
    what each key then reads (what a backend hands out may change)."""
    state = backend.get_or_create_state(MUTABLE[kind])
    for i, key in enumerate(MUTABLE_KEYS):
        backend.set_current_key(key)
        _write_mutable(state, kind, i)
    expected = {}
    for key in MUTABLE_KEYS:
        backend.set_current_key(key)
        expected[key] = copy.deepcopy(_read_mutable(state, kind))
    return state, expected


def _change_every_mutable(backend: Any, state: Any, kind: str) -> None:
    for key in MUTABLE_KEYS:
        backend.set_current_key(key)
        _change_in_place(state, kind)


def _restored_mutable(state_backend: Any, handle: Any, kind: str) -> dict[str, Any]:
    """What each of MUTABLE_KEYS reads in `kind`'s MUTABLE state of a backend restored from `handle`."""
    with restore(state_backend, handle) as restored:
        state = restored.get_or_create_state(MUTABLE[kind])
        got = {}
        for key in MUTABLE_KEYS:
            restored.set_current_key(key)
            got[key] = _read_mutable(state, kind)
    return got


@pytest.mark.requirement("KB-SNAP-3", "KB-SNAP-2")
@pytest.mark.parametrize("kind", list(MUTABLE))
def test_an_object_read_after_the_snapshot_and_changed_in_place_is_not_in_it(
    state_backend: Any, storage: Any, kind: str
) -> None:
    """An object read from the state after `snapshot()` returned, changed in place and written back, is a write
    after the synchronous part: a backend keeping state objects on the heap (serialized only when the snapshot is
    written) must hand out a copy of one a pending snapshot holds, as Flink's `CopyOnWriteStateMap` does in `get`
    and `transform`; one handing out the captured object lets the change into the snapshot."""
    with keyed_backend(state_backend) as backend:
        state, expected = _write_every_mutable(backend, kind)
        task = backend.snapshot(1, 0, location_for(storage))
        _change_every_mutable(backend, state, kind)
        handle = task.run()
    call = f"{kind} state, after snapshot(): {CHANGED_IN_PLACE[kind]}"
    got = _restored_mutable(state_backend, handle, kind)
    wrong = {k: (expected[k], got[k]) for k in MUTABLE_KEYS if got[k] != expected[k]}
    assert not wrong, f"KB-SNAP-3: {call}; restored (expected, got): {list(wrong.items())[:3]}"


@pytest.mark.requirement("KB-SNAP-3", "KS-MERGE-1")
@pytest.mark.parametrize("kind", ["reducing", "aggregating"])
def test_a_merge_after_the_snapshot_changing_an_accumulator_in_place_is_not_in_it(
    state_backend: Any, storage: Any, kind: str
) -> None:
    """A namespace merge after `snapshot()` returned whose function changes the target's accumulator in place (a
    reduce extending its first argument, an aggregate's `merge(a, b)` extending `a`) is a write after the
    synchronous part: Flink's heap backend merges into a copy of an accumulator a pending snapshot holds
    (`CopyOnWriteStateMap.transform`)."""
    descriptor = MUTABLE[kind]
    keys = [f"k{i}" for i in range(10)]
    with keyed_backend(state_backend) as backend:
        state = backend.get_partitioned_state(1, descriptor, LongSerializer())
        for i, key in enumerate(keys):
            backend.set_current_key(key)
            for namespace, first in ((1, i), (2, 100 + i)):
                state.set_current_namespace(namespace)
                _write_mutable(state, kind, first)
        expected = {}
        for key in keys:
            backend.set_current_key(key)
            for namespace in (1, 2):
                state.set_current_namespace(namespace)
                expected[(key, namespace)] = copy.deepcopy(state.get())
        task = backend.snapshot(1, 0, location_for(storage))
        for key in keys:
            backend.set_current_key(key)
            state.merge_namespaces(1, [2])
        handle = task.run()
    with restore(state_backend, handle) as restored:
        state = restored.get_partitioned_state(1, descriptor, LongSerializer())
        got = {}
        for key in keys:
            restored.set_current_key(key)
            for namespace in (1, 2):
                state.set_current_namespace(namespace)
                got[(key, namespace)] = state.get()
    wrong = {k: (expected[k], got[k]) for k in expected if got[k] != expected[k]}
    assert not wrong, (
        f"KB-SNAP-3: {kind} state, after snapshot(): merge_namespaces(1, [2]) with a function changing the target's "
        f"accumulator in place; restored (key, namespace): (expected, got) {list(wrong.items())[:3]}"
    )


@pytest.mark.requirement("KB-SNAP-5", "KB-SNAP-3")
@pytest.mark.parametrize("kind", list(MUTABLE))
def test_an_object_changed_in_place_after_one_of_two_pending_snapshots_finished_is_in_neither(
    state_backend: Any, storage: Any, kind: str
) -> None:
    """Two snapshots pending, the later finishing first, then every key's object read, changed in place and written
    back before the earlier one runs: the earlier snapshot still holds the objects of its call. A backend keeping
    state objects copies what it hands out while any snapshot holding it is pending, as Flink's
    `CopyOnWriteStateMap.releaseSnapshot` keeps the highest version still needed; one that stops copying when a
    snapshot finishes, as if it were the only one, lets the change into the earlier snapshot."""
    with keyed_backend(state_backend) as backend:
        state, expected = _write_every_mutable(backend, kind)
        first = backend.snapshot(1, 0, location_for(storage, 1))
        second = backend.snapshot(2, 0, location_for(storage, 2))
        handles = {"second": second.run()}
        _change_every_mutable(backend, state, kind)
        handles["first"] = first.run()
    call = f"{kind} state, after the later of two snapshots finished: {CHANGED_IN_PLACE[kind]}"
    for name, handle in handles.items():
        got = _restored_mutable(state_backend, handle, kind)
        wrong = {k: (expected[k], got[k]) for k in MUTABLE_KEYS if got[k] != expected[k]}
        assert not wrong, f"KB-SNAP-5: {call}; the {name} snapshot restored (expected, got): {list(wrong.items())[:3]}"


LATE = (
    ValueStateDescriptor("late-v", serializer=LongSerializer()),
    ListStateDescriptor("late-l", element_serializer=StringSerializer()),
    MapStateDescriptor("late-m", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer()),
    ReducingStateDescriptor("late-r", reduce_function=lambda a, b: a * 3 + b, serializer=LongSerializer()),
)


def write_late(backend: Any, descriptors: tuple[Any, ...]) -> None:
    """Register `descriptors` and write an entry of each for ten keys."""
    for descriptor in descriptors:
        state = backend.get_or_create_state(descriptor)
        for i in range(10):
            backend.set_current_key(f"k{i}")
            if isinstance(descriptor, ValueStateDescriptor):
                state.update(i)
            elif isinstance(descriptor, ListStateDescriptor):
                state.add(f"late{i}")
            elif isinstance(descriptor, MapStateDescriptor):
                state.put("u", i)
            else:
                state.add(i)


@pytest.mark.requirement("KB-SNAP-3", "KB-SNAP-7")
@pytest.mark.parametrize("at_the_call", ["states with entries", "no state"])
def test_a_state_registered_after_the_synchronous_part_is_not_in_the_snapshot(
    state_backend: Any, storage: Any, at_the_call: str
) -> None:
    """A state first asked for after `snapshot` returned (a window operator's state, registered on its first element)
    is not in that snapshot, whatever is written to it before or while the asynchronous part runs: Flink's backends
    take the registered states in the synchronous part. A backend listing its states when the asynchronous part runs
    restores the late state's entries, which the records replayed after the restore then write a second time."""
    with keyed_backend(state_backend) as backend:
        if at_the_call == "states with entries":
            fill(backend, range(10))
        expected = contents(backend) if at_the_call == "states with entries" else {}
        task = backend.snapshot(1, 0, location_for(storage))
        write_late(backend, LATE[:2])  # before the asynchronous part starts
        handle = run_while(task, lambda: write_late(backend, LATE[2:]), state_backend)  # and while it runs
    assert at_the_call != "no state" or handle is None, (
        f"KB-SNAP-7: snapshot() of a backend with no state registered, run after states were registered: expected "
        f"None, got {handle}"
    )
    with restore(state_backend, handle) as restored:
        for descriptor in LATE:
            restored.get_or_create_state(descriptor)
            keys = _keys(restored, descriptor.name)
            assert keys == [], (
                f"KB-SNAP-3: state {descriptor.name!r}, first registered after snapshot() returned ({at_the_call} "
                f"at the call), restored with entries of keys {keys[:5]}"
            )
        if expected:
            got = contents(restored)
            assert got == expected, f"KB-SNAP-3: restored: {diff(expected, got)}"


@pytest.mark.requirement("KB-SNAP-1")
@pytest.mark.parametrize("when", ["write", "close"])
def test_a_snapshot_the_storage_fails_to_write_fails_and_the_next_is_whole(
    state_backend: Any, storage: Any, when: str
) -> None:
    """Every stream of a snapshot fails (an OSError at its first write, or when it is closed): `run()` raises, and
    never returns a handle or None for state it could not write, which would complete a checkpoint without it (a
    backend that catches the error and reports nothing to snapshot loses the state at the next recovery). The
    backend goes on, and its next snapshot restores whole."""
    with keyed_backend(state_backend) as backend:
        fill(backend, range(30))
        task = assert_snapshot_fails(backend, location_for(storage, 1), when, "KB-SNAP-1")
        assert task.done, "KB-SNAP-2: done is False after run() raised"
        backend.notify_checkpoint_aborted(1)
        fill(backend, range(20, 40), tag="after-")
        expected = contents(backend)
        handle = snapshot_now(backend, location_for(storage, 2), 2)
    with restore(state_backend, handle) as restored:
        got = contents(restored)
        assert got == expected, f"KB-SNAP-1: the snapshot after a failed one, restored: {diff(expected, got)}"


def _filled(state_backend: Any, storage: Any, before: int) -> tuple[Any, Any, dict[tuple[str, str], Any]]:
    """A backend holding 100 keys, after checkpoint 1 of them completed and half of them written over (`before`=1)
    or not (0): the backend, checkpoint 1's handle (or None) and the contents now."""
    backend = keyed_backend(state_backend)
    fill(backend, range(100))
    completed = None
    if before:
        completed = snapshot_now(backend, location_for(storage, 1), 1)
        backend.notify_checkpoint_complete(1)
        fill(backend, range(50, 150), tag="x")
    return backend, completed, contents(backend)


SNAPSHOTS_AFTER_A_CHECKPOINT_OR_NOT = pytest.mark.parametrize(
    ("before", "snapshot_type"),
    [
        (0, SnapshotType.CHECKPOINT),
        (1, SnapshotType.CHECKPOINT),
        pytest.param(1, SnapshotType.SAVEPOINT_CANONICAL, marks=pytest.mark.capability("canonical_savepoints")),
        pytest.param(1, SnapshotType.SAVEPOINT_NATIVE, marks=pytest.mark.capability("native_savepoint_format")),
    ],
    ids=["first checkpoint", "checkpoint after a completed one", "canonical savepoint", "native savepoint"],
)
"""A backend's first checkpoint, and after a completed checkpoint one more, a canonical or a native savepoint: the
paths a snapshot may take (savepoints come after a checkpoint, as an incremental backend's would)."""


@pytest.mark.requirement("KB-SNAP-1")
@SNAPSHOTS_AFTER_A_CHECKPOINT_OR_NOT
def test_a_snapshot_whose_storage_fails_at_its_nth_stream_leaves_nothing_it_wrote(
    state_backend: Any, tmp_path: Any, before: int, snapshot_type: SnapshotType
) -> None:
    """The storage fails the n-th stream of a snapshot when it is closed, after the streams before it were written,
    for every n the snapshot reaches. `run()` raises, and once the checkpoint is aborted (its exclusive directory
    deleted, as the coordinator does) no file the snapshot wrote remains: a file in the shared scope that no
    checkpoint references would stay forever (Flink's RocksDB backend discards an incomplete snapshot's uploads). A
    backend that may go on without the failed stream (a changelog backend's materialization, CL-8) returns a handle
    instead, which restores the state whole. What the backend keeps as its own state is referenced by the next
    checkpoint (KB-SNAP-6), which is whole."""
    for nth in itertools.count(1):
        root = tmp_path / f"failing-{nth}"
        storage = FileSystemCheckpointStorage(str(root), file_state_size_threshold=0)
        backend, completed, expected = _filled(state_backend, storage, before)
        with backend:
            checkpoint_id = before + 1
            location = location_for(storage, checkpoint_id)
            failing = FailingStreamFactory(location, "close", nth)
            try:
                outcome: Any = backend.snapshot(checkpoint_id, 0, failing, CheckpointOptions(snapshot_type)).run()
            except Exception as exc:  # the storage's OSError, or the backend's own error for it
                outcome = exc
            if not failing.failures:
                assert nth > 1, "KB-SNAP-1: the asynchronous part of a snapshot of 100 keys closed no stream"
                return
            call = f"{snapshot_type.value} {checkpoint_id} whose stream {nth} failed when closed"
            if isinstance(outcome, Exception):
                backend.notify_checkpoint_aborted(checkpoint_id)
                location.dispose_on_failure()
                handle = completed
            else:
                handle = outcome
                with restore(state_backend, outcome) as restored:
                    got = contents(restored)
                assert got == expected, f"KB-SNAP-1: {call} returned a handle; restored: {diff(expected, got)}"
            present = set(unreferenced_files(root, handle))
            following = snapshot_now(backend, location_for(storage, checkpoint_id + 1), checkpoint_id + 1)
        leftovers = [f for f in unreferenced_files(root, (handle, following)) if f in present]
        assert leftovers == [], f"KB-SNAP-1: {call} left files no checkpoint references: {leftovers}"
        with restore(state_backend, following) as restored:
            got = contents(restored)
        assert got == expected, f"KB-SNAP-1: the checkpoint after the {call}, restored: {diff(expected, got)}"


def _assert_each_restores(state_backend: Any, expected: dict[str, tuple[Any, Any]], what: str) -> None:
    """Each named snapshot's handle restores the contents expected of it; a failure's message is `what`, with the
    snapshot's name for `{name}`, and the entries that differ."""
    for name, (handle, contents_at_call) in expected.items():
        with restore(state_backend, handle) as restored:
            got = contents(restored)
        assert got == contents_at_call, f"{what.format(name=name)}, restored: {diff(contents_at_call, got)}"


@pytest.mark.requirement("KB-SNAP-5", "KB-SNAP-3")
def test_concurrent_snapshots_each_reflect_their_own_point(state_backend: Any, storage: Any) -> None:
    """Two snapshots pending at once, the later finishing first, with writes between every step: each holds the
    state of its own call (a backend that stops copying on write when one snapshot finishes, as if none were
    pending, lets the writes after it into the earlier one)."""
    with keyed_backend(state_backend) as backend:
        fill(backend, range(10))
        first_expected = contents(backend)
        first = backend.snapshot(1, 0, location_for(storage, 1))
        fill(backend, range(5, 15), tag="x")
        second_expected = contents(backend)
        second = backend.snapshot(2, 0, location_for(storage, 2))
        fill(backend, range(30), tag="y")
        second_handle = second.run()
        fill(backend, range(40), tag="z")  # after the later snapshot finished, before the earlier one runs
        backend.set_current_key("k1")
        backend.get_or_create_state(LIST).clear()
        handles = (second_handle, first.run())
    expected = {"second": (handles[0], second_expected), "first": (handles[1], first_expected)}
    _assert_each_restores(state_backend, expected, "KB-SNAP-5: the {name} of two concurrent snapshots")


@pytest.mark.requirement("KB-SNAP-5", "KB-SNAP-2")
@pytest.mark.capability("async_snapshots")
@pytest.mark.heavy
def test_asynchronous_parts_of_concurrent_snapshots_may_run_at_once(
    certification: Any, state_backend: Any, storage: Any
) -> None:
    """Flink runs the asynchronous parts of a task's concurrent checkpoints side by side in a thread pool: two
    snapshots of 1,000 keys, with writes between their calls, their `run()`s taking turns in two threads at points
    the run's seed chooses (`Interleaving`), each restore the state at their own call (a backend whose asynchronous
    parts share a scratch buffer mixes their entries)."""
    with keyed_backend(state_backend) as backend:
        fill(backend, range(1_000))
        first_expected = contents(backend)
        first = backend.snapshot(1, 0, location_for(storage, 1))
        fill(backend, range(500, 1_500), tag="x")
        second_expected = contents(backend)
        second = backend.snapshot(2, 0, location_for(storage, 2))
        handles = Interleaving(certification.settings.seed).run(first.run, second.run)
    expected = {"first": (handles[0], first_expected), "second": (handles[1], second_expected)}
    _assert_each_restores(
        state_backend, expected, "KB-SNAP-2, KB-SNAP-5: the {name} of two snapshots whose run() ran at once"
    )


@pytest.mark.requirement("KB-SNAP-6", "KB-SNAP-2")
@pytest.mark.parametrize("before", [0, 1], ids=["first snapshots", "after a completed checkpoint"])
def test_close_cancels_running_snapshots_and_leaves_no_files(state_backend: Any, tmp_path: Any, before: int) -> None:
    """Two snapshots pending at `close()` raise SnapshotCancelledError and leave no file behind, whether they are
    the backend's first or follow a completed checkpoint (an incremental or changelog backend's later snapshots
    take another path than its first); the completed checkpoint's files stay."""
    from statecert.reference.storage.filesystem import FileSystemCheckpointStorage

    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    completed = None
    with keyed_backend(state_backend) as backend:
        fill(backend, range(100))
        if before:
            completed = snapshot_now(backend, location_for(storage, 1), 1)
            backend.notify_checkpoint_complete(1)
            fill(backend, range(50, 150), tag="x")
        ids = (before + 1, before + 2)
        tasks = [backend.snapshot(i, 0, location_for(storage, i)) for i in ids]  # two pending at close
    for checkpoint_id, task in zip(ids, tasks, strict=True):
        try:
            outcome: Any = task.run()
        except SnapshotCancelledError:
            outcome = "cancelled"
        assert outcome == "cancelled", (
            f"KB-SNAP-6: run() of snapshot {checkpoint_id} of the 2 pending at close() returned "
            f"{outcome if outcome is None else type(outcome).__name__}: expected SnapshotCancelledError"
        )
        assert task.done, f"KB-SNAP-2: snapshot {checkpoint_id}'s task raised SnapshotCancelledError, but is not done"
    leftovers = unreferenced_files(tmp_path / "c", completed) if (tmp_path / "c").exists() else []
    assert leftovers == [], f"KB-SNAP-6: snapshots cancelled by close() left files: {leftovers}"


@pytest.mark.requirement("KB-SNAP-6", "KB-SNAP-2")
def test_a_cancelled_snapshot_task_writes_nothing_and_the_backend_goes_on(state_backend: Any, tmp_path: Any) -> None:
    """`cancel()` of one task (Flink cancels a checkpoint's asynchronous part when the checkpoint is aborted or
    declined) makes its `run()` raise and leave no file, and leaves the backend and its later snapshots whole;
    after `run()` returned it changes nothing."""
    from statecert.reference.storage.filesystem import FileSystemCheckpointStorage

    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    with keyed_backend(state_backend) as backend:
        fill(backend, range(100))
        expected = contents(backend)
        task = backend.snapshot(1, 0, location_for(storage, 1))
        cancelled = task.cancel()
        assert cancelled is True, f"KB-SNAP-6: cancel() of a task not yet run returned {cancelled!r}, not True"
        with pytest.raises(SnapshotCancelledError):
            task.run()
        assert task.done, "KB-SNAP-2: a snapshot task whose run() raised SnapshotCancelledError is not done"
        leftovers = [p for p in (tmp_path / "c").rglob("*") if p.is_file()] if (tmp_path / "c").exists() else []
        assert leftovers == [], f"KB-SNAP-6: a snapshot task cancelled before run() left files: {leftovers}"
        later = backend.snapshot(2, 0, location_for(storage, 2))
        handle = later.run()
        cancelled = later.cancel()
        assert cancelled is False, f"KB-SNAP-6: cancel() after run() returned gave {cancelled!r}, not False"
        assert contents(backend) == expected, "KB-SNAP-6: cancelling a snapshot task changed the backend's state"
    with keyed_backend(state_backend, restore=[handle]) as restored:
        got = contents(restored)
        assert got == expected, (
            f"KB-SNAP-6: the snapshot after a cancelled one restored {len(got)} entries, not the {len(expected)} taken"
        )


@pytest.mark.requirement("KB-SNAP-6", "KB-SNAP-2")
@pytest.mark.capability("async_snapshots")
@SNAPSHOTS_AFTER_A_CHECKPOINT_OR_NOT
@pytest.mark.parametrize("end", ["close", "cancel"])
def test_a_snapshot_ended_as_any_of_its_streams_closes_leaves_nothing(
    state_backend: Any, tmp_path: Any, end: str, before: int, snapshot_type: SnapshotType
) -> None:
    """KB-SNAP-6 holds whenever the cancel comes: a snapshot ended by `close()` or its task's `cancel()` just after
    its n-th stream returned its handle, for every n its asynchronous part reaches (the last when every byte is
    written and only the handle is left to return), raises SnapshotCancelledError from `run()`. Of the files there
    once it raised, only the completed checkpoint's and, after a `cancel()`, those the next checkpoint references
    remain at the end (what that checkpoint writes itself is not the cancel's: a changelog backend's materialization
    serves only later ones, CL-8); the next checkpoint is whole. A backend that checks for a cancel only between
    writes keeps the files it closed before it looked. Savepoints (taken after a completed checkpoint, as an
    incremental backend's would be) take their own paths."""
    for nth in itertools.count(1):
        root = tmp_path / f"at-close-{nth}"
        storage = FileSystemCheckpointStorage(str(root), file_state_size_threshold=0)
        backend, completed, expected = _filled(state_backend, storage, before)
        checkpoint_id = before + 1
        options = CheckpointOptions(snapshot_type)
        seen = end_a_snapshot_at(
            backend, location_for(storage, checkpoint_id), end, "close", nth, checkpoint_id, options
        )
        if not seen.reached:
            backend.dispose()
            assert nth > 1, "KB-SNAP-2: the asynchronous part of a snapshot of 100 keys closed no stream"
            return
        call = f"{end}() just after stream {nth} of {snapshot_type.value} {checkpoint_id} returned its handle"
        assert isinstance(seen.outcome, SnapshotCancelledError), (
            f"KB-SNAP-6: {call}: expected run() to raise SnapshotCancelledError, got "
            f"{type(seen.outcome).__name__ if seen.outcome is not None else None}"
        )
        following = None
        present = set(unreferenced_files(root, completed))  # what the next checkpoint writes is not the cancel's
        if end == "cancel":
            assert seen.ended is True, f"KB-SNAP-6: {call}: expected cancel() to return True, got {seen.ended!r}"
            following = snapshot_now(backend, location_for(storage, checkpoint_id + 1), checkpoint_id + 1)
            backend.dispose()
            with keyed_backend(state_backend, restore=[following]) as got:
                restored = contents(got)
            assert restored == expected, (
                f"KB-SNAP-6: after {call}, the next snapshot restored {len(restored)} entries, not the "
                f"{len(expected)} taken"
            )
        else:
            backend.dispose()
        leftovers = [f for f in unreferenced_files(root, (completed, following)) if f in present]
        assert leftovers == [], f"KB-SNAP-6: {call} left files referenced by no snapshot: {leftovers}"


@pytest.mark.requirement("KB-LOCAL-1")
def test_backends_sharing_a_local_dir_keep_apart_and_clean_up(state_backend: Any, storage: Any, local_dir: Any) -> None:
    first, second = keyed_backend(state_backend), keyed_backend(state_backend)
    for backend, offset in ((first, 0), (second, 1000)):
        fill(backend, range(offset, offset + 30))
    expected = [contents(first), contents(second)]
    handles = [snapshot_now(b, location_for(storage, i + 1)) for i, b in enumerate((first, second))]
    assert [contents(first), contents(second)] == expected, "KB-LOCAL-1: two backends in one local dir mixed state"
    first.dispose()
    assert local_dir.is_dir(), f"KB-LOCAL-1: disposing one backend removed the shared local dir {local_dir}"
    try:
        after = contents(second)
        handles.append(snapshot_now(second, location_for(storage, 3)))
    except Exception as exc:
        pytest.fail(f"KB-LOCAL-1: disposing one backend broke the other in the same local dir: {exc!r}")
    assert after == expected[1], "KB-LOCAL-1: disposing one backend changed the other's state in the same local dir"
    expected.append(after)
    second.dispose()
    leftovers = sorted(str(p.relative_to(local_dir)) for p in local_dir.rglob("*") if p.is_file())
    assert leftovers == [], f"KB-LOCAL-1: disposed backends left files in their local dir: {leftovers[:5]}"
    for handle, before in zip(handles, expected, strict=True):
        with restore(state_backend, handle) as restored:
            assert contents(restored) == before, "KB-LOCAL-1: contents(restored): expected before"


@pytest.mark.requirement("KB-LOCAL-1")
def test_disposed_backends_leave_no_working_files_in_the_system_temp_dir_or_the_working_directory(
    state_backend: Any, storage: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    """A backend that works outside its local directory (in the system's temporary directory, or in the process's
    working directory through a relative path, as a backend ignoring `local_dir` does) removes what it made there
    on `dispose()` too: a worker restoring many times would otherwise fill its disk with the working files of
    backends long gone. Both are fresh for this test; a backend and one restored from its snapshot are disposed,
    and nothing of theirs may remain in either."""
    places = {"system temp dir": tmp_path / "system-temp", "working directory": tmp_path / "cwd"}
    for place in places.values():
        place.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(places["system temp dir"]))
    monkeypatch.chdir(places["working directory"])
    backend = keyed_backend(state_backend)
    fill(backend, range(30))
    expected = contents(backend)
    handle = snapshot_now(backend, location_for(storage, 1))
    backend.dispose()
    restored = restore(state_backend, handle)
    got = contents(restored)
    restored.dispose()
    assert got == expected, f"KB-RESTORE-1: restored {diff(expected, got)}"
    for name, place in places.items():
        left = sorted(str(p.relative_to(place)) for p in place.rglob("*"))
        assert left == [], f"KB-LOCAL-1: disposed backends left {len(left)} files in the {name}: {left[:5]}"


def _escapes(root: Path) -> dict[str, Callable[[str], str]]:
    """Names of a handle's files that are paths: climbing one to eight levels from where the backend works (its
    local directory lies eleven below `root`, so every climb stays in `root`'s tree), through a subdirectory first,
    or absolute into `root`."""
    ups = {
        f"{n} levels up": functools.partial(lambda n, name: "../" * n + f"escaped-{n}-{name}", n)
        for n in (8, 5, 3, 2, 1)
    }
    return {
        **ups,
        "a subdirectory, then up": lambda name: "sub/" + "../" * 6 + f"escaped-sub-{name}",
        "an absolute path": lambda name: str(root / f"escaped-absolute-{name}"),
    }


@pytest.mark.requirement("KB-LOCAL-1", "KB-LOCAL-2", "FMT-8")
@pytest.mark.parametrize(
    "kind",
    [
        SnapshotType.CHECKPOINT,
        pytest.param(SnapshotType.SAVEPOINT_NATIVE, marks=pytest.mark.capability("native_savepoint_format")),
    ],
    ids=lambda k: str(k.value),
)
def test_a_restore_writes_no_file_a_handle_names_outside_the_local_dir(
    certification: Any, tmp_path: Path, kind: SnapshotType
) -> None:
    """The backend's own snapshot, its files (a native handle's mapping of names to streams) renamed to paths that
    climb out of the backend's local directory, or are absolute: the restore fails with CheckpointFormatError or
    restores the state, and writes no file outside the local directory, as a backend downloading each file to
    `<working dir>/<name>` would (a zip-slip). Backends whose handles name no files have nothing to check here."""
    deep = tmp_path.joinpath(*["w"] * 10)
    local = deep / "local"
    local.mkdir(parents=True)
    token = LOCAL_DIR.set(str(local))
    try:
        state_backend = certification.new_backend(local)
        storage = FileSystemCheckpointStorage(str(tmp_path / "c"), savepoint_dir=str(tmp_path / "sp"))
        with keyed_backend(state_backend) as backend:
            fill(backend, range(40))
            expected = contents(backend)
            location = location_for(storage)
            handle = backend.snapshot(1, 0, location, CheckpointOptions(kind)).run()
        named = [name for name, _ in listed_stream_handles(handle) if name is not None]
        if not named:
            return
        before = set(tmp_path.rglob("*"))
        for escape, rename in _escapes(tmp_path).items():
            hostile = rebuilt_handle(handle, name=rename)
            call = f"a restore of the {kind.value} whose files {named[:2]} are named as {escape} ({rename(named[0])!r})"
            wrong, got = None, None
            try:
                with keyed_backend(state_backend, restore=[hostile]) as restored:
                    got = contents(restored)
                if got != expected:
                    wrong = f"KB-RESTORE-1: {call} restored other state: {diff(expected, got)}"
            except CheckpointFormatError:
                pass
            except Exception as exc:
                wrong = f"FMT-8: {call}: expected CheckpointFormatError (or the state restored), got {exc!r}"
            new = sorted(str(p.relative_to(tmp_path)) for p in set(tmp_path.rglob("*")) - before)
            outside = [p for p in new if not p.startswith(str(local.relative_to(tmp_path)) + "/")]
            assert outside == [], f"KB-LOCAL-1: {call} wrote outside the local dir {local}: {outside[:5]}"
            rid, after = ("KB-LOCAL-2", "the restore failed") if got is None else ("KB-LOCAL-1", "dispose()")
            assert new == [], f"{rid}: {call} left {new[:5]} in the local dir after {after}"
            assert wrong is None, wrong
    finally:
        LOCAL_DIR.reset(token)


@pytest.mark.requirement("KB-LOCAL-3")
@pytest.mark.heavy
def test_a_new_backend_never_opens_what_a_crashed_process_left_in_its_local_dir(
    certification: Any, tmp_path: Any, local_dir: Any
) -> None:
    """A worker process creates the backend under test, fills value state `count` for keys k0..k49, snapshots it
    and dies without disposing it; a fresh process then creates a backend with the same job, operator and key-group
    range in the same local directory, as a restarted worker does. It must hold none of the dead one's entries. Each
    side runs in an interpreter of its own (`statecert.conformance.crash_restart`), with the system's temporary
    directory and the working directory under this test's directory, so a backend naming its working files by
    something only unique within a process (a counter, an object's address, a seeded generator) meets the names it
    chose before the crash, as it would after a real one."""
    config = json.dumps({**certification.job_config, "state.backend.rocksdb.localdir": str(local_dir)})
    places = {"TMPDIR": tmp_path / "process-temp", "cwd": tmp_path / "process-cwd"}
    for place in places.values():
        place.mkdir()
    env = {**os.environ, "TMPDIR": str(places["TMPDIR"]), "PYTHONPATH": os.pathsep.join(map(os.path.abspath, sys.path))}

    def side(mode: str) -> str:
        call = [sys.executable, "-m", "statecert.conformance.crash_restart", mode, config, str(local_dir)]
        done = subprocess.run(
            [*call, str(tmp_path / "checkpoints")], cwd=places["cwd"], env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or ["(no output)"]
            pytest.fail(f"KB-LOCAL-3: the {mode} process exited with {done.returncode}: {lines[-1]}")
        return done.stdout

    side("crash")
    resurrected = json.loads(side("restart").strip().splitlines()[-1])
    assert resurrected == {}, (
        f"KB-LOCAL-3: a new backend created where a crashed process left its working files: expected no state, got "
        f"{len(resurrected)} of the crashed backend's entries, e.g. {dict(list(resurrected.items())[:3])}"
    )


@pytest.mark.requirement("KB-SNAP-7")
def test_empty_backend_snapshots_to_nothing_and_restores(state_backend: Any, storage: Any) -> None:
    with keyed_backend(state_backend) as backend:
        handle = snapshot_now(backend, location_for(storage, 1))
        assert handle is None, f"KB-SNAP-7: snapshot of a backend with no state registered: expected None, got {handle}"
        state = backend.get_or_create_state(VALUE)
        backend.set_current_key("k")
        state.update(1)
        state.clear()
        handle = snapshot_now(backend, location_for(storage, 2))
    for restored_from in (None, handle):
        with restore(state_backend, restored_from) as restored:
            count = restored.num_state_entries()
            assert count == 0, (
                f"KB-SNAP-7: restored from {restored_from or 'no handles'} (a snapshot of a registered state without "
                f"entries): expected no entries, got {count}"
            )
            restored.set_current_key("k")
            got = restored.get_or_create_state(VALUE).value()
            assert got is None, f"KB-SNAP-7: restored from {restored_from or 'no handles'}: k reads {got!r}"


@pytest.mark.requirement("FMT-12", "KB-RESTORE-1", "KB-LOCAL-2")
@pytest.mark.parametrize("parallelism", [1, pytest.param(2, marks=pytest.mark.capability("rescaling"))])
def test_a_snapshot_missing_a_state_file_fails_to_restore(
    state_backend: Any, tmp_path: Any, local_dir: Any, parallelism: int
) -> None:
    """One state file of a snapshot is gone (deleted by hand, or by a cleanup that raced the restore): restoring it,
    alone or with another subtask's handle into one backend, fails with CheckpointFormatError, and leaves nothing
    in the local directory; a backend that skips what it cannot find restores the other key groups only, a smaller
    state instead of an error."""
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    handles = []
    for index in range(parallelism):
        with keyed_backend(state_backend, parallelism=parallelism, index=index) as backend:
            state = backend.get_or_create_state(VALUE)
            for i in range(200):
                key = f"k{i}"
                if key_group_of(key, 128) in backend.key_group_range:
                    backend.set_current_key(key)
                    state.update(i)
            handles.append(snapshot_now(backend, location_for(storage, 1), 1))
    files = sorted(files_of(handles[0]))
    assert files, (
        "FMT-12, KB-RESTORE-1, KB-LOCAL-2: a snapshot of 200 keys with file_state_size_threshold=0 "
        f"references no file: {handles[0]}"
    )
    fs, path = fsspec.core.url_to_fs(files[0])
    fs.rm(path)
    before = set(local_dir.rglob("*"))
    restored_entries = None
    with pytest.raises(CheckpointFormatError), keyed_backend(state_backend, restore=handles) as restored:
        restored_entries = restored.num_state_entries()
    assert restored_entries is None, f"FMT-12: restored {restored_entries} entries from a snapshot missing {path}"
    left = sorted(str(p.relative_to(local_dir)) for p in set(local_dir.rglob("*")) - before)
    assert left == [], f"KB-LOCAL-2: the failed restore of a snapshot missing a file left {left[:5]} in local_dir"


@pytest.mark.requirement("KB-RESTORE-1")
def test_a_restore_leaves_the_checkpoint_as_it_was(state_backend: Any, tmp_path: Any) -> None:
    """A restore reads a checkpoint and leaves its files as they were, so the same checkpoint restores again (a
    second failure before the next checkpoint, every new subtask reading one old handle), as Flink's default
    NO_CLAIM restore mode: a backend that deletes or moves the files it restored from (claiming them) fails the
    next restore."""
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    with keyed_backend(state_backend) as backend:
        fill(backend, range(200))
        expected = contents(backend)
        handle = snapshot_now(backend, location_for(storage, 1), 1)
    files = sorted(files_of(handle))
    assert files, f"KB-RESTORE-1: a snapshot of 200 keys with file_state_size_threshold=0 references no file: {handle}"
    written = {url: _bytes_at(url) for url in files}
    for attempt in ("first", "second"):
        with restore(state_backend, handle) as restored:
            got = contents(restored)
        assert got == expected, f"KB-RESTORE-1: the {attempt} restore of one checkpoint: {diff(expected, got)}"
        for url, data in written.items():
            now = _bytes_at(url)
            assert now is not None, f"KB-RESTORE-1: the {attempt} restore deleted or moved {url}"
            assert now == data, f"KB-RESTORE-1: the {attempt} restore changed {url}"


def _bytes_at(url: str) -> bytes | None:
    """The bytes of the file at `url`, None when there is none."""
    fs, path = fsspec.core.url_to_fs(url)
    return fs.cat_file(path) if fs.exists(path) else None


@pytest.mark.requirement("KB-RESTORE-6", "KB-RESTORE-3", "KB-SNAP-10")
def test_state_registered_after_the_restored_checkpoint_was_deleted_holds_the_restored_entries(
    state_backend: Any, tmp_path: Any
) -> None:
    """A job restored from checkpoint 1 takes checkpoint 2 (full, as the coordinator takes the first one after a
    restore, COORD-13) before it registers its states, as operators registering state on their first element do;
    checkpoint 2 completes, and checkpoint 1 is subsumed and deleted. The states registered then hold the restored
    entries, and checkpoint 3 restores them with what was written since: a backend that loads restored entries
    from the checkpoint only when a state is registered reads deleted files."""
    first = FileSystemCheckpointStorage(str(tmp_path / "first"), file_state_size_threshold=0)
    later = FileSystemCheckpointStorage(str(tmp_path / "later"), file_state_size_threshold=0)
    with keyed_backend(state_backend) as backend:
        fill(backend, range(200))
        expected = contents(backend)
        handle = snapshot_now(backend, location_for(first, 1), 1)
    assert files_of(handle), (
        "KB-RESTORE-6, KB-RESTORE-3, KB-SNAP-10: a snapshot of 200 keys with file_state_size_threshold=0 "
        f"references no file: {handle}"
    )
    full = CheckpointOptions(SnapshotType.CHECKPOINT, full=True)
    call = "restored from checkpoint 1, checkpoint 2 taken and completed, checkpoint 1 deleted, then the states read"
    with restore(state_backend, handle) as restored:
        restored.snapshot(2, 0, location_for(later, 2), full).run()
        restored.notify_checkpoint_complete(2)
        shutil.rmtree(tmp_path / "first")  # what the completed checkpoint store does to a subsumed checkpoint
        try:
            got = contents(restored)
        except Exception as exc:
            raise AssertionError(f"KB-RESTORE-6: {call}: reading them raised {exc!r}") from exc
        assert got == expected, f"KB-RESTORE-6: {call}: {diff(expected, got)}"
        fill(restored, range(150, 250), tag="x")
        expected = contents(restored)
        third = snapshot_now(restored, location_for(later, 3), 3)
    with restore(state_backend, third) as again:
        got = contents(again)
    assert got == expected, f"KB-RESTORE-6: {call}, written and checkpoint 3 taken; restored: {diff(expected, got)}"


MARK = 0x5A17C0DE00000000  # values whose 8 bytes are unlikely anywhere else in a state file


@pytest.mark.requirement("FMT-12", "KB-RESTORE-1")
def test_a_state_file_with_changed_bytes_fails_to_restore(state_backend: Any, tmp_path: Any) -> None:
    """One byte of a checkpoint's state file changed after it was written (bit rot, a partial overwrite), size
    unchanged, its recorded CRC-32C no longer matching: the restore fails with CheckpointFormatError
    (CheckpointCorruptedError), never restores a different value. The byte changed is the last of a stored value's
    eight bytes where the file holds them as written, so a backend that reads state files without the handle's
    checks (`FileStateHandle.open()`) restores that value changed and decodes everything else."""
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    with keyed_backend(state_backend) as backend:
        state = backend.get_or_create_state(VALUE)
        for i in range(200):
            backend.set_current_key(f"k{i}")
            state.update(MARK + i)
        handle = snapshot_now(backend, location_for(storage, 1), 1)
    files = sorted(files_of(handle))
    assert files, (
        f"FMT-12, KB-RESTORE-1: a snapshot of 200 keys with file_state_size_threshold=0 references no file: {handle}"
    )
    target = LongSerializer().serialize(MARK + 7)
    fs, where, position = None, "", -1
    for url in files:
        fs, where = fsspec.core.url_to_fs(url)
        position = fs.cat_file(where).find(target)
        if position >= 0:
            position += len(target) - 1
            break
    if position < 0:  # compressed or encoded otherwise: a byte in the middle of the largest file
        fs, where = fsspec.core.url_to_fs(max(files, key=lambda url: fsspec.core.url_to_fs(url)[0].size(url)))
        position = fs.size(where) // 2
    assert fs is not None, "FMT-12, KB-RESTORE-1: fs: expected not None"
    data = bytearray(fs.cat_file(where))
    data[position] ^= 0x01
    fs.pipe_file(where, bytes(data))
    read: dict[str, Any] = {}
    with pytest.raises(CheckpointFormatError):
        with keyed_backend(state_backend, restore=[handle]) as restored:
            state = restored.get_or_create_state(VALUE)
            for i in range(200):
                restored.set_current_key(f"k{i}")
                read[f"k{i}"] = state.value()
        changed = {k: v - MARK for k, v in read.items() if v != MARK + int(k[1:])}
        raise AssertionError(
            f"FMT-12: a state file with byte {position} changed restored without error; values changed: {changed}"
        )


@pytest.mark.requirement("KB-RESTORE-1")
def test_restore_into_fresh_backend_keeps_no_stale_entries(state_backend: Any, storage: Any) -> None:
    with keyed_backend(state_backend) as backend:
        fill(backend, range(10))
        handle = snapshot_now(backend, location_for(storage))
        fill(backend, range(10, 20))  # newer than the snapshot: must not come back
    with restore(state_backend, handle) as restored:
        assert _keys(restored, "v") == sorted(f"k{i}" for i in range(10)), (
            "KB-RESTORE-1: _keys(restored, 'v'): expected sorted((f'k{i}' for i in range(10)))"
        )


@pytest.mark.requirement("KB-RESTORE-3")
def test_unregistered_restored_state_survives_the_next_snapshot(state_backend: Any, storage: Any) -> None:
    with keyed_backend(state_backend) as backend:
        fill(backend, range(10))
        expected = contents(backend)
        handle = snapshot_now(backend, location_for(storage, 1))
    with restore(state_backend, handle) as middle:
        middle.set_current_key("k1")  # touch nothing but the key
        handle2 = snapshot_now(middle, location_for(storage, 2))
    with restore(state_backend, handle2) as final:
        assert contents(final) == expected, "KB-RESTORE-3: contents(final): expected expected"


@pytest.mark.requirement("KB-RESTORE-3", "KB-RESTORE-1")
def test_restored_states_not_registered_keep_their_entries_beside_new_and_registered_ones(
    state_backend: Any, storage: Any
) -> None:
    """Restored states that stay unregistered keep their entries through the next snapshot also when other states
    are registered and written beside them: a new state whose name sorts before theirs ("0-new", "a-new"), and
    one restored state registered and written. A backend keeping unregistered restored state as the raw entries it
    read, with their state index in the restored header, points them at another state of the new header."""
    first = ValueStateDescriptor("0-new", serializer=LongSerializer())
    second = ListStateDescriptor("a-new", element_serializer=StringSerializer())
    with keyed_backend(state_backend) as backend:
        fill(backend, range(20))
        expected = contents(backend)
        handle = snapshot_now(backend, location_for(storage, 1))
    with restore(state_backend, handle) as middle:
        new_states = (middle.get_or_create_state(first), middle.get_or_create_state(second))
        for i in range(5):
            middle.set_current_key(f"k{i}")
            new_states[0].update(100 + i)
            new_states[1].add(f"new{i}")
        middle.set_current_key("k1")
        middle.get_or_create_state(MAP).put("late", 7)  # the map is registered and written; v and l stay restored
        expected[("m", "k1")] = sorted([*expected[("m", "k1")], ("late", 7)])
        handle2 = snapshot_now(middle, location_for(storage, 2), 2)
    with restore(state_backend, handle2) as final:
        got = contents(final)
        new_got = {}
        for i in range(5):
            final.set_current_key(f"k{i}")
            new_got[f"k{i}"] = (final.get_or_create_state(first).value(), final.get_or_create_state(second).get())
    assert got == expected, (
        f"KB-RESTORE-3: restored states beside new ones, after a second snapshot: {diff(expected, got)}"
    )
    new_expected = {f"k{i}": (100 + i, [f"new{i}"]) for i in range(5)}
    assert new_got == new_expected, f"KB-RESTORE-1: the new states: expected {new_expected}, got {new_got}"


@pytest.mark.requirement("KB-RESTORE-5", "SP-3")
def test_foreign_native_handles_are_rejected(state_backend: Any, storage: Any) -> None:
    with keyed_backend(state_backend) as backend:
        fill(backend, range(3))
        handle = snapshot_now(backend, location_for(storage))
    foreign = dataclasses.replace(handle, snapshot_format="native:some-other-backend")
    with pytest.raises(UnsupportedSnapshotError):
        restore(state_backend, foreign)


@pytest.mark.requirement("KB-NOTIFY-1")
def test_notifications_do_not_change_state(state_backend: Any) -> None:
    with keyed_backend(state_backend) as backend:
        fill(backend, range(5))
        before = contents(backend)
        for checkpoint_id in (1, 7, 10**9):
            backend.notify_checkpoint_complete(checkpoint_id)
            backend.notify_checkpoint_aborted(checkpoint_id + 1)
        assert contents(backend) == before, "KB-NOTIFY-1: contents(backend): expected before"


@pytest.mark.requirement("KB-LIFE-1", "KB-LIFE-2")
def test_closed_backend_refuses_access(state_backend: Any, storage: Any) -> None:
    backend = keyed_backend(state_backend)
    with backend:
        backend.set_current_key("k")
        state = backend.get_or_create_state(VALUE)
    backend.close()  # idempotent
    with pytest.raises(BackendClosedError):
        state.update(1)
    with pytest.raises(BackendClosedError):
        backend.snapshot(1, 0, location_for(storage))
    with pytest.raises(BackendClosedError):
        backend.set_current_key("k")
    for call in (
        lambda: backend.get_or_create_state(LIST),
        lambda: list(backend.get_keys("v", VOID_NAMESPACE)),
        lambda: list(backend.get_keys_and_namespaces("v")),
    ):
        with pytest.raises(BackendClosedError):
            call()
    disposed = keyed_backend(state_backend)
    disposed.dispose()
    with pytest.raises(BackendClosedError):
        disposed.set_current_key("k")
    # a backend whose next snapshot would build on a completed one (an incremental or changelog backend's own path)
    with keyed_backend(state_backend) as checkpointed:
        fill(checkpointed, range(10))
        snapshot_now(checkpointed, location_for(storage, 1), 1)
        checkpointed.notify_checkpoint_complete(1)
        fill(checkpointed, range(5, 15), tag="x")
    try:
        got: Any = checkpointed.snapshot(2, 0, location_for(storage, 2))
    except BackendClosedError:
        return
    except Exception as exc:
        got = exc
    raise AssertionError(
        f"KB-LIFE-2: snapshot() after close() of a backend with a completed checkpoint: expected BackendClosedError, "
        f"got {got!r}"
    )


@pytest.mark.requirement("KB-1")
def test_backend_reports_what_it_was_created_with(state_backend: Any) -> None:
    with keyed_backend(state_backend, parallelism=3, index=1, max_parallelism=256) as backend:
        assert backend.number_of_key_groups == 256, f"KB-1: number_of_key_groups {backend.number_of_key_groups}"
        assert backend.key_group_range == KeyGroupRange(86, 170), f"KB-1: key_group_range {backend.key_group_range}"
        assert backend.key_serializer.snapshot_configuration() == StringSerializer().snapshot_configuration(), (
            "KB-1: backend.key_serializer.snapshot_configuration(): expected "
            "StringSerializer().snapshot_configuration()"
        )


@pytest.mark.requirement("KB-1", "KG-4", "ERR-3")
@pytest.mark.parametrize(
    ("max_parallelism", "key_groups"), [(128, KeyGroupRange(0, 128)), (0, KeyGroupRange(0, 0)), (40000, None)]
)
def test_invalid_creation_parameters_are_rejected(state_backend: Any, max_parallelism: int, key_groups: Any) -> None:
    from statecert.spec.keyed_backend import KeyedBackendParameters

    rng = key_groups or KeyGroupRange(0, 10)
    params = KeyedBackendParameters("job", "op", StringSerializer(), max_parallelism, rng)
    with pytest.raises(REJECTED):
        state_backend.create_keyed_state_backend(params).dispose()


@pytest.mark.requirement("KB-SNAP-2")
def test_snapshot_task_reports_done(state_backend: Any, storage: Any) -> None:
    with keyed_backend(state_backend) as backend:
        fill(backend, range(5))
        task = backend.snapshot(1, 0, location_for(storage))
        assert not task.done, "KB-SNAP-2: a snapshot task is done before run()"
        task.run()
        assert task.done, "KB-SNAP-2: a snapshot task is not done after run() returned"


# -- schema evolution on restore ---------------------------------------------------------------------------------


def _snapshot_with(state_backend: Any, storage: Any, descriptor: Any, value: Any, **kwargs: Any) -> Any:
    with keyed_backend(state_backend, **kwargs) as backend:
        backend.set_current_key("k")
        backend.get_or_create_state(descriptor).update(value)
        return snapshot_now(backend, location_for(storage))


@pytest.mark.requirement("SER-5")
@pytest.mark.capability("schema_evolution")
def test_value_migrates_on_restore(state_backend: Any, storage: Any) -> None:
    v1 = RecordSerializer([("name", StringSerializer(), "")])
    v2 = RecordSerializer([("name", StringSerializer(), ""), ("visits", LongSerializer(), 0)])
    handle = _snapshot_with(state_backend, storage, ValueStateDescriptor("p", serializer=v1), {"name": "ada"})
    with restore(state_backend, handle) as restored:
        restored.set_current_key("k")
        assert restored.get_or_create_state(ValueStateDescriptor("p", serializer=v2)).value() == {
            "name": "ada",
            "visits": 0,
        }, (
            "SER-5: restored.get_or_create_state(ValueStateDescriptor('p', serializer=v2)).value(): expected "
            "{'name': 'ada', 'visits': 0}"
        )


@pytest.mark.requirement("SER-3")
@pytest.mark.capability("schema_evolution")
def test_reconfigured_value_serializer_reads_old_state(state_backend: Any, storage: Any) -> None:
    handle = _snapshot_with(
        state_backend, storage, ValueStateDescriptor("e", serializer=EnumSerializer(["a", "b"])), "b"
    )
    with restore(state_backend, handle) as restored:
        restored.set_current_key("k")
        state = restored.get_or_create_state(ValueStateDescriptor("e", serializer=EnumSerializer(["z", "a", "b"])))
        assert state.value() == "b", "SER-3: state.value(): expected 'b'"
        state.update("z")
        assert state.value() == "z", "SER-3: state.value(): expected 'z'"


@pytest.mark.requirement("SER-7")
def test_incompatible_value_serializer_fails_registration(state_backend: Any, storage: Any) -> None:
    name = "visits_per_user"
    handle = _snapshot_with(state_backend, storage, ValueStateDescriptor(name, serializer=LongSerializer()), 5)
    with restore(state_backend, handle) as restored:
        with pytest.raises(StateMigrationError) as raised:
            restored.get_or_create_state(ValueStateDescriptor(name, serializer=StringSerializer()))
        assert name in str(raised.value), f"SER-7: the error must name the state {name!r}, got {str(raised.value)!r}"
        restored.set_current_key("k")
        got = restored.get_or_create_state(ValueStateDescriptor(name, serializer=LongSerializer())).value()
        assert got == 5, f"SER-7: after a refused registration, the restored state reads {got!r}, not 5"


# A descriptor of each other kind under the name of VALUE: asking for it must not give state over VALUE's entries.
OTHER_KINDS = {
    "list": ListStateDescriptor(VALUE.name, element_serializer=LongSerializer()),
    "map": MapStateDescriptor(VALUE.name, user_key_serializer=LongSerializer(), user_value_serializer=LongSerializer()),
    "reducing": ReducingStateDescriptor(VALUE.name, reduce_function=lambda a, b: a + b, serializer=LongSerializer()),
}


@pytest.mark.requirement("KS-2")
@pytest.mark.parametrize("kind", sorted(OTHER_KINDS))
@pytest.mark.parametrize("restored", [False, True], ids=["registered", "restored"])
def test_a_state_asked_for_as_another_kind_is_refused(
    state_backend: Any, storage: Any, kind: str, restored: bool
) -> None:
    """Value state registered (or restored) under a name, then asked for as list, map or reducing state under it:
    the request fails, as Flink's `checkStateMetaInfo` ("Incompatible key/value state types"), and the value stays."""

    def refused_and_kept(backend: Any) -> None:
        backend.set_current_key("k")
        with pytest.raises((StateMigrationError, IllegalStateError)):
            backend.get_or_create_state(OTHER_KINDS[kind])
        got = backend.get_or_create_state(VALUE).value()
        assert got == 5, f"KS-2: after asking for value state {VALUE.name!r} as {kind} state, it reads {got!r}, not 5"

    with keyed_backend(state_backend) as backend:
        backend.set_current_key("k")
        backend.get_or_create_state(VALUE).update(5)
        if not restored:
            refused_and_kept(backend)
            return
        handle = snapshot_now(backend, location_for(storage))
    with restore(state_backend, handle) as subject:
        refused_and_kept(subject)


@pytest.mark.requirement("SER-6")
def test_key_serializer_migration_fails_restore(state_backend: Any, storage: Any) -> None:
    handle = _snapshot_with(state_backend, storage, VALUE, 5)
    with pytest.raises(StateMigrationError):
        restore(state_backend, handle, key_serializer=LongSerializer())


@pytest.mark.requirement("SER-6", "SER-3")
@pytest.mark.capability("schema_evolution")
def test_reconfigured_key_serializer_finds_every_restored_key(state_backend: Any, storage: Any) -> None:
    names = ["a", "b", "c"]
    with keyed_backend(state_backend, key_serializer=EnumSerializer(names)) as backend:
        state = backend.get_or_create_state(VALUE)
        for i, name in enumerate(names):
            backend.set_current_key(name)
            state.update(i)
        handle = snapshot_now(backend, location_for(storage))
    # reordered and extended: compatible once reconfigured to the old ordinals, so every key keeps its bytes
    with restore(state_backend, handle, key_serializer=EnumSerializer(["z", "c", "b", "a"])) as restored:
        state = restored.get_or_create_state(VALUE)
        got = {}
        for name in names:
            restored.set_current_key(name)
            got[name] = state.value()
        expected = {name: i for i, name in enumerate(names)}
        assert got == expected, (
            f"SER-6: restored with a key serializer that is compatible once reconfigured, keys read {got}, expected "
            f"{expected} (the keys must be looked up with the reconfigured serializer's bytes)"
        )
        restored.set_current_key("z")
        state.update(9)
        keys = sorted(restored.get_keys(VALUE.name, VOID_NAMESPACE))
        assert keys == ["a", "b", "c", "z"], f"SER-6: get_keys after reconfiguration gave {keys}"


@pytest.mark.requirement("TTL-5")
@pytest.mark.capability("ttl")
def test_ttl_duration_may_change(state_backend: Any, storage: Any) -> None:
    handle = _snapshot_with(
        state_backend,
        storage,
        ValueStateDescriptor("t", ttl=TtlConfig(10**9), serializer=LongSerializer()),
        1,
    )
    with restore(state_backend, handle) as restored:
        restored.set_current_key("k")
        state = restored.get_or_create_state(
            ValueStateDescriptor("t", ttl=TtlConfig(2 * 10**9), serializer=LongSerializer())
        )
        assert state.value() == 1, "TTL-5: state.value(): expected 1"


@pytest.mark.requirement("SB-1", "SB-2")
def test_backend_is_a_factory_declaring_capabilities(state_backend: Any) -> None:
    from statecert.spec.backend import StateBackend

    assert isinstance(state_backend, StateBackend), "SB-1, SB-2: expected isinstance(state_backend, StateBackend)"
    caps = state_backend.capabilities
    for name in (
        "async_snapshots",
        "incremental_checkpoints",
        "canonical_savepoints",
        "rescaling",
        "operator_state",
        "ttl",
        "schema_evolution",
    ):
        assert isinstance(getattr(caps, name), bool), f"SB-1, SB-2: capabilities.{name}"


@pytest.mark.requirement("SB-3")
def test_undeclared_incremental_checkpoints_do_not_pretend(state_backend: Any, tmp_path: Any) -> None:
    """A backend without incremental checkpoints writes a full, self-contained snapshot each time: nothing in the
    shared scope, which an incremental backend would use (no inlining, so every stream is a file)."""
    from statecert.reference.storage.filesystem import FileSystemCheckpointStorage

    if state_backend.capabilities.incremental_checkpoints:
        pytest.skip("backend declares incremental checkpoints")
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    with keyed_backend(state_backend) as backend:
        fill(backend, range(30))
        snapshot_now(backend, location_for(storage, 1))
        fill(backend, range(30, 31))
        second = snapshot_now(backend, location_for(storage, 2))
    access = storage.create_checkpoint_storage("job")
    fs, shared = fsspec.core.url_to_fs(access.shared_dir)
    assert not fs.exists(shared) or fs.ls(shared) == [], "SB-3: expected not fs.exists(shared) or fs.ls(shared) == []"
    with restore(state_backend, second) as restored:
        assert len(_keys(restored, "v")) == 31, "SB-3: len(_keys(restored, 'v')): expected 31"
