"""Incremental checkpoints and native savepoints (KB-SNAP, KB-NOTIFY, SP-4): every retained checkpoint restores
while later ones complete, an aborted checkpoint's files are never the base of the next one, nor a subsumed one's
after a late notification, nor a notified savepoint's, and a native savepoint contains all of its files."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import fsspec
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from statecert.conformance.helpers import (
    CHECKPOINT_OUTCOMES,
    files_of,
    keyed_backend,
    location_for,
    notify_outcome,
    snapshot_now,
)
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.handles import ChangelogStateBackendHandle
from statecert.spec.keyed_backend import CheckpointOptions, SnapshotType
from statecert.spec.state import MapStateDescriptor, ValueStateDescriptor

VALUE = ValueStateDescriptor("v", serializer=LongSerializer())
MAP = MapStateDescriptor("m", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())


def write_round(backend: Any, round_: int, keys: int = 400) -> None:
    """Changes a share of the keys each round, and adds new ones, so that every checkpoint differs."""
    value, mapping = backend.get_or_create_state(VALUE), backend.get_or_create_state(MAP)
    for i in range(round_ * 37 % keys, keys, 3):
        backend.set_current_key(f"k{i}")
        value.update(i * 100 + round_)
        mapping.put(f"r{round_}", i)
    for i in range(keys, keys + 40):
        backend.set_current_key(f"k{i}-{round_}")
        value.update(round_)


def past_a_completed_checkpoint(backend: Any, storage: Any) -> Any:
    """Round 1 taken as checkpoint 1, which completes, then round 2 written: where the tests of what a later
    checkpoint may build on start. Returns checkpoint 1's handle."""
    write_round(backend, 1)
    first = snapshot_now(backend, location_for(storage, 1), 1)
    backend.notify_checkpoint_complete(1)
    write_round(backend, 2)
    return first


def contents(backend: Any) -> dict[tuple[str, Any], Any]:
    value, mapping = backend.get_or_create_state(VALUE), backend.get_or_create_state(MAP)
    out: dict[tuple[str, Any], Any] = {}
    for name, state in (("v", value), ("m", mapping)):
        for key, _ in sorted(backend.get_keys_and_namespaces(name)):
            backend.set_current_key(key)
            out[(name, key)] = state.value() if name == "v" else sorted(state.items())
    return out


def storage_with_files(tmp_path: Path) -> FileSystemCheckpointStorage:
    return FileSystemCheckpointStorage(
        str(tmp_path / "c"), savepoint_dir=str(tmp_path / "sp"), file_state_size_threshold=0
    )


def delete_files(paths: set[str]) -> None:
    """What the coordinator does with the files of a checkpoint aborted or subsumed that no other references."""
    for path in paths:
        fs, p = fsspec.core.url_to_fs(path)
        if fs.exists(p):
            fs.rm(p)


@pytest.mark.requirement("KB-SNAP-8", "KB-NOTIFY-1")
def test_every_retained_checkpoint_restores_while_later_ones_complete(state_backend: Any, tmp_path: Path) -> None:
    storage = storage_with_files(tmp_path)
    taken: list[tuple[Any, dict[Any, Any]]] = []
    with keyed_backend(state_backend) as backend:
        for checkpoint_id in range(1, 6):
            write_round(backend, checkpoint_id)
            expected = contents(backend)
            handle = snapshot_now(backend, location_for(storage, checkpoint_id), checkpoint_id)
            backend.notify_checkpoint_complete(checkpoint_id)
            taken.append((handle, expected))
    for checkpoint_id, (handle, expected) in enumerate(taken, start=1):
        missing = sorted(p for p in files_of(handle) if not fsspec.core.url_to_fs(p)[0].exists(p))
        assert not missing, (
            f"KB-SNAP-8: checkpoint {checkpoint_id} is retained, but files it references were deleted: {missing[:3]}"
        )
        with keyed_backend(state_backend, restore=[handle]) as restored:
            assert contents(restored) == expected, f"KB-SNAP-8: retained checkpoint {checkpoint_id} restores wrong"


@pytest.mark.requirement("KB-SNAP-9", "KB-NOTIFY-1")
def test_an_aborted_checkpoint_is_never_the_base_of_the_next(state_backend: Any, tmp_path: Path) -> None:
    storage = storage_with_files(tmp_path)
    with keyed_backend(state_backend) as backend:
        first = past_a_completed_checkpoint(backend, storage)
        aborted_location = location_for(storage, 2)
        aborted = snapshot_now(backend, aborted_location, 2)
        backend.notify_checkpoint_aborted(2)
        # What the coordinator does with an aborted checkpoint: its files are deleted, except those a completed
        # checkpoint still references.
        delete_files(files_of(aborted) - files_of(first))
        aborted_location.dispose_on_failure()
        write_round(backend, 3)
        expected = contents(backend)
        third = snapshot_now(backend, location_for(storage, 3), 3)
        backend.notify_checkpoint_complete(3)
    with keyed_backend(state_backend, restore=[third]) as restored:
        assert contents(restored) == expected, "KB-SNAP-9: the checkpoint after an aborted one restores wrong"


@pytest.mark.requirement("KB-SNAP-9", "KB-NOTIFY-1")
def test_a_late_notification_never_moves_the_base_back(state_backend: Any, tmp_path: Path) -> None:
    """Flink's checkpoint subsuming contract: checkpoints overlap and notifications are best effort, so checkpoint
    1's may arrive after checkpoint 2's. By then 2 has subsumed 1 and the coordinator has deleted 1's files that 2
    does not reference; a backend building its next checkpoint on 1 references deleted files."""
    storage = storage_with_files(tmp_path)
    with keyed_backend(state_backend) as backend:
        write_round(backend, 1)
        first = snapshot_now(backend, location_for(storage, 1), 1)
        write_round(backend, 2)
        second = snapshot_now(backend, location_for(storage, 2), 2)
        backend.notify_checkpoint_complete(2)
        backend.notify_checkpoint_complete(1)  # late: checkpoint 2 completed, and subsumed 1, before it arrived
        delete_files(files_of(first) - files_of(second))  # the shared state registry discards what only 1 used
        write_round(backend, 3)
        expected = contents(backend)
        third = snapshot_now(backend, location_for(storage, 3), 3)
        backend.notify_checkpoint_complete(3)
    missing = sorted(files_of(third) & (files_of(first) - files_of(second)))
    assert not missing, (
        f"KB-SNAP-9: notify_checkpoint_complete(2) then (1): checkpoint 3 references {len(missing)} files of the "
        f"subsumed checkpoint 1, deleted with it: {missing[:3]}"
    )
    with keyed_backend(state_backend, restore=[third]) as restored:
        assert contents(restored) == expected, "KB-SNAP-9: after a late notification, checkpoint 3 restores wrong"


@pytest.mark.requirement("KB-SNAP-9", "SP-4", "CL-5")
@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(SnapshotType.SAVEPOINT_CANONICAL, marks=pytest.mark.capability("canonical_savepoints")),
        pytest.param(SnapshotType.SAVEPOINT_NATIVE, marks=pytest.mark.capability("native_savepoint_format")),
    ],
)
def test_a_savepoint_is_never_the_base_of_a_checkpoint(state_backend: Any, tmp_path: Path, kind: SnapshotType) -> None:
    """Flink notifies the completion of savepoints as of checkpoints; a savepoint belongs to the user, who may delete
    it at once, so the checkpoints after it never reference its files, nor stop referencing what they still need
    (Flink's incremental snapshots build only on checkpoints they uploaded; a changelog backend keeps its log until a
    checkpoint holding a materialization completes, CL-5)."""
    storage = storage_with_files(tmp_path)
    access = storage.create_checkpoint_storage("job")
    with keyed_backend(state_backend) as backend:
        past_a_completed_checkpoint(backend, storage)
        location = access.initialize_location_for_savepoint(2)
        backend.snapshot(2, 0, location, CheckpointOptions(kind)).run()
        backend.notify_checkpoint_complete(2)
        write_round(backend, 3)
        expected = contents(backend)
        third = snapshot_now(backend, location_for(storage, 3), 3)
        backend.notify_checkpoint_complete(3)
    root = location.pointer.rstrip("/")
    inside = sorted(p for p in files_of(third) if p.startswith(root + "/"))
    assert not inside, (
        f"KB-SNAP-9: checkpoint 3, after {kind.value} 2 was notified complete, references {len(inside)} of the "
        f"savepoint's files in {root}: {inside[:3]}"
    )
    shutil.rmtree(tmp_path / "sp")  # the user deletes the savepoint
    with keyed_backend(state_backend, restore=[third]) as restored:
        got = contents(restored)
    # A changelog's checkpoint references its materialization and the log since it (CL-5): a savepoint is neither.
    requirement = "CL-5" if isinstance(third, ChangelogStateBackendHandle) else "KB-SNAP-9"
    assert got == expected, (
        f"{requirement}: checkpoint 3, taken after {kind.value} 2 was notified complete, restores "
        f"{len(got)} entries, {sum(got.get(k) != v for k, v in expected.items())} of {len(expected)} expected "
        "ones wrong or missing"
    )


@pytest.mark.requirement("KB-SNAP-10")
def test_a_full_checkpoint_references_no_earlier_file(state_backend: Any, tmp_path: Path) -> None:
    """NO_CLAIM (COORD-13): a job restored from another job's checkpoint takes its first checkpoint full, after which
    the other job's checkpoint may be deleted: the full checkpoint, and an incremental one built on it, still
    restore. In a running backend too, a full checkpoint shares no file with the checkpoints before it."""
    first_job, second_job = storage_with_files(tmp_path / "first"), storage_with_files(tmp_path / "second")
    full = CheckpointOptions(SnapshotType.CHECKPOINT, full=True)
    with keyed_backend(state_backend) as backend:
        earlier: set[str] = set()
        for checkpoint_id in (1, 2):
            write_round(backend, checkpoint_id)
            started_from = snapshot_now(backend, location_for(first_job, checkpoint_id), checkpoint_id)
            backend.notify_checkpoint_complete(checkpoint_id)
            earlier |= files_of(started_from)
        write_round(backend, 3)
        in_place = backend.snapshot(3, 0, location_for(first_job, 3), full).run()
        shared = sorted(files_of(in_place) & earlier)
        assert not shared, (
            f"KB-SNAP-10: full checkpoint 3 references {len(shared)} files of checkpoints 1-2: {shared[:3]}"
        )
    with keyed_backend(state_backend, restore=[started_from]) as restored:
        write_round(restored, 3)
        expected = {"full checkpoint 3": contents(restored)}
        handles = {"full checkpoint 3": restored.snapshot(3, 0, location_for(second_job, 3), full).run()}
        restored.notify_checkpoint_complete(3)
        shared = sorted(files_of(handles["full checkpoint 3"]) & files_of(started_from))
        assert not shared, (
            f"KB-SNAP-10: full checkpoint 3 references {len(shared)} files of the checkpoint it was restored from: "
            f"{shared[:3]}"
        )
        write_round(restored, 4)
        expected["checkpoint 4, after it"] = contents(restored)
        handles["checkpoint 4, after it"] = snapshot_now(restored, location_for(second_job, 4), 4)
        restored.notify_checkpoint_complete(4)
    shutil.rmtree(tmp_path / "first")  # its owner deletes the snapshot the second job started from
    for name, handle in handles.items():
        with keyed_backend(state_backend, restore=[handle]) as again:
            assert contents(again) == expected[name], (
                f"KB-SNAP-10: {name} restores wrong once the checkpoint the job started from is deleted"
            )


@pytest.mark.requirement("SP-4", "SP-3")
@pytest.mark.capability("native_savepoint_format")
def test_native_savepoint_contains_its_own_files(state_backend: Any, tmp_path: Path) -> None:
    storage = storage_with_files(tmp_path)
    access = storage.create_checkpoint_storage("job")
    with keyed_backend(state_backend) as backend:
        for checkpoint_id in (1, 2):
            write_round(backend, checkpoint_id)
            snapshot_now(backend, location_for(storage, checkpoint_id), checkpoint_id)
            backend.notify_checkpoint_complete(checkpoint_id)
        write_round(backend, 3)
        expected = contents(backend)
        location = access.initialize_location_for_savepoint(3)
        savepoint = backend.snapshot(3, 0, location, CheckpointOptions(SnapshotType.SAVEPOINT_NATIVE)).run()
    root = location.pointer.rstrip("/")
    outside = sorted(p for p in files_of(savepoint) if not p.startswith(root + "/"))
    assert not outside, f"SP-4: a native savepoint in {root} references files outside it: {outside[:3]}"
    shutil.rmtree(tmp_path / "c")  # the job's checkpoints are gone; the savepoint must not need them
    with keyed_backend(state_backend, restore=[savepoint]) as restored:
        assert contents(restored) == expected, "SP-4: the native savepoint restores wrong without the checkpoints"


@pytest.mark.requirement("KB-SNAP-9", "KB-SNAP-5", "KB-NOTIFY-1", "CL-5")
@pytest.mark.parametrize("order", ["2 written, then 3 called", "3 called, then 2 written"])
def test_a_checkpoint_taken_while_an_earlier_one_is_in_flight_restores_whole_when_that_one_aborts(
    state_backend: Any, tmp_path: Path, order: str
) -> None:
    """Checkpoint 3 is called while checkpoint 2 is in flight (Flink's concurrent checkpoints), and 2 is aborted
    before 3's asynchronous part runs: 3 restores the state at its call. The aborted checkpoint's directory is
    disposed at once; its other files are deleted once 3 completes, unless 1 or 3 references them (a changelog
    backend's 3 may build on 2's log segment when its synchronous part came after that upload, CL-5)."""
    storage = storage_with_files(tmp_path)
    with keyed_backend(state_backend) as backend:
        first = past_a_completed_checkpoint(backend, storage)
        aborted_location = location_for(storage, 2)
        task = backend.snapshot(2, 0, aborted_location)
        second = task.run() if order.startswith("2 written") else None
        write_round(backend, 3)
        expected = contents(backend)
        later = backend.snapshot(3, 0, location_for(storage, 3))
        if second is None:
            second = task.run()
        backend.notify_checkpoint_aborted(2)
        aborted_location.dispose_on_failure()
        third = later.run()
        backend.notify_checkpoint_complete(3)
        delete_files(files_of(second) - files_of(first) - files_of(third))
    with keyed_backend(state_backend, restore=[third]) as restored:
        got = contents(restored)
    wrong = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
    assert not wrong, (
        f"KB-SNAP-9: checkpoint 3, called while 2 was in flight ({order}), 2 then aborted: {len(wrong)} entries "
        f"restored wrong, e.g. {[(k, expected.get(k), got.get(k)) for k in wrong[:3]]}"
    )


CHAIN_KEYS = [f"c{i}" for i in range(16)]
"""Few keys over 128 key groups: most lie alone in their key group, so clearing one empties its key group."""
CHAIN_OPS = st.lists(
    st.tuples(
        st.sampled_from(["put", "remove", "clear"]),
        st.sampled_from(CHAIN_KEYS),
        st.sampled_from(["a", "b", "c"]),
        st.integers(-(2**31), 2**31),
    ),
    max_size=24,
)


def apply_chain_ops(backend: Any, model: dict[str, dict[str, Any]], ops: list[tuple[str, str, str, int]]) -> None:
    """Writes and deletions of value and map state, applied to `backend` and to the plain-dict `model` (key ->
    {"v": value, "m": {user key: value}})."""
    value, mapping = backend.get_or_create_state(VALUE), backend.get_or_create_state(MAP)
    for op, key, user_key, number in ops:
        backend.set_current_key(key)
        entry = model.setdefault(key, {"v": None, "m": {}})
        if op == "put":
            value.update(number)
            mapping.put(user_key, number)
            entry["v"], entry["m"][user_key] = number, number
        elif op == "remove":
            mapping.remove(user_key)
            entry["m"].pop(user_key, None)
        else:
            value.clear()
            mapping.clear()
            entry["v"], entry["m"] = None, {}


def chain_contents(model: dict[str, dict[str, Any]]) -> dict[tuple[str, Any], Any]:
    """The model as `contents` reads a backend: entries only of keys that hold one."""
    out: dict[tuple[str, Any], Any] = {}
    for key, entry in model.items():
        if entry["v"] is not None:
            out[("v", key)] = entry["v"]
        if entry["m"]:
            out[("m", key)] = sorted(entry["m"].items())
    return out


@pytest.mark.requirement("KB-SNAP-8", "KB-SNAP-9", "KB-NOTIFY-1", "CS-3")
@given(
    rounds=st.lists(st.tuples(CHAIN_OPS, st.sampled_from(CHECKPOINT_OUTCOMES), st.booleans()), min_size=1, max_size=6),
)
@example(rounds=[([("clear", "c0", "a", 0), ("remove", "c1", "a", 0)], "completed", False)])  # deletions only
@example(  # checkpoint 2's completion heard after 3's synchronous part; 3 aborts; 4 builds on 2 with 3's changes
    rounds=[
        ([("put", "c1", "b", 5)], "completed", True),
        ([("put", "c2", "b", 6)], "aborted", False),
        ([], "completed", False),
    ]
)
def test_the_latest_checkpoint_restores_after_the_ones_before_it_are_subsumed(
    certification: Any, tmp_path_factory: Any, rounds: list[tuple[list[tuple[str, str, str, int]], str, bool]]
) -> None:
    """A chain of checkpoints over writes and deletions (a key cleared, a map entry removed, a key group emptied),
    each completed, aborted or completed without the backend being told, handled as the coordinator handles them
    when it retains one checkpoint (CKP-1): a completed one subsumes the one before, whose exclusive directory is
    deleted with the shared files the new one does not reference (CS-3); an aborted one's directory is deleted at
    once, and its shared files when the next checkpoint completes, unless that one or the retained one references
    them (a changelog backend's materialization is its own, not the aborted checkpoint's, CL-2, and a snapshot taken
    before the abort was heard may build on its log segment, CL-5; the tests above check that an aborted
    checkpoint is never a base). A notification may reach the backend late, after the next checkpoint's
    synchronous part (Flink's notifications are asynchronous). After each checkpoint, the retained one restores its
    state."""
    storage = storage_with_files(tmp_path_factory.mktemp("chain"))
    model: dict[str, dict[str, Any]] = {}
    every_key = [("put", key, "a", i) for i, key in enumerate(CHAIN_KEYS)]
    program = [(every_key, "completed", False), *rounds]
    retained: tuple[int, Any, Any, dict[tuple[str, Any], Any]] | None = None  # id, location, handle, contents
    late: tuple[int, str] | None = None  # a notification not yet delivered
    orphans: set[str] = set()  # shared files of aborted checkpoints, deleted when the next one completes
    steps: list[str] = []
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        for checkpoint_id, (ops, drawn, notified_late) in enumerate(program, start=1):
            outcome = drawn
            if late is not None and late[1] == "completed" and drawn != "aborted":
                # Not generated (KB-SNAP-9): a checkpoint completing unheard (late or lost) right after one whose
                # completion is heard late. The backend would build on the earlier one, which this one subsumed
                # without referencing its own files, since it was built on the base before.
                outcome, notified_late = "completed", False
            apply_chain_ops(backend, model, ops)
            location = location_for(storage, checkpoint_id)
            task = backend.snapshot(checkpoint_id, 0, location)
            if late is not None:
                notify_outcome(backend, *late)
                steps.append(f"checkpoint {late[0]}'s notification delivered after {checkpoint_id}'s synchronous part")
                late = None
            handle = task.run()
            if notified_late:
                late = (checkpoint_id, outcome)
            else:
                notify_outcome(backend, checkpoint_id, outcome)
            kept = files_of(retained[2]) if retained is not None else set()
            steps.append(f"checkpoint {checkpoint_id} after {len(ops)} writes and deletions, {outcome}")
            if outcome == "aborted":
                location.dispose_on_failure()
                orphans |= files_of(handle) - kept
                continue
            delete_files(orphans - files_of(handle))
            orphans = set()
            if retained is not None:  # subsumed by this one
                retained[1].dispose_on_failure()  # its exclusive directory, as CKP-1 deletes it
                delete_files(kept - files_of(handle))
            retained = (checkpoint_id, location, handle, chain_contents(model))
            with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local")), restore=[handle]) as again:
                got = contents(again)
            expected = retained[3]
            wrong = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
            assert not wrong, (
                f"KB-SNAP-8, KB-SNAP-9: checkpoint {checkpoint_id}, retained, restores {len(wrong)} entries wrong "
                f"once the checkpoints before it are subsumed, e.g. (entry, expected, got) "
                f"{[(k, expected.get(k), got.get(k)) for k in wrong[:3]]}; steps: {'; '.join(steps)}"
            )
