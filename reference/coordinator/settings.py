"""Checkpointing settings, with Flink's meanings and defaults (COORD-1..COORD-6)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class CheckpointingMode(str, enum.Enum):
    EXACTLY_ONCE = "exactly-once"  # aligned barriers
    UNALIGNED = "unaligned"  # barriers overtake in-flight data, which becomes channel state
    AT_LEAST_ONCE = "at-least-once"  # no alignment


@dataclass(frozen=True)
class CheckpointingSettings:
    interval_ms: int = 1000
    timeout_ms: int = 600_000
    max_concurrent: int = 1
    min_pause_ms: int = 0
    tolerable_failures: int = 0
    retained: int = 1
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    alignment_timeout_ms: int | None = None

    def __post_init__(self) -> None:
        if self.interval_ms < 1 or self.timeout_ms < 1:
            raise ValueError("checkpoint interval and timeout must be positive")
        if self.max_concurrent < 1 or self.retained < 1 or self.tolerable_failures < 0 or self.min_pause_ms < 0:
            raise ValueError("max concurrent and retained must be >= 1, tolerable failures and min pause >= 0")
        if self.min_pause_ms > 0 and self.max_concurrent != 1:
            raise ValueError("a min pause between checkpoints implies at most one concurrent checkpoint (Flink)")
        if self.mode is CheckpointingMode.UNALIGNED and self.max_concurrent != 1:
            raise ValueError("unaligned checkpoints allow at most one concurrent checkpoint (Flink)")
