"""The checkpoint coordinator on a manual scheduler (chapter COORD)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fsspec
import pytest

from statecert.reference.coordinator.coordinator import CheckpointCoordinator, CoordinatorCrash, JobVertex
from statecert.reference.coordinator.failures import FailureReason
from statecert.reference.coordinator.recovery import recover_from_storage
from statecert.reference.coordinator.scheduler import ManualScheduler
from statecert.reference.coordinator.settings import CheckpointingSettings
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.handles import (
    ByteStreamStateHandle,
    FileStateHandle,
    IncrementalKeyedStateHandle,
    KeyGroupsStateHandle,
)
from statecert.spec.keygroups import key_group_range_for_operator
from statecert.spec.metadata import CheckpointKind, OperatorSubtaskState

VERTICES = [JobVertex("source", 1, 128), JobVertex("counter", 2, 128)]


class Recorder:
    """A listener that records what the coordinator told the job."""

    def __init__(self) -> None:
        self.triggered: list[int] = []
        self.completed: list[int] = []
        self.aborted: list[tuple[int, FailureReason]] = []
        self.failovers: list[str] = []

    def trigger(self, checkpoint_id: int, timestamp_ms: int, options: Any) -> None:
        self.triggered.append(checkpoint_id)

    def notify_complete(self, checkpoint_id: int, kind: CheckpointKind) -> None:
        self.completed.append(checkpoint_id)

    def notify_aborted(self, checkpoint_id: int, reason: FailureReason) -> None:
        self.aborted.append((checkpoint_id, reason))

    def failover(self, reason: str) -> None:
        self.failovers.append(reason)


def subtask_state(operator_id: str, index: int, parallelism: int) -> OperatorSubtaskState:
    rng = key_group_range_for_operator(128, parallelism, index)
    offsets = tuple(range(0, 4 * len(rng), 4))  # one empty block (a 4-byte length) per key group
    handle = KeyGroupsStateHandle(rng, offsets, ByteStreamStateHandle(f"{operator_id}-{index}", bytes(4 * len(rng))))
    return OperatorSubtaskState((handle,))


def ack_all(
    coordinator: CheckpointCoordinator,
    checkpoint_id: int,
    skip: int = 0,
    states: Mapping[tuple[str, int], OperatorSubtaskState] | None = None,
) -> None:
    """Every task but the first `skip` acknowledges `checkpoint_id`, with its state in `states` if given there."""
    given = states or {}
    tasks = [t for v in VERTICES for t in v.tasks()]
    for task in tasks[skip:]:
        parallelism = next(v.parallelism for v in VERTICES if v.operator_id == task[0])
        coordinator.acknowledge(
            checkpoint_id, task, given[task] if task in given else subtask_state(*task, parallelism)
        )


def make(tmp_path: Path, **settings: Any) -> tuple[CheckpointCoordinator, ManualScheduler, Recorder, Any]:
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), savepoint_dir=str(tmp_path / "sp"))
    access = storage.create_checkpoint_storage("job")
    scheduler, recorder = ManualScheduler(), Recorder()
    coordinator = CheckpointCoordinator("job", VERTICES, access, CheckpointingSettings(**settings), scheduler, recorder)
    return coordinator, scheduler, recorder, storage


@pytest.mark.requirement("COORD-1", "COORD-2")
def test_periodic_trigger_respects_max_concurrent(tmp_path: Path) -> None:
    coordinator, scheduler, recorder, _ = make(tmp_path, interval_ms=100, max_concurrent=2)
    coordinator.start_periodic()
    scheduler.advance(99)
    assert recorder.triggered == []
    scheduler.advance(1)
    assert recorder.triggered == [1]
    scheduler.advance(300)
    assert recorder.triggered == [1, 2], "a third checkpoint was triggered with two pending"
    ack_all(coordinator, 1)
    scheduler.advance(100)
    assert recorder.triggered == [1, 2, 3]


@pytest.mark.requirement("COORD-2", "COORD-7")
def test_a_pending_savepoint_counts_toward_max_concurrent_checkpoints(tmp_path: Path) -> None:
    coordinator, scheduler, recorder, _ = make(tmp_path, interval_ms=100, max_concurrent=1)
    coordinator.start_periodic()
    savepoint = coordinator.trigger_savepoint()
    scheduler.advance(300)
    assert recorder.triggered == [savepoint], (
        f"periodic checkpoints triggered while a savepoint was pending with max concurrent 1: {recorder.triggered}"
    )
    ack_all(coordinator, savepoint)
    scheduler.advance(100)
    assert len(recorder.triggered) == 2, "no periodic checkpoint once the savepoint completed"
    second = coordinator.trigger_savepoint()  # a savepoint is not limited by a pending checkpoint
    assert recorder.triggered[-1] == second


@pytest.mark.requirement("COORD-3")
def test_min_pause_delays_the_next_trigger(tmp_path: Path) -> None:
    coordinator, scheduler, recorder, _ = make(tmp_path, interval_ms=100, min_pause_ms=250)
    coordinator.start_periodic()
    scheduler.advance(100)
    ack_all(coordinator, 1)  # completes at t=100
    scheduler.advance(200)  # periodic attempt at t=200 is declined (pause until 350)
    assert recorder.triggered == [1]
    scheduler.advance(50)
    assert recorder.triggered == [1, 2], "the trigger should fire as soon as the pause has passed (t=350)"
    assert scheduler.now_ms() == 350


@pytest.mark.requirement("COORD-3")
def test_min_pause_runs_from_a_savepoints_completion_too(tmp_path: Path) -> None:
    """Flink sets the completion time the min pause counts from for a savepoint as for a checkpoint
    (`CheckpointCoordinator.cleanupAfterCompletedCheckpoint`)."""
    coordinator, scheduler, recorder, _ = make(tmp_path, interval_ms=100, min_pause_ms=250)
    coordinator.start_periodic()
    scheduler.advance(50)
    savepoint = coordinator.trigger_savepoint()
    ack_all(coordinator, savepoint)  # completes at t=50: no checkpoint before t=300
    scheduler.advance(200)  # periodic attempts at t=100 and t=200 are declined
    assert recorder.triggered == [savepoint], (
        f"triggered within the min pause after the savepoint: {recorder.triggered}"
    )
    scheduler.advance(50)
    assert recorder.triggered == [savepoint, savepoint + 1] and scheduler.now_ms() == 300, recorder.triggered


@pytest.mark.requirement("COORD-4", "CKP-1")
def test_completion_needs_every_acknowledgement(tmp_path: Path) -> None:
    coordinator, _, recorder, storage = make(tmp_path, retained=2)
    for checkpoint_id in (1, 2, 3):
        assert coordinator.trigger_checkpoint().checkpoint_id == checkpoint_id
        ack_all(coordinator, checkpoint_id, skip=1)
        assert recorder.completed == list(range(1, checkpoint_id)), "completed before the last acknowledgement"
        ack_all(coordinator, checkpoint_id)
        assert recorder.completed[-1] == checkpoint_id
    metadata = storage.load_checkpoint(coordinator.latest_completed().pointer)
    assert [(op.operator_id, sorted(op.subtask_states)) for op in metadata.operators] == [
        ("source", [0]),
        ("counter", [0, 1]),
    ]
    assert [c.metadata.checkpoint_id for c in coordinator.store.retained] == [2, 3]
    assert not (tmp_path / "c" / "job" / "chk-1").exists(), "the subsumed checkpoint's directory should be gone"


@pytest.mark.requirement("COORD-5", "COORD-6")
def test_expired_checkpoints_count_until_failover(tmp_path: Path) -> None:
    coordinator, scheduler, recorder, _ = make(tmp_path, timeout_ms=50, tolerable_failures=1)
    coordinator.trigger_checkpoint()
    ack_all(coordinator, 1, skip=1)
    scheduler.advance(50)
    assert recorder.aborted == [(1, FailureReason.EXPIRED)] and recorder.failovers == []
    assert not (tmp_path / "c" / "job" / "chk-1").exists(), "an aborted checkpoint's files must be deleted"
    coordinator.trigger_checkpoint()
    coordinator.decline(2, ("counter", 0), FailureReason.TASK_NOT_READY)  # does not count
    coordinator.trigger_checkpoint()
    scheduler.advance(50)
    assert len(recorder.failovers) == 1 and "expired" in recorder.failovers[0]


@pytest.mark.requirement("COORD-6")
def test_success_resets_the_failure_count(tmp_path: Path) -> None:
    coordinator, scheduler, recorder, _ = make(tmp_path, timeout_ms=50, tolerable_failures=1)
    for _ in range(3):
        coordinator.trigger_checkpoint()
        scheduler.advance(50)  # expires
        checkpoint_id = coordinator.trigger_checkpoint().checkpoint_id
        assert checkpoint_id is not None
        ack_all(coordinator, checkpoint_id)
    assert recorder.failovers == []


@pytest.mark.requirement("COORD-6", "FMT-9")
@pytest.mark.parametrize("failure", ["storage-error", "state-file-outside-the-job"])
def test_a_checkpoint_whose_metadata_cannot_be_written_is_aborted_and_counted(
    tmp_path: Path, faulty_fs: Any, failure: str
) -> None:
    """Writing `_metadata` fails on an I/O error, or when a task's state names a file the checkpoint may not reference
    (outside the job's directory, FMT-9). Either way the checkpoint is aborted as a finalize failure, leaves nothing
    behind and counts toward the tolerable failures, as Flink's FINALIZE_CHECKPOINT_FAILURE: the error does not
    escape into the task that acknowledged last."""
    storage = FileSystemCheckpointStorage(f"faulty://{tmp_path / 'c'}")
    scheduler, recorder = ManualScheduler(), Recorder()
    settings = CheckpointingSettings(tolerable_failures=1)
    coordinator = CheckpointCoordinator(
        "job", VERTICES, storage.create_checkpoint_storage("job"), settings, scheduler, recorder
    )
    states: dict[tuple[str, int], OperatorSubtaskState] = {}
    outside = tmp_path / "elsewhere" / "state"
    if failure == "storage-error":
        faulty_fs.fail_writes("*_metadata*", times=-1)
    else:
        rng = key_group_range_for_operator(128, 2, 0)
        outside.parent.mkdir()
        outside.write_bytes(bytes(4 * len(rng)))
        stream = FileStateHandle(f"faulty://{outside}", 4 * len(rng))
        states[("counter", 0)] = OperatorSubtaskState(
            (KeyGroupsStateHandle(rng, tuple(range(0, 4 * len(rng), 4)), stream),)
        )
    for _ in range(2):
        checkpoint_id = coordinator.trigger_checkpoint().checkpoint_id
        assert checkpoint_id is not None
        ack_all(coordinator, checkpoint_id, states=states)
    assert recorder.completed == [] and recorder.aborted == [
        (1, FailureReason.FINALIZE_FAILED),
        (2, FailureReason.FINALIZE_FAILED),
    ], f"two checkpoints whose _metadata could not be written ({failure}): aborted {recorder.aborted}"
    assert len(recorder.failovers) == 1 and "finalize-failed" in recorder.failovers[0], (
        f"two finalize failures with 1 tolerable should fail over once, got {recorder.failovers}"
    )
    left = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "c" / "job").glob("chk-*/**/*"))
    assert left == [], f"aborted checkpoints left files behind: {left}"
    assert failure == "storage-error" or outside.exists(), "a file outside the checkpoint is not the abort's to delete"


@pytest.mark.requirement("COORD-7")
def test_savepoints_are_not_limited_subsumed_or_counted(tmp_path: Path) -> None:
    coordinator, scheduler, recorder, _ = make(tmp_path, timeout_ms=50, retained=1)
    coordinator.trigger_checkpoint()
    savepoint = coordinator.trigger_savepoint()
    assert savepoint == 2, "a savepoint must not be refused because a checkpoint is pending"
    ack_all(coordinator, savepoint)
    pointer = coordinator.last_savepoint
    ack_all(coordinator, 1)
    third = coordinator.trigger_checkpoint().checkpoint_id
    assert third is not None
    ack_all(coordinator, third)
    assert Path(pointer.removeprefix("file://"), "_metadata").is_file(), "retention must not touch savepoints"
    failed = coordinator.trigger_savepoint()
    scheduler.advance(50)
    assert (failed, FailureReason.EXPIRED) in recorder.aborted and recorder.failovers == []


@pytest.mark.requirement("COORD-7")
def test_stop_with_savepoint_shuts_down(tmp_path: Path) -> None:
    coordinator, scheduler, recorder, _ = make(tmp_path, interval_ms=10)
    coordinator.start_periodic()
    savepoint = coordinator.trigger_savepoint(stop=True)
    ack_all(coordinator, savepoint)
    assert coordinator.stopped_with_savepoint is not None
    scheduler.advance(1000)
    assert recorder.triggered == [savepoint], "no checkpoint may be triggered after stop-with-savepoint"


@pytest.mark.requirement("COORD-9")
def test_completion_subsumes_older_pending_checkpoints(tmp_path: Path) -> None:
    coordinator, _, recorder, _ = make(tmp_path, max_concurrent=3)
    coordinator.trigger_checkpoint()
    coordinator.trigger_checkpoint()
    coordinator.trigger_checkpoint()
    ack_all(coordinator, 2)
    assert recorder.completed == [2] and recorder.aborted == [(1, FailureReason.SUBSUMED)]
    assert sorted(coordinator.pending) == [3], (
        f"COORD-9: only older checkpoints are subsumed, pending: {coordinator.pending}"
    )


@pytest.mark.requirement("COORD-8", "FMT-5")
def test_crash_before_metadata_write_recovers_the_previous_checkpoint(tmp_path: Path) -> None:
    coordinator, _, _, storage = make(tmp_path, retained=2)
    for checkpoint_id in (1, 2):
        coordinator.trigger_checkpoint()
        ack_all(coordinator, checkpoint_id)

    def crash(checkpoint_id: int) -> None:
        raise CoordinatorCrash(f"coordinator died before writing checkpoint {checkpoint_id}")

    coordinator.before_metadata_write = crash
    coordinator.trigger_checkpoint()
    with pytest.raises(CoordinatorCrash):
        ack_all(coordinator, 3)
    (tmp_path / "c" / "job" / "chk-3").mkdir(parents=True, exist_ok=True)
    (tmp_path / "c" / "job" / "chk-3" / "state").write_bytes(b"written before the crash")
    recovered = recover_from_storage(storage.create_checkpoint_storage("job").job_dir, retained=2)
    assert [c.metadata.checkpoint_id for c in recovered.store.retained] == [1, 2]
    assert recovered.next_checkpoint_id == 4, "checkpoint ids must never be reused"
    assert recovered.ignored_incomplete and not (tmp_path / "c" / "job" / "chk-3").exists()


@pytest.mark.requirement("COORD-6")
@pytest.mark.parametrize(
    ("reason", "counts"),
    [
        (FailureReason.DECLINED, True),
        (FailureReason.IO_ERROR, True),
        (FailureReason.ASYNC_PHASE_FAILED, True),
        (FailureReason.TASK_NOT_READY, False),
        (FailureReason.TASK_FAILED, False),
    ],
)
def test_a_generic_decline_counts_like_flinks_checkpoint_declined(
    tmp_path: Path, reason: FailureReason, counts: bool
) -> None:
    """Flink's CheckpointFailureManager counts CHECKPOINT_DECLINED, not the specific declines."""
    coordinator, _, recorder, _ = make(tmp_path, tolerable_failures=0)
    coordinator.trigger_checkpoint()
    coordinator.decline(1, ("counter", 0), reason)
    assert (len(recorder.failovers) == 1) == counts, (reason, recorder.failovers)


@pytest.mark.requirement("COORD-13", "KB-SNAP-10")
@pytest.mark.parametrize("claim", [False, True])
def test_checkpoints_are_full_until_the_first_after_a_restore_completes(tmp_path: Path, claim: bool) -> None:
    """After a restore from a snapshot every checkpoint is triggered full (an aborted one does not end it) until one
    completes; savepoints never are. NO_CLAIM: the job may not depend on the snapshot; CLAIM: it owns it, but a
    checkpoint references only files under its own job's checkpoint directory (FMT-9)."""
    coordinator, _, _, storage = make(tmp_path, max_concurrent=1)
    first = coordinator.trigger_checkpoint().checkpoint_id
    assert first is not None
    ack_all(coordinator, first)
    pointer = coordinator.store.latest.pointer if coordinator.store.latest else ""
    restored, _, recorder, _ = make(tmp_path / "second", max_concurrent=1)
    restored.restore_from(pointer, storage.load_checkpoint(pointer), claim=claim)
    given: dict[int, Any] = {}
    recorder.trigger = lambda checkpoint_id, _, options: given.__setitem__(checkpoint_id, options)  # type: ignore[method-assign]
    aborted = restored.trigger_checkpoint().checkpoint_id
    assert aborted is not None
    restored.abort(aborted, FailureReason.EXPIRED)
    savepoint = restored.trigger_savepoint()
    ack_all(restored, savepoint)
    completed = restored.trigger_checkpoint().checkpoint_id
    assert completed is not None
    ack_all(restored, completed)
    later = restored.trigger_checkpoint().checkpoint_id
    full = {checkpoint_id: options.full for checkpoint_id, options in given.items()}
    expected = {aborted: True, savepoint: False, completed: True, later: False}
    assert full == expected, f"full per checkpoint: expected {expected}, got {full}"


def _directory(url: str) -> Path:
    """The local path of a `file://` URL the storage gave."""
    return Path(fsspec.core.url_to_fs(url)[1])


def _restarted(storage: Any, retained: int, unclaimed: str | None = None) -> CheckpointCoordinator:
    """A new coordinator of job "job" with the completed checkpoints it recovers from `storage` alone (COORD-8), of a
    job started from the snapshot `unclaimed` without claim, if given."""
    recovered = recover_from_storage(storage.create_checkpoint_storage("job").job_dir, retained, unclaimed)
    return CheckpointCoordinator(
        "job",
        VERTICES,
        storage.create_checkpoint_storage("job"),
        CheckpointingSettings(retained=retained),
        ManualScheduler(),
        Recorder(),
        recovered.store,
        recovered.next_checkpoint_id,
    )


def _snapshot_of_another_job(tmp_path: Path, checkpoints: int) -> tuple[str, Any]:
    """A retained checkpoint of an earlier job, taken after `checkpoints` completed ones: (pointer, metadata)."""
    coordinator, _, _, storage = make(tmp_path / "earlier", retained=1)
    for _ in range(checkpoints):
        checkpoint_id = coordinator.trigger_checkpoint().checkpoint_id
        assert checkpoint_id is not None
        ack_all(coordinator, checkpoint_id)
    latest = coordinator.store.latest
    assert latest is not None
    return latest.pointer, storage.load_checkpoint(latest.pointer)


@pytest.mark.requirement("COORD-13")
@pytest.mark.parametrize("claim", [False, True])
def test_a_job_restored_from_a_snapshot_numbers_its_checkpoints_on_from_the_snapshots_id(
    tmp_path: Path, claim: bool
) -> None:
    """In either claim mode the first checkpoint and the first savepoint after a restore from snapshot N are N + 1
    and N + 2, as Flink's `restoreSavepoint` resets the checkpoint id counter, so that ids keep growing across the
    restore for backends and sinks that compare them."""
    pointer, metadata = _snapshot_of_another_job(tmp_path, checkpoints=3)
    restored, _, _, _ = make(tmp_path / "second")
    restored.restore_from(pointer, metadata, claim=claim)
    first = restored.trigger_checkpoint().checkpoint_id
    savepoint = restored.trigger_savepoint()
    assert (first, savepoint) == (4, 5), (
        f"restore_from(snapshot 3, claim={claim}) then a checkpoint and a savepoint: expected ids (4, 5), "
        f"got {(first, savepoint)}"
    )


@pytest.mark.requirement("COORD-13")
@pytest.mark.parametrize("to_metadata_file", [False, True], ids=["directory", "metadata-file"])
def test_a_claimed_snapshot_is_discarded_whole_when_subsumed(tmp_path: Path, to_metadata_file: bool) -> None:
    """CLAIM: once a checkpoint of the new job subsumes the snapshot it started from, nothing of the snapshot's
    directory is left, whether the job was pointed at the directory or at its `_metadata` file."""
    pointer, metadata = _snapshot_of_another_job(tmp_path, checkpoints=2)
    directory = _directory(pointer)
    (directory / "exclusive-state").write_bytes(b"a task's state file, written into the checkpoint's directory")
    restored, _, _, _ = make(tmp_path / "second", retained=1)
    restored.restore_from(str(directory / "_metadata") if to_metadata_file else pointer, metadata, claim=True)
    checkpoint_id = restored.trigger_checkpoint().checkpoint_id
    assert checkpoint_id is not None
    ack_all(restored, checkpoint_id)
    left = sorted(str(p.relative_to(directory)) for p in directory.rglob("*")) if directory.exists() else []
    assert not directory.exists(), f"the subsumed claimed snapshot {directory} should be gone, left: {left}"


@pytest.mark.requirement("COORD-8", "COORD-13")
def test_a_recovered_coordinator_still_owns_the_snapshot_it_claimed(tmp_path: Path) -> None:
    """A coordinator restarted after a CLAIM restore and a completed checkpoint recovers the claimed snapshot too
    (Flink keeps it in the completed checkpoint store): it stays retained while the retention keeps it, and the
    checkpoint that subsumes it discards it, instead of leaving it behind for good."""
    pointer, metadata = _snapshot_of_another_job(tmp_path, checkpoints=2)
    coordinator, _, _, storage = make(tmp_path / "second", retained=2)
    coordinator.restore_from(pointer, metadata, claim=True)
    first = coordinator.trigger_checkpoint().checkpoint_id
    assert first is not None
    ack_all(coordinator, first)
    coordinator.halt()
    restarted = _restarted(storage, retained=2)
    restarted.restore_initial(pointer, metadata, claim=True)
    retained = [c.metadata.checkpoint_id for c in restarted.store.retained]
    expected = [2, first]  # the claimed snapshot first
    assert retained == expected, f"retained after the recovery: expected ids {expected}, got {retained}"
    second = restarted.trigger_checkpoint().checkpoint_id
    assert second is not None
    ack_all(restarted, second)
    directory = _directory(pointer)
    assert not directory.exists(), f"the claimed snapshot {directory}, subsumed after the recovery, should be gone"


@pytest.mark.requirement("COORD-8", "COORD-13")
def test_a_claimed_checkpoint_of_the_jobs_own_directory_is_recovered_once(tmp_path: Path) -> None:
    """A job restarted with CLAIM from its own retained checkpoint (same job, same directory): the recovered
    coordinator finds that checkpoint in the job's directory and retains it once, not a second time as the claimed
    snapshot, so the retained count and subsumption stay right."""
    earlier, _, _, storage = make(tmp_path, retained=2)
    first = earlier.trigger_checkpoint().checkpoint_id
    assert first is not None
    ack_all(earlier, first)
    latest = earlier.store.latest
    assert latest is not None
    coordinator, _, _, _ = make(tmp_path, retained=2)  # the same checkpoint directory and job id
    coordinator.restore_from(latest.pointer, latest.metadata, claim=True)
    second = coordinator.trigger_checkpoint().checkpoint_id
    assert second is not None
    ack_all(coordinator, second)
    coordinator.halt()
    restarted = _restarted(storage, retained=2)
    restarted.restore_initial(latest.pointer, latest.metadata, claim=True)
    retained = [c.metadata.checkpoint_id for c in restarted.store.retained]
    assert retained == [first, second], f"retained after the recovery: expected [{first}, {second}], got {retained}"
    for checkpoint in restarted.store.retained:
        metadata_file = _directory(checkpoint.pointer) / "_metadata"
        assert metadata_file.exists(), f"retained checkpoint {checkpoint.metadata.checkpoint_id} was discarded"


@pytest.mark.requirement("COORD-13", "COORD-8", "CKP-2")
@pytest.mark.parametrize("recovered", [False, True], ids=["running", "recovered"])
def test_an_unclaimed_snapshots_shared_file_outlives_the_checkpoints_that_reference_it(
    tmp_path: Path, recovered: bool
) -> None:
    """NO_CLAIM from a retained checkpoint of the job's own directory (a job restarted under the same job id): the
    snapshot is the user's. A checkpoint of the new job that references one of the snapshot's shared files (a
    backend building on restored files, which COORD-13's full first checkpoint forbids) does not make the job its
    owner: when that checkpoint is subsumed, the file stays, and so does the snapshot, in a coordinator recovered
    from storage too."""
    earlier, _, _, storage = make(tmp_path, retained=1)
    first = earlier.trigger_checkpoint().checkpoint_id
    assert first is not None
    shared_dir = _directory(storage.create_checkpoint_storage("job").job_dir) / "shared"
    shared_dir.mkdir(parents=True, exist_ok=True)
    user_file = shared_dir / "000007.sst"
    user_file.write_bytes(b"an SST file of the retained checkpoint")
    rng = key_group_range_for_operator(128, 2, 0)
    shared = {"000007.sst": FileStateHandle(user_file.as_uri(), user_file.stat().st_size)}
    incremental = OperatorSubtaskState(
        (IncrementalKeyedStateHandle("rocksdb", rng, first, shared, {}, ByteStreamStateHandle("meta", b"m")),)
    )
    ack_all(earlier, first, states={("counter", 0): incremental})
    snapshot = earlier.store.latest
    assert snapshot is not None
    earlier.halt()
    coordinator, _, _, _ = make(tmp_path, retained=1)  # the same checkpoint directory and job id
    coordinator.restore_from(snapshot.pointer, snapshot.metadata, claim=False)
    referencing = coordinator.trigger_checkpoint().checkpoint_id
    assert referencing is not None
    ack_all(coordinator, referencing, states={("counter", 0): incremental})
    if recovered:
        coordinator.halt()
        coordinator = _restarted(storage, retained=1, unclaimed=snapshot.pointer)
        coordinator.restore_initial(snapshot.pointer, snapshot.metadata, claim=False)
    later = coordinator.trigger_checkpoint().checkpoint_id
    assert later is not None
    ack_all(coordinator, later)
    kept = sorted(str(p.relative_to(tmp_path)) for p in [user_file, _directory(snapshot.pointer)] if p.exists())
    assert user_file.exists() and _directory(snapshot.pointer).exists(), (
        f"checkpoint {referencing}, which referenced the unclaimed snapshot {first}'s file {user_file.name}, was "
        f"subsumed by {later}: the snapshot's directory and file should stay, kept only {kept}"
    )
