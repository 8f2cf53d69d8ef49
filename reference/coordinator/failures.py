"""Why checkpoints fail, and which failures count toward the tolerable limit, as Flink counts them (COORD-6)."""

from __future__ import annotations

import enum


class FailureReason(str, enum.Enum):
    EXPIRED = "expired"  # the checkpoint timed out
    IO_ERROR = "io-error"  # storage failed while writing state
    ASYNC_PHASE_FAILED = "async-phase-failed"  # a task's asynchronous snapshot part failed
    FINALIZE_FAILED = "finalize-failed"  # writing _metadata failed
    DECLINED = "declined"  # a task declined the checkpoint (Flink's generic CHECKPOINT_DECLINED)
    TASK_NOT_READY = "task-not-ready"  # a task declined: not running yet (CHECKPOINT_DECLINED_TASK_NOT_READY)
    TASK_FAILED = "task-failed"  # a task failed; failover handles it
    COORDINATOR_SHUTDOWN = "coordinator-shutdown"
    SUBSUMED = "subsumed"  # a newer checkpoint completed first

    @property
    def counts_toward_tolerable(self) -> bool:
        return self in (
            FailureReason.EXPIRED,
            FailureReason.IO_ERROR,
            FailureReason.ASYNC_PHASE_FAILED,
            FailureReason.FINALIZE_FAILED,
            FailureReason.DECLINED,
        )


class CheckpointFailureManager:
    """Consecutive counted failures beyond `tolerable` ask for a failover; a completed checkpoint resets the count."""

    def __init__(self, tolerable: int) -> None:
        if tolerable < 0:
            raise ValueError(f"tolerable failed checkpoints must be >= 0, got {tolerable}")
        self.tolerable = tolerable
        self.consecutive = 0

    def on_failure(self, reason: FailureReason, savepoint: bool) -> bool:
        """Record a failure; True when the job must fail over. Savepoint failures never count."""
        if savepoint or not reason.counts_toward_tolerable:
            return False
        self.consecutive += 1
        return self.consecutive > self.tolerable

    def on_success(self) -> None:
        self.consecutive = 0
