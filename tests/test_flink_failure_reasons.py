"""COORD-6 held to Flink 2.3's `CheckpointFailureManager` as `tox -e flink` recorded it
(`tests/flink/golden/failure_reasons.json`): each failure reason statecert's coordinator knows counts toward the
tolerable failed checkpoints exactly when Flink counts the reason it stands for."""

from __future__ import annotations

import pytest

from statecert.reference.coordinator.failures import CheckpointFailureManager, FailureReason
from tests.flink.golden import read_failure_reasons

# statecert's reasons and the `CheckpointFailureReason` each stands for
FLINK_REASON = {
    FailureReason.EXPIRED: "CHECKPOINT_EXPIRED",
    FailureReason.IO_ERROR: "IO_EXCEPTION",
    FailureReason.ASYNC_PHASE_FAILED: "CHECKPOINT_ASYNC_EXCEPTION",
    FailureReason.FINALIZE_FAILED: "FINALIZE_CHECKPOINT_FAILURE",
    FailureReason.DECLINED: "CHECKPOINT_DECLINED",
    FailureReason.TASK_NOT_READY: "CHECKPOINT_DECLINED_TASK_NOT_READY",
    FailureReason.TASK_FAILED: "TASK_FAILURE",
    FailureReason.COORDINATOR_SHUTDOWN: "CHECKPOINT_COORDINATOR_SHUTDOWN",
    FailureReason.SUBSUMED: "CHECKPOINT_SUBSUMED",
}


@pytest.mark.requirement("COORD-6")
def test_every_reason_stands_for_one_of_flinks() -> None:
    flink = read_failure_reasons()
    unknown = {r.name: f for r, f in FLINK_REASON.items() if f not in flink}
    assert set(FLINK_REASON) == set(FailureReason) and not unknown, (
        f"COORD-6: FailureReason vs Flink's CheckpointFailureReason: expected each reason mapped to one of Flink's, "
        f"got unmapped {sorted(set(FailureReason) - set(FLINK_REASON))} and unknown {unknown}"
    )


@pytest.mark.requirement("COORD-6")
@pytest.mark.parametrize("reason", list(FailureReason), ids=[r.name for r in FailureReason])
def test_a_failure_counts_toward_the_tolerable_number_exactly_when_flink_counts_it(reason: FailureReason) -> None:
    flink = read_failure_reasons()[FLINK_REASON[reason]]
    manager = CheckpointFailureManager(0)
    fails_over = manager.on_failure(reason, savepoint=False)
    assert fails_over == flink, (
        f"COORD-6: CheckpointFailureManager(0).on_failure({reason.name}, savepoint=False): expected "
        f"{'a failover' if flink else 'no failover'}, as Flink's CheckpointFailureManager "
        f"{'counts' if flink else 'ignores'} {FLINK_REASON[reason]}, got {'a failover' if fails_over else 'none'}"
    )
