"""COORD-6 asked of Flink 2.3's `CheckpointFailureManager` in a JVM: the recording CI checks the coordinator against
(`tests/flink/golden/failure_reasons.json`) must be the live Flink's."""

from __future__ import annotations

import pytest

from tests.flink.golden import FAILURES_FILE, flink_failure_reasons, read_failure_reasons
from tests.flink.referee import Referee

pytestmark = pytest.mark.flink


@pytest.mark.requirement("COORD-6")
def test_the_golden_failure_reasons_are_the_live_flinks(flink: Referee) -> None:
    live = flink_failure_reasons(flink)
    recorded = read_failure_reasons()
    assert recorded == live, (
        f"COORD-6: {FAILURES_FILE}: expected Flink {flink.version}'s counted failure reasons {live}, got a recording "
        f"that differs ({recorded}): run python -m tests.flink.golden"
    )
