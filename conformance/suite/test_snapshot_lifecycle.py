"""Snapshots under way and snapshots of size (chapter KB): closing a backend, or cancelling the task, ends a snapshot
whose asynchronous part is already writing, and large snapshots, read back key group by key group, lose nothing, nor do
states whose counts exceed 16 bits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statecert.conformance.helpers import (
    STATE_NAMES,
    RecordingStreamFactory,
    create_subtasks,
    end_a_snapshot_while_it_writes,
    keyed_backend,
    location_for,
    owner_of,
    shown_name,
    snapshot_now,
    stream_handles,
    unreferenced_files,
)
from statecert.reference.checkpointing import take_snapshot
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.handles import ByteStreamStateHandle
from statecert.spec.state import VOID_NAMESPACE, ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

KEYS = StringSerializer()
VALUE = ValueStateDescriptor("v", serializer=LongSerializer())
BLOB = ValueStateDescriptor("blob", serializer=StringSerializer())
LIST = ListStateDescriptor("l", element_serializer=LongSerializer())
MAP = MapStateDescriptor("m", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())


@pytest.mark.requirement("KB-SNAP-6")
@pytest.mark.capability("async_snapshots")
@pytest.mark.parametrize("end", ["close", "cancel"])
def test_a_snapshot_ended_while_it_writes_leaves_nothing(state_backend: Any, tmp_path: Path, end: str) -> None:
    """`close()` of the backend, or the task's own `cancel()`, while the asynchronous part writes: `run()` raises
    SnapshotCancelledError and leaves no file behind. After a `cancel()` the backend goes on, and the files left are
    those its next snapshot references (a changelog backend's materialization, KB-SNAP-6); that snapshot is whole."""
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    backend = keyed_backend(state_backend)
    state = backend.get_or_create_state(VALUE)
    for i in range(500):
        backend.set_current_key(f"k{i}")
        state.update(i)
    end_a_snapshot_while_it_writes(backend, location_for(storage), end, "KB-SNAP-6")
    following = None
    if end == "cancel":
        following = snapshot_now(backend, location_for(storage, 2), 2)
        backend.dispose()
        with keyed_backend(state_backend, restore=[following] if following is not None else []) as restored:
            got = restored.num_state_entries("v")
        assert got == 500, f"KB-SNAP-6: the snapshot after one cancelled while writing restored {got} of 500 entries"
    leftovers = unreferenced_files(tmp_path / "c", following)
    assert leftovers == [], (
        f"KB-SNAP-6: a snapshot cancelled by {end}() while writing left files"
        f"{' that the next snapshot does not reference' if end == 'cancel' else ''}: {leftovers}"
    )


@pytest.mark.requirement("FMT-6", "KB-RESTORE-2", "KB-SNAP-1")
@pytest.mark.capability("rescaling")
@pytest.mark.parametrize(("old", "new"), [(1, 1), (1, 3), (3, 2)])
def test_large_snapshots_restore_key_group_by_key_group(state_backend: Any, tmp_path: Path, old: int, new: int) -> None:
    """About 1.3 MB per snapshot across 1,024 key groups: offsets beyond 16 and 20 bits must hold."""
    max_parallelism = 1024
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"))
    keys = [f"key-{i}" for i in range(2000)]
    subtasks = create_subtasks(state_backend, KEYS, old, max_parallelism)
    for i, key in enumerate(keys):
        owner_of(subtasks, key, max_parallelism).get_or_create_state(BLOB).update(f"{i:08d}" + "x" * 640)
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    pointer = take_snapshot(subtasks, location, 1, max_parallelism)
    for s in subtasks:
        s.dispose()
    operator = storage.load_checkpoint(pointer).operator("op")
    seen: dict[str, str] = {}
    for s in create_subtasks(state_backend, KEYS, new, max_parallelism, restore_from=operator):
        state = s.keyed.get_or_create_state(BLOB)
        for key in list(s.keyed.get_keys("blob", VOID_NAMESPACE)):
            s.keyed.set_current_key(key)
            seen[key] = state.value()
        s.dispose()
    missing = sorted(set(keys) - set(seen))
    index = {k: i for i, k in enumerate(keys)}
    wrong = [k for k in seen if seen[k][:8] != f"{index[k]:08d}" or len(seen[k]) != 648]
    assert not missing and not wrong, (
        f"FMT-6: {old}->{new} at max parallelism {max_parallelism}: {len(missing)} keys missing "
        f"(e.g. {missing[:3]}), {len(wrong)} wrong (e.g. {wrong[:3]})"
    )


BEYOND_16_BITS = 70_000
"""More entries than 16 bits count (65,535), and more writes than a memtable of 2**14 or 2**16 puts holds."""


def _written_then_restored(
    state_backend: Any,
    tmp_path: Path,
    write: Callable[[Any], None],
    check: Callable[[Any, str], None],
    **backend_options: Any,
) -> None:
    """`write` into a new keyed backend, `check(backend, "live")`, snapshot it, then `check(restored, "after a
    restore")` in a backend restored from that snapshot (made with the same `backend_options`)."""
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"))
    with keyed_backend(state_backend, **backend_options) as backend:
        write(backend)
        check(backend, "live")
        handle = snapshot_now(backend, location_for(storage, 1))
    with keyed_backend(state_backend, restore=[handle], **backend_options) as restored:
        check(restored, "after a restore")


@pytest.mark.requirement("KB-RESTORE-1", "KS-VALUE-1", "KS-LIST-1", "KS-MAP-2")
@pytest.mark.heavy
def test_state_beyond_16_bit_counts_comes_back_whole(state_backend: Any, tmp_path: Path) -> None:
    """70,000 keys in one key group (max parallelism 1), and one key whose list holds 70,000 elements and whose map
    holds 70,000 user keys: every value reads back as written, live and after a restore. A count written in 16
    bits, or a write lost where a bounded in-memory table turns over, shows only at this size."""
    keys = [f"k{i}" for i in range(BEYOND_16_BITS)]
    elements = list(range(BEYOND_16_BITS))
    entries = {f"u{i}": i for i in range(BEYOND_16_BITS)}

    def write(backend: Any) -> None:
        value = backend.get_or_create_state(VALUE)
        for i, key in enumerate(keys):
            backend.set_current_key(key)
            value.update(i)
        backend.set_current_key("big")
        backend.get_or_create_state(LIST).add_all(elements)
        backend.get_or_create_state(MAP).put_all(entries)

    def check(backend: Any, when: str) -> None:
        _assert_whole(backend, keys, elements, entries, when)

    _written_then_restored(state_backend, tmp_path, write, check, max_parallelism=1)


@pytest.mark.requirement("KB-RESTORE-1", "KS-3")
@pytest.mark.heavy
def test_a_key_in_more_than_65535_namespaces_comes_back_whole(state_backend: Any, tmp_path: Path) -> None:
    """One key's value in 70,000 namespaces (a window per element, say): every namespace reads back its own value,
    live and after a restore. A snapshot counting a key's namespaces in 16 bits shows only at this size."""

    def write(backend: Any) -> None:
        backend.set_current_key("k")
        value = backend.get_or_create_state(VALUE, LongSerializer())
        for namespace in range(BEYOND_16_BITS):
            value.set_current_namespace(namespace)
            value.update(namespace)

    def check(backend: Any, when: str) -> None:
        backend.set_current_key("k")
        value = backend.get_or_create_state(VALUE, LongSerializer())
        wrong = []
        for namespace in range(BEYOND_16_BITS):
            value.set_current_namespace(namespace)
            if (got := value.value()) != namespace:
                wrong.append((namespace, got))
        requirement = "KS-3" if when == "live" else "KB-RESTORE-1"
        assert not wrong, (
            f"{requirement}: one key in {BEYOND_16_BITS} namespaces, {when}: {len(wrong)} values wrong, "
            f"(namespace, got) e.g. {wrong[:3]}"
        )

    _written_then_restored(state_backend, tmp_path, write, check)


def _assert_whole(backend: Any, keys: list[str], elements: list[int], entries: dict[str, int], when: str) -> None:
    value = backend.get_or_create_state(VALUE)
    wrong = []
    for i, key in enumerate(keys):
        backend.set_current_key(key)
        if (got := value.value()) != i:
            wrong.append((key, i, got))
    requirement = "KS-VALUE-1" if when == "live" else "KB-RESTORE-1"
    assert not wrong, (
        f"{requirement}: {len(keys)} keys in one key group, {when}: {len(wrong)} values wrong, (key, expected, got) "
        f"e.g. {wrong[:3]}"
    )
    backend.set_current_key("big")
    got_entries = dict(backend.get_or_create_state(MAP).items())
    assert got_entries == entries, (
        f"KS-MAP-2: a map of {len(entries)} user keys, {when}: items() gave {len(got_entries)} "
        f"({len(set(entries) - set(got_entries))} missing)"
    )
    got_elements = backend.get_or_create_state(LIST).get()
    assert got_elements == elements, (
        f"KS-LIST-1: a list of {len(elements)} elements, {when}: get() gave {len(got_elements or [])}"
    )


MANY_STATES = 129
"""Names of the many-states test: a value and a list state each, 258 states, more than 8 bits number (Flink's full
snapshots number a backend's states in 16 bits). Not more: RocksDB takes 14 s for 258 column families, 67 s for 600."""


@pytest.mark.requirement("KB-RESTORE-1", "KS-2")
@pytest.mark.heavy
def test_hundreds_of_states_come_back_apart(state_backend: Any, tmp_path: Path) -> None:
    """A backend with 258 states, values and lists under one key: every state reads back its own, live and after a
    restore. A state numbered in 8 bits in the snapshot comes back as another state's entries."""
    names = [f"s{i:03d}" for i in range(MANY_STATES)]
    values = {n: ValueStateDescriptor(f"{n}-v", serializer=LongSerializer()) for n in names}
    lists = {n: ListStateDescriptor(f"{n}-l", element_serializer=LongSerializer()) for n in names}

    def read(backend: Any, when: str) -> None:
        backend.set_current_key("k")
        got = {
            n: (backend.get_or_create_state(values[n]).value(), backend.get_or_create_state(lists[n]).get())
            for n in names
        }
        wrong = {n: g for i, (n, g) in enumerate(got.items()) if g != (i, [i, -i])}
        requirement = "KS-2" if when == "live" else "KB-RESTORE-1"
        assert not wrong, (
            f"{requirement}: {2 * MANY_STATES} states, {when}: state sNNN should read (NNN, [NNN, -NNN]); "
            f"{len(wrong)} wrong, e.g. {dict(list(wrong.items())[:3])}"
        )

    def write(backend: Any) -> None:
        backend.set_current_key("k")
        for i, n in enumerate(names):
            backend.get_or_create_state(values[n]).update(i)
            backend.get_or_create_state(lists[n]).add_all([i, -i])

    _written_then_restored(state_backend, tmp_path, write, read)


@pytest.mark.requirement("KS-2", "KB-RESTORE-1")
def test_state_names_are_any_text(state_backend: Any, tmp_path: Path) -> None:
    """A state's name is any text without NUL: each of the STATE_NAMES is a state of its own, live and after a
    restore. A name split at a separator, encoded as ASCII, or dropped when empty shows only with such names."""
    descriptors = {name: ValueStateDescriptor(name, serializer=LongSerializer()) for name in STATE_NAMES}
    expected = {shown_name(name): i for i, name in enumerate(STATE_NAMES)}

    def read(backend: Any, when: str) -> None:
        backend.set_current_key("k")
        got = {shown_name(name): backend.get_or_create_state(d).value() for name, d in descriptors.items()}
        requirement = "KS-2" if when == "live" else "KB-RESTORE-1"
        assert got == expected, f"{requirement}: value() of each state, {when}: expected {expected}, got {got}"

    def write(backend: Any) -> None:
        backend.set_current_key("k")
        for i, descriptor in enumerate(descriptors.values()):
            backend.get_or_create_state(descriptor).update(i)

    _written_then_restored(state_backend, tmp_path, write, read)


@pytest.mark.requirement("KB-SNAP-1", "IF-7")
def test_a_snapshot_is_written_through_the_stream_factory(state_backend: Any, tmp_path: Path) -> None:
    """Every stream a snapshot's handle references was returned by the stream factory of that snapshot or of an
    earlier one (an incremental checkpoint reuses files), empty ones aside (a storage returns no handle for an empty
    stream): state carried in bytes the backend made itself would bypass the storage's size limit, inline threshold,
    checksums and cleanup."""
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    returned: list[Any] = []
    with keyed_backend(state_backend) as backend:
        state = backend.get_or_create_state(VALUE)
        for checkpoint_id in (1, 2, 3):
            for i in range(checkpoint_id * 50):
                backend.set_current_key(f"k{i}")
                state.update(i + checkpoint_id)
            factory = RecordingStreamFactory(location_for(storage, checkpoint_id), returned)
            handle = backend.snapshot(checkpoint_id, 0, factory).run()
            backend.notify_checkpoint_complete(checkpoint_id)
            foreign = [
                s
                for s in stream_handles(handle)
                if not any(s == r for r in returned)
                and not (isinstance(s, ByteStreamStateHandle) and not s.data)  # an empty file: no stream returns one
            ]
            assert not foreign, (
                f"KB-SNAP-1: checkpoint {checkpoint_id}'s handle references {len(foreign)} streams no stream factory "
                f"returned: {foreign[:2]}"
            )
