"""What runs inside Spark's Python workers during an epoch: read a source split's records for the epoch, and per
keyed subtask restore its backend (from checkpoint storage, or a backend this worker process cached at exactly
that checkpoint, never on a task retry), process the records in order, stage the sink output and snapshot.

Faults are real and fire on a task's first attempt only, so Spark's retry succeeds: an exception in a phase,
the worker process killed with SIGKILL, writes to checkpoint storage failing in the fault-injecting file system.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec

from statecert.reference.checkpointing import create_keyed_backend
from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.reference.loader import load_state_backend
from statecert.reference.rescale import keyed_handles_for_subtask
from statecert.reference.simulator.inputs import generate_inputs
from statecert.reference.simulator.tasks import Record
from statecert.reference.storage.faulty_fs import FaultRule
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.reference.tumbling_windows import TumblingWindowOperator, split_watermark
from statecert.spec.errors import StateCertError
from statecert.spec.keyed_backend import CheckpointOptions, KeyedBackendParameters
from statecert.spec.keygroups import assign_key_to_parallel_operator, key_group_range_for_operator
from statecert.spec.metadata import OperatorSubtaskState

OPERATOR = "counter"


class InjectedTaskFailure(RuntimeError):
    """The exception a scenario's task-failure fault raises inside a Spark task."""


@dataclass(frozen=True)
class InputSpec:
    seed: int
    sources: int
    keys_per_source: int
    records_per_source: int
    key_skew: float


@dataclass(frozen=True)
class TaskFault:
    subtask: int
    kind: str  # exception | kill
    phase: str = "processing"  # processing | snapshot | upload


@dataclass(frozen=True)
class EpochTask:
    """Everything a worker needs for one epoch; shipped with the Spark job's closure."""

    job_id: str
    checkpoint_id: int
    location: Any  # the coordinator's storage location for this checkpoint or savepoint
    options: CheckpointOptions
    restore_pointer: str | None
    restore_id: int | None
    backend_config: dict[str, str]
    parallelism: int
    max_parallelism: int
    aggregate: KeyedAggregate
    inputs: InputSpec
    ranges: dict[int, tuple[int, int]]
    faults: tuple[TaskFault, ...] = ()
    failing_writes: str | None = None  # a local path pattern whose writes fail (storage write failure)
    timestamp_ms: int = 0
    cache: bool = True
    window_ms: int = 0  # > 0: event-time tumbling windows of this size instead of running totals
    mini_batch: bool = False  # running totals: the epoch's records per key with one state read and one write


@dataclass
class _Cached:
    checkpoint_id: int
    parallelism: int
    keyed: Any


_CACHE: dict[tuple[str, int], _Cached] = {}  # per worker process: (job, subtask) -> backend at a checkpoint
_INPUTS: dict[InputSpec, list[list[Record]]] = {}
_OWNERS: dict[tuple[Any, int, int], dict[Any, int]] = {}


def inputs(spec: InputSpec) -> list[list[Record]]:
    if spec not in _INPUTS:
        _INPUTS.clear()
        rng = random.Random(spec.seed)
        _INPUTS[spec] = generate_inputs(rng, spec.sources, spec.keys_per_source, spec.records_per_source, spec.key_skew)
    return _INPUTS[spec]


def owner(task: EpochTask, key: Any) -> int:
    key_hash = task.aggregate.key_type.serializer().key_hash(key)
    return assign_key_to_parallel_operator(key_hash, task.max_parallelism, task.parallelism)


def _owners(task: EpochTask) -> dict[Any, int]:
    """The subtask of each key seen so far in this worker for the task's key type and parallelism: a key's hash is
    computed once per worker, not per record."""
    shape = (task.aggregate.key_type, task.max_parallelism, task.parallelism)
    if shape not in _OWNERS:
        _OWNERS.clear()
        _OWNERS[shape] = {}
    return _OWNERS[shape]


def read_split(task: EpochTask, source: int) -> Iterator[tuple[int, list[tuple[str, int, int]]]]:
    """The epoch's records of one source split, grouped by the subtask that owns their key group: one item per
    subtask, its records in offset order, so the shuffle moves a few pickled lists rather than every record alone."""
    start, end = task.ranges[source]
    owners = _owners(task)
    batches: dict[int, list[tuple[str, int, int]]] = {}
    key_of = task.aggregate.key
    for r in inputs(task.inputs)[source][start:end]:
        key = key_of(r.key, r.source)
        subtask = owners.get(key)
        if subtask is None:
            subtask = owners[key] = owner(task, key)
        batch = batches.get(subtask)
        if batch is None:
            batch = batches[subtask] = []
        batch.append((r.key, r.source, r.offset))
    return iter(batches.items())


def _attempt() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.attemptNumber() if context is not None else 0


def _fault(task: EpochTask, subtask: int, phase: str, attempt: int) -> None:
    for fault in task.faults:
        if fault.subtask == subtask and fault.phase == phase and attempt == 0:
            if fault.kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)  # the Python worker dies mid-epoch, like a lost executor
            raise InjectedTaskFailure(f"injected failure of subtask {subtask} in the {phase} phase")


def _restore(task: EpochTask, subtask: int, attempt: int) -> Any:
    key = (task.job_id, subtask)
    cached = _CACHE.pop(key, None)
    usable = (
        task.cache
        and cached is not None
        and attempt == 0
        and cached.checkpoint_id == task.restore_id
        and cached.parallelism == task.parallelism
    )
    if usable:
        assert cached is not None
        return cached.keyed
    if cached is not None:
        cached.keyed.dispose()
    handles: tuple[Any, ...] = ()
    if task.restore_pointer is not None:
        op = load_checkpoint_metadata(task.restore_pointer).operator(OPERATOR)
        handles = keyed_handles_for_subtask(op, task.parallelism, subtask)
    backend = load_state_backend(job_config=task.backend_config)
    params = KeyedBackendParameters(
        task.job_id,
        OPERATOR,
        task.aggregate.key_type.serializer(),
        task.max_parallelism,
        key_group_range_for_operator(task.max_parallelism, task.parallelism, subtask),
        handles,
    )
    return create_keyed_backend(backend, params)


def process_partition(task: EpochTask, subtask: int, items: Iterable[tuple[int, Any]]) -> Iterator[tuple[Any, ...]]:
    """One keyed subtask's epoch. Yields one result: ("ack", subtask, state, staged output, attempt),
    ("decline", subtask, reason) when its snapshot could not be written, or ("error", class name, message)
    for a documented error (e.g. a savepoint this backend cannot restore)."""
    attempt = _attempt()
    # one batch per source split, each in offset order: concatenated by split, the records are in (split, offset)
    # order, the order every run of the job processes them in
    records = [r for _, batch in sorted(items, key=lambda item: item[1][0][1]) for r in batch]
    try:
        keyed = _restore(task, subtask, attempt)
    except StateCertError as exc:
        yield ("error", type(exc).__name__, str(exc))
        return
    try:
        staged = _process(task, subtask, attempt, keyed, records)
        snapshot = keyed.snapshot(task.checkpoint_id, task.timestamp_ms, task.location, task.options)
        _fault(task, subtask, "snapshot", attempt)  # after the synchronous part, before anything is written
        try:
            with failing_writes(task.failing_writes):
                handle = snapshot.run()
        except OSError as exc:
            keyed.dispose()
            yield ("decline", subtask, f"{type(exc).__name__}: {exc}")
            return
        _fault(task, subtask, "upload", attempt)  # written but never acknowledged: the retry writes again
    except BaseException:
        keyed.dispose()  # this attempt's state is gone; a retry restores from the checkpoint
        raise
    if task.cache:
        _CACHE[(task.job_id, subtask)] = _Cached(task.checkpoint_id, task.parallelism, keyed)
    else:
        keyed.dispose()
    yield ("ack", subtask, OperatorSubtaskState((handle,) if handle else (), ()), staged, attempt)


def epoch_watermark(task: EpochTask) -> int:
    """The watermark every subtask has once the epoch's records are in: the least over the source splits of what
    each has sent by the epoch's end (the simulator's sources send the same watermarks)."""
    lengths = [len(split) for split in inputs(task.inputs)]
    return min(split_watermark(task.ranges[s][1], lengths[s], task.window_ms) for s in task.ranges)


def _process_windows(
    task: EpochTask, subtask: int, attempt: int, keyed: Any, records: list[tuple[str, int, int]]
) -> list[tuple[str, int, int]]:
    """The epoch's records into their windows, then the epoch's watermark: the windows it passes fire, in timer
    order, into the staged output as (key, window start, sum)."""
    windows = TumblingWindowOperator(keyed, task.window_ms)
    halfway = len(records) // 2
    for i, (key, source, offset) in enumerate(records):
        if i == halfway:
            _fault(task, subtask, "processing", attempt)
        windows.process(task.aggregate.key(key, source), offset, task.aggregate.weight(offset))
    if not records:
        _fault(task, subtask, "processing", attempt)
    return windows.advance_watermark(epoch_watermark(task))


def _process_mini_batch(
    task: EpochTask, subtask: int, attempt: int, keyed: Any, records: list[tuple[str, int, int]]
) -> list[tuple[Any, int, int]]:
    """Mini-batch aggregation, as Flink's MiniBatchGroupAggFunction does it: the epoch's records grouped by key in
    arrival order, then per key one state read, the fold, one state write. Each record's output still carries the
    key's running total after it, so the exactly-once checks are the per-record ones."""
    state = keyed.get_or_create_state(task.aggregate.descriptor)
    key_of = task.aggregate.key
    groups: dict[Any, list[int]] = {}
    for key, source, offset in records:
        aggregate_key = key_of(key, source)
        offsets = groups.get(aggregate_key)
        if offsets is None:
            groups[aggregate_key] = [offset]
        else:
            offsets.append(offset)
    staged: list[tuple[Any, int, int]] = []
    halfway = len(groups) // 2
    fold, set_current_key, get, update = task.aggregate.fold, keyed.set_current_key, state.value, state.update
    for i, (aggregate_key, offsets) in enumerate(groups.items()):
        if i == halfway:
            _fault(task, subtask, "processing", attempt)
        set_current_key(aggregate_key)
        value, totals = fold(get(), offsets)
        update(value)
        staged.extend(zip([aggregate_key] * len(offsets), offsets, totals, strict=True))
    if not groups:
        _fault(task, subtask, "processing", attempt)
    return staged


def _process(
    task: EpochTask, subtask: int, attempt: int, keyed: Any, records: list[tuple[str, int, int]]
) -> list[tuple[str, int, int]]:
    if task.window_ms:
        return _process_windows(task, subtask, attempt, keyed, records)
    if task.mini_batch:
        return _process_mini_batch(task, subtask, attempt, keyed, records)
    state = keyed.get_or_create_state(task.aggregate.descriptor)
    staged: list[tuple[str, int, int]] = []
    halfway = len(records) // 2
    # the loop's lookups hoisted: per record, only the backend calls and the aggregate remain
    key_of, add, stage = task.aggregate.key, task.aggregate.add, staged.append
    set_current_key, get, update = keyed.set_current_key, state.value, state.update
    for i, (key, source, offset) in enumerate(records):
        if i == halfway:
            _fault(task, subtask, "processing", attempt)
        aggregate_key = key_of(key, source)
        set_current_key(aggregate_key)
        value = add(get(), offset)
        update(value)
        stage((aggregate_key, offset, value["total"]))
    if not records:
        _fault(task, subtask, "processing", attempt)
    return staged


@dataclass
class failing_writes:
    """While active, writes under `pattern` fail in this process's fault-injecting file system."""

    pattern: str | None
    rule: FaultRule | None = field(default=None)

    def __enter__(self) -> None:
        if self.pattern is not None:
            self.rule = FaultRule("write", self.pattern, times=-1)
            fsspec.filesystem("faulty").rules.append(self.rule)

    def __exit__(self, *exc: object) -> None:
        if self.rule is not None:
            fsspec.filesystem("faulty").rules.remove(self.rule)


def clear_cache(job_id: str) -> None:
    """Dispose the backends this worker cached for a job (at the job's end)."""
    for key in [k for k in _CACHE if k[0] == job_id]:
        _CACHE.pop(key).keyed.dispose()
