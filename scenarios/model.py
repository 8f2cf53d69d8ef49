"""What a scenario file describes, as typed values: the job, its seeded input, checkpoint settings, a timeline of
faults and operations split into runs (a `resume` starts the next run), and what must hold at the end."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from statecert.reference.coordinator.settings import CheckpointingMode


class Action(str, enum.Enum):
    TASK_FAILURE = "task-failure"  # an exception in a task (phase: processing, snapshot, upload)
    WORKER_KILL = "worker-kill"  # the worker process running a task is killed
    STORAGE_WRITE_FAILURE = "storage-write-failure"  # checkpoint writes fail (count: how many checkpoints)
    COORDINATOR_CRASH = "coordinator-crash"  # after the last acknowledgement, before the `_metadata` write
    SAVEPOINT = "savepoint"
    STOP_WITH_SAVEPOINT = "stop-with-savepoint"
    CANCEL = "cancel"  # the job ends without a savepoint
    RESUME = "resume"  # a new run from the latest savepoint (or retained checkpoint) of the previous one


class Phase(str, enum.Enum):
    PROCESSING = "processing"  # mid-epoch, while records are processed
    SNAPSHOT = "snapshot"  # in the synchronous part of the snapshot
    UPLOAD = "upload"  # after the state was written, before the acknowledgement


@dataclass(frozen=True)
class JobConfig:
    sources: int = 2
    parallelism: int = 2
    max_parallelism: int = 128
    operator: str = "count"  # count | sum (per key, in value state)
    key_selector: str = "key"  # key: the record's key; split: one key per source split
    key_type: str = "string"  # the keys' Java type: string | long | int | short | byte | double (KG-1)
    backend: str = "hashmap"
    storage: str = "filesystem"  # filesystem | jobmanager (state inline in `_metadata`)
    stages: int = 2  # the simulator also runs 3 (a second keyed shuffle)
    serializer_version: int = 1  # the value state's schema: 2 adds a field (compatible after migration)
    start_from: Path | None = None  # a savepoint to start the first run from (e.g. a golden one)
    changelog: bool = False  # the first run's backend wrapped in the changelog backend (CL-1)
    window_ms: int = 0  # > 0: the operator aggregates in event-time tumbling windows of this size (TM)
    union_state: bool = False  # keyed subtasks keep union list state; every restore must give each all of it (OS-2)


@dataclass(frozen=True)
class InputConfig:
    seed: int = 0
    keys_per_source: int = 10
    records_per_source: int = 300
    key_skew: float = 1.0


@dataclass(frozen=True)
class CheckpointConfig:
    interval_ms: int = 50  # the simulator's interval
    records_per_epoch: int = 50  # the Spark runner's epoch: records per source split between checkpoints
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    timeout_ms: int = 600_000
    max_concurrent: int = 1
    tolerable_failures: int = 0
    retained: int = 1
    incremental: bool = False
    materialize_interval_ms: int = 600_000  # with changelog: state.changelog.periodic-materialize.interval


@dataclass(frozen=True)
class Event:
    """One timeline entry. `epoch` counts from 1 within its run: epoch N is the input between the run's
    checkpoints N-1 and N (the simulator: the N-th checkpoint interval)."""

    action: Action
    epoch: int = 1
    phase: Phase = Phase.PROCESSING
    task: int = 0
    count: int = 1
    format: str = "canonical"  # savepoints: canonical | native
    # resume
    source: str = "savepoint"  # savepoint | checkpoint
    backend: str | None = None  # a backend name, or "other": the reference backend that is not the job's
    parallelism: int | None = None
    serializer_version: int | None = None
    relocate: bool = False
    changelog: bool | None = None  # resume: switch the changelog backend on or off (CL-6); None keeps it


@dataclass(frozen=True)
class Bound:
    min: int | None = None
    max: int | None = None

    def holds(self, value: int) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    def __str__(self) -> str:
        if self.min == self.max and self.min is not None:
            return f"{self.min}"
        return f"between {self.min if self.min is not None else 0} and {self.max if self.max is not None else 'any'}"


@dataclass(frozen=True)
class Expectations:
    exactly_once: bool = True  # the committed sink output has every input record once, in order per key
    state_equals_oracle: bool = True  # the final state equals the oracle's aggregation of the input
    completed_checkpoints: Bound = Bound(min=1)
    failovers: Bound = Bound()
    error: str | None = None  # the documented exception a run must end with
    error_when: str = "always"  # always | native-format-differs (the savepoint's writer and reader differ)
    job_failed: bool = False  # restart attempts exhausted


@dataclass(frozen=True)
class Run:
    """A job run: from the start (or a savepoint) until its input ends, it stops or is cancelled."""

    events: tuple[Event, ...]
    resume: Event | None = None  # how this run started from the previous one


@dataclass(frozen=True)
class Scenario:
    name: str
    path: Path
    description: str
    runners: tuple[str, ...]
    job: JobConfig
    input: InputConfig
    checkpointing: CheckpointConfig
    restart_attempts: int
    runs: tuple[Run, ...]
    expect: Expectations
    backends: tuple[str, ...] = field(default=())  # empty: any backend
    config: tuple[tuple[str, str], ...] = ()  # Flink keys of the `[config]` table, applied over the sections above
