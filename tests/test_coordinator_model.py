"""The checkpoint coordinator, its completed checkpoint store and shared state registry against an independent model
(COORD, CKP): a hypothesis state machine triggers checkpoints and savepoints, has tasks acknowledge them with
incremental handles (files uploaded anew, files of the last completed checkpoint reused), declines them, lets them
expire, acknowledges them late, and ends the run, on a real fsspec file system. After every step the files in the
checkpoint directory, the retained checkpoints, the pending ones and the failovers asked for are what Flink's
coordinator leaves, computed from the model's own record of what each checkpoint used."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import fsspec
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from statecert.reference.completed_checkpoint_store import CompletedCheckpointStore
from statecert.reference.coordinator.coordinator import CheckpointCoordinator, JobVertex
from statecert.reference.coordinator.failures import FailureReason
from statecert.reference.coordinator.recovery import recover_from_storage
from statecert.reference.coordinator.scheduler import ManualScheduler
from statecert.reference.coordinator.settings import CheckpointingSettings, JobStatus
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.handles import ByteStreamStateHandle, FileStateHandle, IncrementalKeyedStateHandle
from statecert.spec.keyed_backend import CheckpointOptions
from statecert.spec.keygroups import key_group_range_for_operator
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata, OperatorState, OperatorSubtaskState

PARALLELISM = 2
MAX_PARALLELISM = 128
TIMEOUT_MS = 50
TASKS = [("op", i) for i in range(PARALLELISM)]
DECLINES = [FailureReason.DECLINED, FailureReason.ASYNC_PHASE_FAILED, FailureReason.TASK_NOT_READY]


def _shared_paths(state: OperatorSubtaskState) -> set[str]:
    return {
        h.path
        for k in state.managed_keyed_state
        if isinstance(k, IncrementalKeyedStateHandle)
        for h in k.shared_state.values()
        if isinstance(h, FileStateHandle)
    }


class Listener:
    """Records what the coordinator told the job."""

    def __init__(self) -> None:
        self.completed: list[int] = []
        self.aborted: dict[int, FailureReason] = {}
        self.failovers = 0
        self.options: dict[int, CheckpointOptions] = {}

    def trigger(self, checkpoint_id: int, timestamp_ms: int, options: CheckpointOptions) -> None:
        self.options[checkpoint_id] = options

    def notify_complete(self, checkpoint_id: int, kind: CheckpointKind) -> None:
        self.completed.append(checkpoint_id)

    def notify_aborted(self, checkpoint_id: int, reason: FailureReason) -> None:
        self.aborted[checkpoint_id] = reason

    def failover(self, reason: str) -> None:
        self.failovers += 1


@dataclass
class ModelCheckpoint:
    """What the model knows of one triggered checkpoint."""

    checkpoint_id: int
    savepoint: bool
    triggered_ms: int
    acknowledged: set[tuple[str, int]] = field(default_factory=set)
    used: set[str] = field(default_factory=set)  # shared files its acknowledgements referenced (registered)
    referenced: set[str] = field(default_factory=set)  # those of the acknowledgements it accepted (its metadata)


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = f"memory:///statecert-coordinator-model-{uuid.uuid4().hex}"
        self.fs = fsspec.filesystem("memory")
        self.coordinator: CheckpointCoordinator | None = None

    @initialize(
        max_concurrent=st.sampled_from([1, 1, 2, 3]),
        retained=st.integers(1, 3),
        tolerable=st.integers(0, 2),
        min_pause=st.sampled_from([0, 5, 30]),
        origin=st.sampled_from(["none", "none", "CLAIM", "NO_CLAIM"]),
    )
    def start(self, max_concurrent: int, retained: int, tolerable: int, min_pause: int, origin: str) -> None:
        self.settings = CheckpointingSettings(
            interval_ms=10,
            timeout_ms=TIMEOUT_MS,
            max_concurrent=max_concurrent,
            min_pause_ms=min_pause if max_concurrent == 1 else 0,  # a min pause implies one at a time
            retained=retained,
            tolerable_failures=tolerable,
        )
        storage = FileSystemCheckpointStorage(f"{self.root}/c", savepoint_dir=f"{self.root}/sp")
        self.access = storage.create_checkpoint_storage("job")
        self.scheduler = ManualScheduler()
        self.listener = Listener()
        self.coordinator = self._new_coordinator(None, 1)
        # the model
        self.checkpoints: dict[int, ModelCheckpoint] = {}
        self.pending: set[int] = set()
        self.completed: list[int] = []  # checkpoints (not savepoints), in completion order
        self.aborted: set[int] = set()
        self.consecutive_failures = 0
        self.failovers = 0
        self.last_completion_ms: int | None = None
        self.base: dict[tuple[str, int], set[str]] = {t: set() for t in TASKS}  # each task's last completed files
        self.written: set[str] = set()  # every shared file a task uploaded
        self.used_since_completion: set[str] = set()  # files acknowledged since a checkpoint last entered the store
        self.issued: list[int] = []  # ids this coordinator gave
        self.orphans: set[str] = set()  # files only a coordinator that died knew of: they may stay (Flink's too)
        self.ended = False
        self.full = False  # whether the next checkpoint must be full (COORD-13)
        self.claimed: int | None = None
        self.not_owned: set[str] = set()  # the files of a snapshot the job started from without claiming it
        self.origin: tuple[str, CheckpointMetadata, bool] | None = None
        if origin != "none":
            self._start_from_a_snapshot(storage, claim=origin == "CLAIM")

    def _start_from_a_snapshot(self, storage: FileSystemCheckpointStorage, claim: bool) -> None:
        """The job starts from another job's incremental checkpoint 7 (COORD-13): CLAIM makes it the job's own, to be
        subsumed and discarded like its checkpoints; NO_CLAIM never deletes any of its files."""
        assert self.coordinator is not None
        self.earlier = storage.create_checkpoint_storage("earlier-job")
        snapshot_id = 7
        location = self.earlier.initialize_location_for_checkpoint(snapshot_id)
        states, files = {}, set()
        for task in TASKS:
            shared = {}
            for _ in range(2):
                path = f"{self.earlier.shared_dir}/{snapshot_id}-{task[1]}-{uuid.uuid4().hex}"
                with fsspec.open(path, "wb") as out:
                    out.write(b"x")
                shared[path.rsplit("/", 1)[-1]] = FileStateHandle(path, 1)
                files.add(path)
            rng = key_group_range_for_operator(MAX_PARALLELISM, PARALLELISM, task[1])
            meta = ByteStreamStateHandle(f"meta-{snapshot_id}-{task[1]}", b"m")
            states[task[1]] = OperatorSubtaskState(
                (IncrementalKeyedStateHandle("model", rng, snapshot_id, shared, {}, meta),)
            )
        metadata = CheckpointMetadata(
            snapshot_id, (OperatorState("op", PARALLELISM, MAX_PARALLELISM, states),), CheckpointKind.CHECKPOINT, 0
        )
        self.origin = (location.write_metadata(metadata), metadata, claim)
        self.origin_files = files
        self.coordinator.restore_from(*self.origin)
        self._restored(snapshot_id, files, claim)

    def _restored(self, snapshot_id: int, files: set[str], claim: bool) -> None:
        self.full = True
        if claim:
            self.claimed = snapshot_id
            self.completed = [snapshot_id]
            self.checkpoints[snapshot_id] = ModelCheckpoint(
                snapshot_id, False, 0, used=set(files), referenced=set(files)
            )
        else:
            self.not_owned = set(files)

    def _new_coordinator(self, store: CompletedCheckpointStore | None, next_id: int) -> CheckpointCoordinator:
        vertices = [JobVertex("op", PARALLELISM, MAX_PARALLELISM)]
        return CheckpointCoordinator(
            "job", vertices, self.access, self.settings, self.scheduler, self.listener, store, next_id
        )

    def teardown(self) -> None:
        if self.fs.exists(self.root):
            self.fs.rm(self.root, recursive=True)

    # -- the model's rules ---------------------------------------------------------------------------------------
    def _pending_checkpoints(self) -> list[int]:
        return sorted(c for c in self.pending if not self.checkpoints[c].savepoint)

    def _abort(self, checkpoint_id: int, counts: bool) -> None:
        self.pending.discard(checkpoint_id)
        self.aborted.add(checkpoint_id)
        if counts and not self.checkpoints[checkpoint_id].savepoint:
            self.consecutive_failures += 1
            if self.consecutive_failures > self.settings.tolerable_failures:
                self.failovers += 1
                self.consecutive_failures = 0

    def _complete(self, checkpoint_id: int) -> None:
        checkpoint = self.checkpoints[checkpoint_id]
        self.pending.discard(checkpoint_id)
        self.consecutive_failures = 0
        self.last_completion_ms = self.scheduler.now_ms()  # a savepoint's completion too, as in Flink
        if checkpoint.savepoint:
            return
        self.completed.append(checkpoint_id)
        self.full = False
        self.used_since_completion = set()
        for task in TASKS:
            self.base[task] = {p for p in checkpoint.referenced if f"-{task[1]}-" in p}
        for older in [c for c in self._pending_checkpoints() if c < checkpoint_id]:
            self._abort(older, counts=False)  # subsumed: never counted

    def _upload(self, checkpoint_id: int, task: tuple[str, int], new_files: int) -> OperatorSubtaskState:
        """A task's incremental handle: new files in the shared scope, and its last completed checkpoint's (a
        savepoint's: neither, it is self-contained)."""
        shared: dict[str, FileStateHandle] = {}
        for path in sorted(self.base[task] if not self.checkpoints[checkpoint_id].savepoint else ()):
            shared[path.rsplit("/", 1)[-1]] = FileStateHandle(path, 1)
        for _ in range(new_files):
            path = f"{self.access.shared_dir}/{checkpoint_id}-{task[1]}-{uuid.uuid4().hex}"
            with fsspec.open(path, "wb") as out:
                out.write(b"x")
            self.written.add(path)
            shared[path.rsplit("/", 1)[-1]] = FileStateHandle(path, 1)
        rng = key_group_range_for_operator(MAX_PARALLELISM, PARALLELISM, task[1])
        private = {}
        if not self.checkpoints[checkpoint_id].savepoint:  # a private file in the checkpoint's exclusive directory
            path = f"{self.access.job_dir}/chk-{checkpoint_id}/{task[1]}-{uuid.uuid4().hex}"
            with fsspec.open(path, "wb") as out:
                out.write(b"p")
            private[path.rsplit("/", 1)[-1]] = FileStateHandle(path, 1)
        meta = ByteStreamStateHandle(f"meta-{checkpoint_id}-{task[1]}", b"m")
        handle = IncrementalKeyedStateHandle("model", rng, checkpoint_id, shared, private, meta)
        return OperatorSubtaskState((handle,))

    # -- rules -------------------------------------------------------------------------------------------------------
    @precondition(lambda self: not self.ended)
    @rule()
    def trigger_checkpoint(self) -> None:
        assert self.coordinator is not None
        result = self.coordinator.trigger_checkpoint()
        # COORD-2: none while max concurrent checkpoints are pending, savepoints counted too
        if len(self.pending) >= self.settings.max_concurrent:
            assert result.checkpoint_id is None, (
                f"COORD-2: trigger_checkpoint() started checkpoint {result.checkpoint_id} with {sorted(self.pending)} "
                f"pending and max concurrent {self.settings.max_concurrent}"
            )
            return
        now = self.scheduler.now_ms()
        if self.last_completion_ms is not None and now - self.last_completion_ms < self.settings.min_pause_ms:
            assert result.checkpoint_id is None, (
                f"COORD-3: trigger_checkpoint() started checkpoint {result.checkpoint_id} at {now} ms, "
                f"{now - self.last_completion_ms} ms after the last completion (min pause "
                f"{self.settings.min_pause_ms} ms)"
            )
            return
        assert result.checkpoint_id is not None, f"COORD-1: trigger_checkpoint() declined: {result.declined}"
        self._new(result.checkpoint_id, savepoint=False)

    @precondition(lambda self: not self.ended)
    @rule()
    def trigger_savepoint(self) -> None:
        assert self.coordinator is not None
        self._new(self.coordinator.trigger_savepoint(), savepoint=True)  # COORD-7: never limited

    def _new(self, checkpoint_id: int, savepoint: bool) -> None:
        # ids grow; after a coordinator's crash, numbering continues after the highest checkpoint directory found
        # (COORD-8), which may reuse the id of a savepoint or of an aborted checkpoint whose directory was deleted;
        # after a restore, in either claim mode, they go on from the snapshot's id (COORD-13)
        origin = [self.origin[1].checkpoint_id] if self.origin is not None else []
        known = max([*self.completed, *self.issued, *origin], default=0)
        assert checkpoint_id > known, f"a new checkpoint got id {checkpoint_id}, after {known}"
        self.issued.append(checkpoint_id)
        full = self.listener.options[checkpoint_id].full
        assert full == (self.full and not savepoint), (
            f"COORD-13: checkpoint {checkpoint_id} (savepoint: {savepoint}) was triggered with full={full}"
        )
        self.aborted.discard(checkpoint_id)
        self.checkpoints[checkpoint_id] = ModelCheckpoint(checkpoint_id, savepoint, self.scheduler.now_ms())
        self.pending.add(checkpoint_id)

    @precondition(lambda self: not self.ended and self.pending)
    @rule(data=st.data(), new_files=st.integers(0, 2))
    def acknowledge(self, data: st.DataObject, new_files: int) -> None:
        checkpoint_id = data.draw(st.sampled_from(sorted(self.pending)), label="checkpoint")
        self._acknowledge(checkpoint_id, data.draw(st.sampled_from(TASKS), label="task"), new_files)

    @precondition(lambda self: not self.ended and self.pending)
    @rule(data=st.data(), new_files=st.integers(0, 2))
    def acknowledge_by_every_task(self, data: st.DataObject, new_files: int) -> None:
        """Every task that has not yet acknowledged a pending checkpoint does: it completes."""
        checkpoint_id = data.draw(st.sampled_from(sorted(self.pending)), label="checkpoint")
        for task in [t for t in TASKS if t not in self.checkpoints[checkpoint_id].acknowledged]:
            self._acknowledge(checkpoint_id, task, new_files)

    def _acknowledge(self, checkpoint_id: int, task: tuple[str, int], new_files: int) -> None:
        assert self.coordinator is not None
        checkpoint = self.checkpoints[checkpoint_id]
        state = self._upload(checkpoint_id, task, 0 if checkpoint.savepoint else new_files)
        accepted = self.coordinator.acknowledge(checkpoint_id, task, state)
        assert accepted == (task not in checkpoint.acknowledged), (
            f"acknowledge({checkpoint_id}, {task}) returned {accepted}; acknowledged before: "
            f"{sorted(checkpoint.acknowledged)}"
        )
        if not checkpoint.savepoint:
            checkpoint.used |= _shared_paths(state)
            if accepted:
                checkpoint.referenced |= _shared_paths(state)
            self.used_since_completion |= _shared_paths(state)
        checkpoint.acknowledged.add(task)
        if len(checkpoint.acknowledged) == len(TASKS):
            self._complete(checkpoint_id)

    def _aborted_checkpoints(self) -> list[int]:
        return sorted(c for c in self.aborted if not self.checkpoints[c].savepoint)

    @precondition(lambda self: not self.ended and self._aborted_checkpoints())
    @rule(data=st.data(), new_files=st.integers(1, 2))
    def acknowledge_late(self, data: st.DataObject, new_files: int) -> None:
        """An acknowledgement of an aborted checkpoint: refused, but what it uploaded must not leak."""
        assert self.coordinator is not None
        checkpoint_id = data.draw(st.sampled_from(self._aborted_checkpoints()), label="aborted checkpoint")
        task = data.draw(st.sampled_from(TASKS), label="task")
        state = self._upload(checkpoint_id, task, new_files)
        accepted = self.coordinator.acknowledge(checkpoint_id, task, state)
        assert not accepted, f"acknowledge({checkpoint_id}, {task}) of an aborted checkpoint returned True"
        self.checkpoints[checkpoint_id].used |= _shared_paths(state)
        self.used_since_completion |= _shared_paths(state)

    @precondition(lambda self: not self.ended and self.pending)
    @rule(data=st.data(), reason=st.sampled_from(DECLINES))
    def decline(self, data: st.DataObject, reason: FailureReason) -> None:
        assert self.coordinator is not None
        checkpoint_id = data.draw(st.sampled_from(sorted(self.pending)), label="checkpoint")
        self.coordinator.decline(checkpoint_id, TASKS[-1], reason)
        self._abort(checkpoint_id, counts=reason.counts_toward_tolerable)
        assert self.listener.aborted.get(checkpoint_id) is reason, (
            f"COORD-5: declining {checkpoint_id} ({reason.value}) notified {self.listener.aborted.get(checkpoint_id)}"
        )

    @rule(ms=st.integers(1, TIMEOUT_MS + 10))
    def advance(self, ms: int) -> None:
        """Time passes: every pending checkpoint whose timeout elapses is aborted as expired, oldest first (COORD-5);
        after the run ended, nothing happens."""
        now = self.scheduler.now_ms() + ms
        for checkpoint_id in sorted(self.pending, key=lambda c: (self.checkpoints[c].triggered_ms, c)):
            if self.checkpoints[checkpoint_id].triggered_ms + TIMEOUT_MS <= now:
                self._abort(checkpoint_id, counts=True)
        assert self.coordinator is not None
        self.scheduler.advance(ms)

    @precondition(lambda self: not self.ended)
    @rule(status=st.sampled_from(list(JobStatus)))
    def end_job(self, status: JobStatus) -> None:
        """The run ends: with the default retention every checkpoint and every shared file it registered goes
        (COORD-11, CKP-2)."""
        assert self.coordinator is not None
        self.coordinator.end_job(status)
        self.ended = True
        for checkpoint_id in list(self.pending):
            self.pending.discard(checkpoint_id)
            self.aborted.add(checkpoint_id)
        self.completed.clear()

    @precondition(lambda self: not self.ended)
    @rule()
    def crash_and_recover(self) -> None:
        """The coordinator dies and a new one recovers from checkpoint storage alone (COORD-8): it retains the newest
        complete checkpoints, forgets the pending ones, and counts failures and the min pause afresh."""
        assert self.coordinator is not None
        self.coordinator.halt()
        recovered = recover_from_storage(self.access.job_dir, self.settings.retained)
        self.coordinator = self._new_coordinator(recovered.store, recovered.next_checkpoint_id)
        # recovery reads the job's own directory; a claimed snapshot, elsewhere, stays the job's while retained
        retained = self._retained()
        self.full = False
        if self.origin is not None:
            self.coordinator.restore_initial(*self.origin)
        if not [c for c in retained if c != self.claimed] and self.origin is not None:
            # no checkpoint of the job completed: it starts from its snapshot again (Flink's restarted job master)
            self._restored(self.origin[1].checkpoint_id, self.origin_files, self.origin[2])
            retained = list(self.completed) if self.origin[2] else []
        # what only the dead coordinator knew of is orphaned: nobody will delete it (nor does Flink)
        needed = set().union(*(self.checkpoints[c].referenced for c in retained)) if retained else set()
        self.orphans |= self._shared_files_present() - needed - self.not_owned
        # the old coordinator's checkpoints are gone: a task's late acknowledgement of one never reaches the new
        # coordinator (Flink fences messages of an earlier leader), and the new one may give their ids again
        self.pending.clear()
        self.aborted.clear()
        self.completed = retained
        self.issued = []
        self.consecutive_failures = 0
        self.last_completion_ms = None
        self.used_since_completion = set()

    # -- invariants ----------------------------------------------------------------------------------------------
    def _files(self, directory: str) -> set[str]:
        _, path = fsspec.core.url_to_fs(directory)
        return {f"memory://{p}" for p in self.fs.find(path)} if self.fs.exists(path) else set()

    def _shared_files_present(self) -> set[str]:
        """The shared files of the job and of the snapshot it started from."""
        earlier = self._files(self.earlier.shared_dir) if self.origin is not None else set()
        return self._files(self.access.shared_dir) | earlier

    def _retained(self) -> list[int]:
        return self.completed[-self.settings.retained :] if self.completed else []

    @invariant()
    def pending_and_retained_checkpoints_are_the_models(self) -> None:
        if self.coordinator is None:
            return
        got = sorted(self.coordinator.pending)
        assert got == sorted(self.pending), (
            f"COORD-4/5/9: pending checkpoints: expected {sorted(self.pending)}, got {got}"
        )
        retained = [c.metadata.checkpoint_id for c in self.coordinator.store.retained]
        assert retained == self._retained(), f"CKP-1: retained checkpoints: expected {self._retained()}, got {retained}"
        assert self.listener.failovers == self.failovers, (
            f"COORD-6: failovers asked for: expected {self.failovers} (tolerable "
            f"{self.settings.tolerable_failures}), got {self.listener.failovers}"
        )

    @invariant()
    def checkpoint_directories_are_those_of_pending_and_retained_checkpoints(self) -> None:
        if self.coordinator is None:
            return
        _, job = fsspec.core.url_to_fs(self.access.job_dir)
        names = (
            {p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(job, detail=False)} if self.fs.exists(job) else set()
        )
        # an acknowledgement writes nothing into chk-N here: a directory is there from its trigger (or its _metadata)
        present = {n for n in names if n.startswith("chk-")}
        allowed = {f"chk-{c}" for c in [*self._pending_checkpoints(), *self._retained()]}
        assert present <= allowed, (
            f"COORD-5, CKP-1: checkpoint directories {sorted(present - allowed)} remain; only those of pending "
            f"{self._pending_checkpoints()} and retained {self._retained()} checkpoints may"
        )

    @invariant()
    def shared_files_are_kept_while_used_and_deleted_once_unused(self) -> None:
        """CKP-2: never deleted while a retained checkpoint references it; deleted by the first addition to the store
        after which the oldest retained checkpoint is newer than every checkpoint that used it (and at once when the
        run discards its checkpoints)."""
        if self.coordinator is None:
            return
        present = self._shared_files_present()
        gone = self.not_owned - present
        assert not gone, f"COORD-13: files of the snapshot the job did not claim were deleted: {sorted(gone)[:3]}"
        retained = self._retained()
        needed = set().union(*(self.checkpoints[c].referenced for c in retained)) if retained else set()
        missing = needed - present
        assert not missing, f"CKP-2: files of retained checkpoints {retained} are gone: {sorted(missing)[:3]}"
        if self.ended:
            left = present - self.orphans - self.not_owned
            assert not left, f"CKP-2, COORD-11: the run discarded its checkpoints but left {sorted(left)[:3]}"
            return
        if not self.completed:
            return  # nothing was added to the store yet: nothing is deleted
        oldest = retained[0]
        may_stay = needed | {
            path for c in self.checkpoints.values() if c.checkpoint_id >= oldest and not c.savepoint for path in c.used
        }
        may_stay |= self.used_since_completion  # registered after the last addition to the store: the next one
        may_stay |= self.orphans | self.not_owned
        leaked = present - may_stay
        assert not leaked, (
            f"CKP-2: shared files no checkpoint since the oldest retained one ({oldest}) used remain: "
            f"{sorted(leaked)[:3]}"
        )


@pytest.mark.requirement(
    "COORD-2",
    "COORD-3",
    "COORD-4",
    "COORD-5",
    "COORD-6",
    "COORD-8",
    "COORD-9",
    "COORD-11",
    "COORD-13",
    "CKP-1",
    "CKP-2",
)
def test_the_coordinator_keeps_the_files_its_model_keeps() -> None:
    run_state_machine_as_test(
        CoordinatorMachine,
        settings=settings(max_examples=300, stateful_step_count=40, deadline=None),
    )
