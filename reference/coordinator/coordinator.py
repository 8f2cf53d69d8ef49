"""The checkpoint coordinator (chapter COORD): triggers checkpoints and savepoints, collects acknowledgements,
completes a checkpoint by writing `_metadata`, retains completed checkpoints, counts failures as Flink does.

It is pure logic over an injected scheduler (time and timers), a storage access and a listener (how barriers
reach the tasks and how tasks hear about completion): the simulator and the PySpark runner plug in their own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from statecert.reference.completed_checkpoint_store import CompletedCheckpoint, CompletedCheckpointStore
from statecert.reference.coordinator.failures import CheckpointFailureManager, FailureReason
from statecert.reference.coordinator.scheduler import Cancellable, Scheduler
from statecert.reference.coordinator.settings import CheckpointingSettings, JobStatus
from statecert.reference.storage.location import resolve_checkpoint_pointer
from statecert.spec.errors import CheckpointNotFoundError, IncompleteCheckpointError
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, CheckpointOptions, SnapshotType
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata, OperatorState, OperatorSubtaskState

_LOG = logging.getLogger(__name__)

TaskId = tuple[str, int]  # (operator id, subtask index)


@dataclass(frozen=True)
class JobVertex:
    operator_id: str
    parallelism: int
    max_parallelism: int

    def tasks(self) -> list[TaskId]:
        return [(self.operator_id, i) for i in range(self.parallelism)]


class CoordinatorListener(Protocol):
    """How the coordinator reaches the job."""

    def trigger(self, checkpoint_id: int, timestamp_ms: int, options: CheckpointOptions) -> None:
        """Inject barrier `checkpoint_id` at the sources."""

    def notify_complete(self, checkpoint_id: int, kind: CheckpointKind) -> None:
        """Tell every task (sinks commit)."""

    def notify_aborted(self, checkpoint_id: int, reason: FailureReason) -> None: ...

    def failover(self, reason: str) -> None:
        """Too many failed checkpoints: restart the job from the latest completed checkpoint."""


class CoordinatorCrash(Exception):
    """Raised by a hook to simulate the coordinator process dying at that point."""


@dataclass
class PendingCheckpoint:
    checkpoint_id: int
    timestamp_ms: int
    kind: CheckpointKind
    location: Any
    awaiting: set[TaskId]
    acknowledged: dict[TaskId, OperatorSubtaskState] = field(default_factory=dict)
    stop_after: bool = False
    timer: Cancellable | None = None
    options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS

    @property
    def is_savepoint(self) -> bool:
        return self.kind.is_savepoint


@dataclass(frozen=True)
class TriggerResult:
    checkpoint_id: int | None
    declined: str | None = None


class CheckpointCoordinator:
    def __init__(
        self,
        job_id: str,
        vertices: Sequence[JobVertex],
        access: Any,
        settings: CheckpointingSettings,
        scheduler: Scheduler,
        listener: CoordinatorListener,
        store: CompletedCheckpointStore | None = None,
        next_checkpoint_id: int = 1,
    ) -> None:
        self.job_id = job_id
        self.vertices = list(vertices)
        self.access = access
        self.settings = settings
        self.scheduler = scheduler
        self.listener = listener
        self.store = store or CompletedCheckpointStore(settings.retained)
        self.failures = CheckpointFailureManager(settings.tolerable_failures)
        self.pending: dict[int, PendingCheckpoint] = {}
        self.next_checkpoint_id = next_checkpoint_id
        self.last_completion_ms: int | None = None
        self.before_metadata_write: Any = None  # hook(checkpoint_id) for fault injection
        self._periodic: Cancellable | None = None
        self._shutdown = False
        self.stopped_with_savepoint: str | None = None
        self.last_savepoint: str | None = None
        self.full_checkpoints = False  # until a checkpoint after a restore from a snapshot completes (COORD-13)
        self._aborted: dict[int, Any] = {}  # the locations of aborted checkpoints, for late acknowledgements
        access.initialize_base_locations()  # once, before the first checkpoint, as Flink's coordinator (CS-16)

    # -- triggering --------------------------------------------------------------------------------------------------
    def start_periodic(self) -> None:
        """Trigger every `interval_ms`, respecting max concurrent and min pause (COORD-1)."""
        self._schedule_periodic(self.settings.interval_ms)

    def stop_periodic(self) -> None:
        if self._periodic is not None:
            self._periodic.cancel()
            self._periodic = None

    def _schedule_periodic(self, delay: int) -> None:
        self._periodic = self.scheduler.schedule(delay, self._periodic_trigger)

    def _periodic_trigger(self) -> None:
        if self._shutdown:
            return
        result = self.trigger_checkpoint()
        delay = self.settings.interval_ms
        if result.declined == "min-pause" and self.last_completion_ms is not None:
            delay = max(1, self.last_completion_ms + self.settings.min_pause_ms - self.scheduler.now_ms())
        self._schedule_periodic(delay)

    def trigger_checkpoint(self) -> TriggerResult:
        """A periodic checkpoint, unless too many are pending or the min pause has not passed (COORD-2, COORD-3)."""
        if self._shutdown:
            return TriggerResult(None, "shutdown")
        if len(self.pending) >= self.settings.max_concurrent:  # savepoints count too, as in Flink
            return TriggerResult(None, "too-many-concurrent")
        now = self.scheduler.now_ms()
        if self.last_completion_ms is not None and now - self.last_completion_ms < self.settings.min_pause_ms:
            return TriggerResult(None, "min-pause")
        return TriggerResult(self._start(CheckpointKind.CHECKPOINT, None, False))

    def trigger_savepoint(self, target: str | None = None, stop: bool = False, native: bool = False) -> int:
        """A savepoint: always aligned, never subsumed, not limited by max concurrent (COORD-7)."""
        kind = CheckpointKind.SAVEPOINT_NATIVE if native else CheckpointKind.SAVEPOINT_CANONICAL
        return self._start(kind, target, stop)

    def _start(self, kind: CheckpointKind, target: str | None, stop: bool) -> int:
        checkpoint_id = self.next_checkpoint_id
        self.next_checkpoint_id += 1
        now = self.scheduler.now_ms()
        location = (
            self.access.initialize_location_for_savepoint(checkpoint_id, target)
            if kind.is_savepoint
            else self.access.initialize_location_for_checkpoint(checkpoint_id)
        )
        tasks = {t for v in self.vertices for t in v.tasks()}
        # Until a checkpoint after a restore from a snapshot completes, checkpoints are full: they depend on nothing
        # of the snapshot the job started from (KB-SNAP-10, Flink's FULL_CHECKPOINT).
        # The tasks resolve where to write from the location's reference, sent with the options (CS-13).
        options = CheckpointOptions(
            SnapshotType(kind.value),
            full=self.full_checkpoints and not kind.is_savepoint,
            target_location=location.location_reference,
        )
        pending = PendingCheckpoint(checkpoint_id, now, kind, location, tasks, stop_after=stop, options=options)
        pending.timer = self.scheduler.schedule(
            self.settings.timeout_ms, lambda: self.abort(checkpoint_id, FailureReason.EXPIRED)
        )
        self.pending[checkpoint_id] = pending
        self.listener.trigger(checkpoint_id, now, options)
        return checkpoint_id

    # -- acknowledgements --------------------------------------------------------------------------------------------
    def acknowledge(self, checkpoint_id: int, task: TaskId, state: OperatorSubtaskState) -> bool:
        """Record a task's state; completes the checkpoint when it was the last (COORD-4). False if not pending."""
        if self._shutdown:
            return False  # the job is gone (Flink drops it before registering anything)
        pending = self.pending.get(checkpoint_id)
        if pending is None or not pending.is_savepoint:
            # Every acknowledgement of a checkpoint registers its shared files, a late one's too, so that the next
            # addition to the store deletes what an aborted checkpoint uploaded (CKP-2, Flink's
            # receiveAcknowledgeMessage); a savepoint's files are the user's.
            self.store.registry.register_acknowledged(checkpoint_id, state)
        if pending is None and checkpoint_id in self._aborted:
            # a late acknowledgement of an aborted checkpoint: what it wrote into the checkpoint's exclusive directory
            # goes (Flink's discardSubtaskState), its shared files with the next completion (CKP-2)
            self._aborted[checkpoint_id].dispose_on_failure()
        if pending is None or task not in pending.awaiting:
            return False
        pending.awaiting.discard(task)
        pending.acknowledged[task] = state
        if not pending.awaiting:
            self._complete(pending)
        return True

    def decline(self, checkpoint_id: int, task: TaskId, reason: FailureReason) -> None:
        if checkpoint_id in self.pending:
            self.abort(checkpoint_id, reason)

    def _complete(self, pending: PendingCheckpoint) -> None:
        if self.before_metadata_write is not None:
            self.before_metadata_write(pending.checkpoint_id)  # may raise CoordinatorCrash
        operators = tuple(
            OperatorState(
                v.operator_id,
                v.parallelism,
                v.max_parallelism,
                {i: pending.acknowledged[(v.operator_id, i)] for i in range(v.parallelism)},
            )
            for v in self.vertices
        )
        metadata = CheckpointMetadata(pending.checkpoint_id, operators, pending.kind, pending.timestamp_ms)
        try:
            pointer = pending.location.write_metadata(metadata)
        except Exception as error:  # any failure to finalize aborts the checkpoint, as in Flink (COORD-6)
            # an I/O error, or state the metadata cannot reference (a file outside the job's directory, FMT-9): the
            # checkpoint fails as Flink's FINALIZE_CHECKPOINT_FAILURE, and the job goes on or fails over
            _LOG.warning("checkpoint %d: writing its _metadata failed: %s", pending.checkpoint_id, error)
            self.abort(pending.checkpoint_id, FailureReason.FINALIZE_FAILED)
            return
        del self.pending[pending.checkpoint_id]
        if pending.timer is not None:
            pending.timer.cancel()
        # the min pause runs from any completion, a savepoint's too (COORD-3, Flink's
        # lastCheckpointCompletionRelativeTime)
        self.last_completion_ms = self.scheduler.now_ms()
        if pending.is_savepoint:
            self.last_savepoint = pointer
        else:
            self.full_checkpoints = False
            self.store.add(pointer, metadata)  # subsumes older ones, deletes unused shared files (CKP-1, CKP-2)
            for older in [
                p for p in self.pending.values() if not p.is_savepoint and p.checkpoint_id < pending.checkpoint_id
            ]:
                self.abort(older.checkpoint_id, FailureReason.SUBSUMED)
        self.failures.on_success()
        self.listener.notify_complete(pending.checkpoint_id, pending.kind)
        if pending.stop_after:
            self.stopped_with_savepoint = pointer
            self.shutdown()

    # -- aborts ----------------------------------------------------------------------------------------------------
    def abort(self, checkpoint_id: int, reason: FailureReason) -> None:
        """Drop a pending checkpoint and its files; count the failure; fail over past the tolerable limit (COORD-6)."""
        pending = self.pending.pop(checkpoint_id, None)
        if pending is None:
            return
        if pending.timer is not None:
            pending.timer.cancel()
        pending.location.dispose_on_failure()
        self._aborted[checkpoint_id] = pending.location
        self.listener.notify_aborted(checkpoint_id, reason)
        if self.failures.on_failure(reason, pending.is_savepoint):
            self.failures.on_success()
            self.listener.failover(
                f"exceeded the tolerable failed checkpoints ({self.settings.tolerable_failures}): last {reason.value}"
            )

    def abort_all(self, reason: FailureReason) -> None:
        for checkpoint_id in sorted(self.pending):
            self.abort(checkpoint_id, reason)

    def latest_completed(self) -> CompletedCheckpoint | None:
        return self.store.latest

    def halt(self) -> None:
        """Simulate the coordinator process dying: timers stop, nothing is cleaned up (COORD-8 recovers)."""
        self._shutdown = True
        self.stop_periodic()
        for pending in self.pending.values():
            if pending.timer is not None:
                pending.timer.cancel()
        self.pending.clear()

    def end_job(self, status: JobStatus) -> list[str]:
        """The run ended with `status`: shut down, then discard the retained checkpoints unless the retention
        setting keeps them for that status (COORD-11). Returns the pointers discarded."""
        self.shutdown()
        if self.settings.retention.retains(status):
            return []
        return [c.pointer for c in self.store.discard_all()]

    def restore_from(self, pointer: str, metadata: CheckpointMetadata, claim: bool) -> None:
        """The job starts from `pointer` (COORD-13): CLAIM makes it the job's own, subsumed and discarded like its
        checkpoints (its directory, whether `pointer` names it or its `_metadata`); NO_CLAIM leaves it to the user:
        nothing of it is ever deleted by this job. Either way the job's checkpoint ids go on from the snapshot's, as
        Flink's `restoreSavepoint` resets the checkpoint id counter."""
        if claim:
            self.store.add_claimed(resolve_checkpoint_pointer(pointer).directory, metadata)
        else:
            self.store.registry.register_not_owned(metadata)
        self.next_checkpoint_id = max(self.next_checkpoint_id, metadata.checkpoint_id + 1)
        # Full until one completes: with NO_CLAIM so that the job never depends on the snapshot; with CLAIM too,
        # since a checkpoint references only files under its job's checkpoint directory (FMT-9), where the claimed
        # snapshot need not lie (KB-SNAP-10).
        self.full_checkpoints = True

    def restore_initial(self, pointer: str | None, metadata: CheckpointMetadata | None, claim: bool) -> None:
        """A coordinator recovered from storage (COORD-8), of a job started from `pointer` with the same claim mode
        (COORD-13). When it found no completed checkpoint, it starts from that snapshot again, so that its
        checkpoints are full until one completes: Flink's restarted job master restores the latest checkpoint if
        there is one, else the job's savepoint (`restoreInitialCheckpointIfPresent`, then
        `tryRestoreExecutionGraphFromSavepoint`). Otherwise it still owns a claimed snapshot that has not been
        discarded (Flink's completed checkpoint store holds it), and still leaves an unclaimed one's files alone."""
        if pointer is None or metadata is None:
            return
        if self.store.latest is None:
            self.restore_from(pointer, metadata, claim)
        elif not claim:
            self.store.registry.register_not_owned(metadata)
        else:
            try:
                directory = resolve_checkpoint_pointer(pointer).directory
            except (CheckpointNotFoundError, IncompleteCheckpointError):
                return  # subsumed and discarded (`_metadata` goes first, FMT-13) before the coordinator died
            self.store.add_claimed(directory, metadata)

    def shutdown(self) -> None:
        self._shutdown = True
        self.stop_periodic()
        for pending in list(self.pending.values()):
            if pending.timer is not None:
                pending.timer.cancel()
            self.pending.pop(pending.checkpoint_id)
            pending.location.dispose_on_failure()
