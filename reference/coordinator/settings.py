"""Checkpointing settings, with Flink's meanings and defaults (COORD-1..COORD-11), and how they come from Flink 2.x's
`execution.checkpointing.*` keys (`CheckpointingSettings.from_config`)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from statecert.reference import config as cfg
from statecert.reference.config import catalog
from statecert.spec.errors import IllegalConfigurationError


class CheckpointingMode(str, enum.Enum):
    EXACTLY_ONCE = "exactly-once"  # aligned barriers
    UNALIGNED = "unaligned"  # barriers overtake in-flight data, which becomes channel state
    AT_LEAST_ONCE = "at-least-once"  # no alignment


class JobStatus(str, enum.Enum):
    """How a job run ended, for retention (COORD-11)."""

    FINISHED = "finished"  # input ended, or stopped with a savepoint
    CANCELED = "canceled"
    FAILED = "failed"  # restart attempts exhausted
    SUSPENDED = "suspended"


class ExternalizedCheckpointRetention(str, enum.Enum):
    """`execution.checkpointing.externalized-checkpoint-retention` (COORD-11), as Flink's `CheckpointProperties`."""

    NO_EXTERNALIZED_CHECKPOINTS = "NO_EXTERNALIZED_CHECKPOINTS"
    DELETE_ON_CANCELLATION = "DELETE_ON_CANCELLATION"
    RETAIN_ON_CANCELLATION = "RETAIN_ON_CANCELLATION"

    def retains(self, status: JobStatus) -> bool:
        """Whether the job's retained checkpoints outlive a run that ended with `status`."""
        if self is ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS or status is JobStatus.FINISHED:
            return False
        if status is JobStatus.CANCELED:
            return self is ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
        return True  # failed or suspended: kept by both externalized modes


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
    retention: ExternalizedCheckpointRetention = ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS

    def __post_init__(self) -> None:
        if self.interval_ms < 1 or self.timeout_ms < 1:
            raise ValueError("checkpoint interval and timeout must be positive")
        if self.max_concurrent < 1 or self.retained < 1 or self.tolerable_failures < 0 or self.min_pause_ms < 0:
            raise ValueError("max concurrent and retained must be >= 1, tolerable failures and min pause >= 0")
        if self.min_pause_ms > 0 and self.max_concurrent != 1:
            raise ValueError("a min pause between checkpoints implies at most one concurrent checkpoint (Flink)")
        if self.mode is CheckpointingMode.UNALIGNED and self.max_concurrent != 1:
            raise ValueError("unaligned checkpoints allow at most one concurrent checkpoint (Flink)")

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> CheckpointingSettings | None:
        """The settings `execution.checkpointing.*` describe, or None when no interval is set (checkpointing off,
        Flink's default). Unaligned checkpoints with a positive `aligned-checkpoint-timeout` start aligned and
        switch to unaligned after it; with 0 they start unaligned."""
        interval = cfg.read(config, catalog.CHECKPOINTING_INTERVAL)
        if interval is None:
            return None
        mode = CheckpointingMode.EXACTLY_ONCE
        alignment_timeout = None
        at_least_once = cfg.read(config, catalog.CHECKPOINTING_MODE) == "AT_LEAST_ONCE"
        if cfg.read(config, catalog.UNALIGNED_ENABLED):
            if at_least_once:
                raise IllegalConfigurationError(
                    f"{catalog.UNALIGNED_ENABLED.key}: unaligned checkpoints need {catalog.CHECKPOINTING_MODE.key} "
                    "EXACTLY_ONCE"
                )
            timeout = cfg.read(config, catalog.ALIGNED_CHECKPOINT_TIMEOUT)
            mode, alignment_timeout = (
                (CheckpointingMode.UNALIGNED, None) if timeout == 0 else (CheckpointingMode.EXACTLY_ONCE, timeout)
            )
        elif at_least_once:
            mode = CheckpointingMode.AT_LEAST_ONCE
        try:
            return cls(
                interval_ms=interval,
                timeout_ms=cfg.read(config, catalog.CHECKPOINTING_TIMEOUT),
                max_concurrent=cfg.read(config, catalog.MAX_CONCURRENT_CHECKPOINTS),
                min_pause_ms=cfg.read(config, catalog.MIN_PAUSE),
                tolerable_failures=cfg.read(config, catalog.TOLERABLE_FAILED_CHECKPOINTS),
                retained=cfg.read(config, catalog.MAX_RETAINED_CHECKPOINTS),
                mode=mode,
                alignment_timeout_ms=alignment_timeout,
                retention=ExternalizedCheckpointRetention(cfg.read(config, catalog.EXTERNALIZED_CHECKPOINT_RETENTION)),
            )
        except ValueError as exc:
            raise IllegalConfigurationError(f"execution.checkpointing.*: {exc}") from None
