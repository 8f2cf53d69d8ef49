"""What runs inside Spark's Python workers during an epoch: per keyed subtask, take its records (Arrow batches of
the input's Parquet rows that Spark partitioned by owning subtask), restore its backend (from checkpoint
storage, or a backend this worker process cached at exactly that checkpoint since the job's latest restart, never
on a task retry: a failover restores every subtask from storage, as Flink without local recovery), process the
records in order, stage the sink output and snapshot.

Faults are real and fire on a task's first attempt only, so Spark's retry succeeds: an exception in a phase,
the worker process killed with SIGKILL, writes to checkpoint storage failing in the fault-injecting file system.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.serializers import CPickleSerializer

from statecert.reference.checkpointing import create_keyed_backend
from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.reference.loader import load_state_backend
from statecert.reference.rescale import keyed_handles_for_subtask, operator_handles_for_subtasks
from statecert.reference.simulator.inputs import generate_inputs
from statecert.reference.simulator.record import Record
from statecert.reference.storage.faulty_fs import FaultRule
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.reference.tumbling_windows import TumblingWindowOperator, split_watermark
from statecert.reference.union_markers import UNION_MARKERS, UnionRestore, marker
from statecert.scenarios.spark.input_table import EPOCH_COLUMNS, aggregate_names
from statecert.scenarios.spark.staged_output import StagedOutput, keys_at
from statecert.spec.errors import StateCertError
from statecert.spec.keyed_backend import CheckpointOptions, KeyedBackendParameters
from statecert.spec.keygroups import key_group_range_for_operator
from statecert.spec.metadata import CheckpointMetadata, OperatorSubtaskState
from statecert.spec.operator_backend import OperatorBackendParameters

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
    storage_access: Any  # the job's checkpoint storage access, as the tasks see it (picklable)
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
    key_names: Any = None  # a Spark broadcast of the input's key names, in order of id (`input_table`)
    restarts: int = 0  # the job's failovers so far: a backend cached before the latest one is not reused
    union_state: bool = False  # the subtasks keep union list state (OS-2): each restore reports what it read

    def location(self) -> Any:
        """Where this epoch's checkpoint goes: resolved by the worker's storage access from the reference the
        coordinator sent in the options, as a Flink task resolves it (CS-13)."""
        return self.storage_access.resolve_checkpoint_storage_location(self.checkpoint_id, self.options.target_location)


@dataclass
class _Cached:
    checkpoint_id: int
    parallelism: int
    restarts: int
    keyed: Any


_CACHE: dict[tuple[str, int], _Cached] = {}  # per worker process: (job, subtask) -> backend at a checkpoint
_INPUTS: dict[InputSpec, list[list[Record]]] = {}


def inputs(spec: InputSpec) -> list[list[Record]]:
    """The scenario's records drawn from its seed in this worker (the oracle's independent copy of the input)."""
    if spec not in _INPUTS:
        _INPUTS.clear()
        rng = random.Random(spec.seed)
        _INPUTS[spec] = generate_inputs(rng, spec.sources, spec.keys_per_source, spec.records_per_source, spec.key_skew)
    return _INPUTS[spec]


RESULTS_SCHEMA = "result binary"  # a subtask's epoch result, in PySpark's own pickle serialization
_RESULTS = CPickleSerializer()  # worker to driver only, as an RDD's `collect` would: never checkpoint data
_dump_result: Callable[[tuple[Any, ...]], bytes] = _RESULTS.dumps
_load_result: Callable[[bytes], tuple[Any, ...]] = _RESULTS.loads


def subtask_epochs(task: EpochTask, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`mapInArrow` over one partition of the epoch's records, partitioned by owning subtask, each subtask with a
    marker row (no record) so that its partition runs when it has no records: per subtask in the partition, its
    records processed (`process_partition`); yields the results, one binary value each."""
    received = list(batches)
    if not received:
        return
    table = pa.Table.from_batches(received)
    names = task.key_names.value  # a broadcast: fetched once per worker process
    results: list[bytes] = []
    for subtask in pc.unique(table["subtask"]).to_pylist():
        mine = table.filter(pc.and_(pc.equal(table["subtask"], subtask), pc.is_valid(table["source"])))
        records = EpochRecords.from_table(task.aggregate, mine.select(list(EPOCH_COLUMNS)), names)
        results.extend(_dump_result(r) for r in process_partition(task, subtask, records))
    yield pa.record_batch([pa.array(results, pa.binary())], ["result"])


def epoch_result(value: bytes) -> tuple[Any, ...]:
    """A result `subtask_epochs` produced, on the driver."""
    return _load_result(bytes(value))


@dataclass(frozen=True)
class EpochRecords:
    """A keyed subtask's records of one epoch in (split, offset) order, the order every run processes them in:
    per record its aggregate key's index into `distinct` (keys in order of first appearance) and its offset."""

    distinct: list[Any]
    index: npt.NDArray[np.intp]
    offsets: npt.NDArray[np.int64]

    @classmethod
    def from_table(cls, aggregate: KeyedAggregate, table: pa.Table, names: list[str]) -> EpochRecords:
        """From a table of (source, offset, key_id) rows, `names` the key names by id."""
        table = table.sort_by([("source", "ascending"), ("offset", "ascending")])
        encoded = pc.dictionary_encode(table["key_id"]).combine_chunks()
        distinct = [aggregate.key_of_name(names[i]) for i in encoded.dictionary.to_pylist()]
        index = encoded.indices.to_numpy(zero_copy_only=False).astype(np.intp)
        return cls(distinct, index, table["offset"].to_numpy().astype(np.int64))

    @classmethod
    def from_rows(cls, aggregate: KeyedAggregate, rows: list[tuple[str, int, int]]) -> EpochRecords:
        """From (key, source, offset) rows in any order, as the input table holds them."""
        keys, sources, offsets = zip(*rows, strict=True) if rows else ((), (), ())
        table = pa.table({"source": pa.array(sources, pa.int32()), "key": pa.array(keys, pa.string())})
        encoded = pc.dictionary_encode(aggregate_names(aggregate, table)).combine_chunks()
        table = pa.table(
            {
                "source": table["source"],
                "offset": pa.array(offsets, pa.int64()),
                "key_id": encoded.indices.cast(pa.int32()),
            }
        )
        return cls.from_table(aggregate, table, [str(n) for n in encoded.dictionary.to_pylist()])

    def __len__(self) -> int:
        return len(self.index)

    def keys(self) -> list[Any]:
        """Each record's aggregate key."""
        return keys_at(self.distinct, self.index)


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


def _restore(task: EpochTask, subtask: int, attempt: int) -> tuple[Any, CheckpointMetadata | None]:
    """The subtask's keyed backend, and the checkpoint it was restored from when it was restored from storage
    (None when it was this worker's cached backend or started empty)."""
    key = (task.job_id, subtask)
    cached = _CACHE.pop(key, None)
    usable = (
        task.cache
        and cached is not None
        and attempt == 0
        and cached.checkpoint_id == task.restore_id
        and cached.parallelism == task.parallelism
        and cached.restarts == task.restarts
    )
    if usable:
        assert cached is not None
        return cached.keyed, None
    if cached is not None:
        cached.keyed.dispose()
    handles: tuple[Any, ...] = ()
    metadata = None
    if task.restore_pointer is not None:
        metadata = load_checkpoint_metadata(task.restore_pointer)
        handles = keyed_handles_for_subtask(metadata.operator(OPERATOR), task.parallelism, subtask)
    backend = load_state_backend(job_config=task.backend_config)
    params = KeyedBackendParameters(
        task.job_id,
        OPERATOR,
        task.aggregate.key_type.serializer(),
        task.max_parallelism,
        key_group_range_for_operator(task.max_parallelism, task.parallelism, subtask),
        handles,
    )
    return create_keyed_backend(backend, params), metadata


def _restored_union(task: EpochTask, subtask: int, metadata: CheckpointMetadata) -> UnionRestore:
    """The union list state this subtask reads from `metadata`, assigned as Flink assigns it (OS-2)."""
    op = metadata.operator(OPERATOR)
    handles = operator_handles_for_subtasks(op, task.parallelism)[subtask]
    params = OperatorBackendParameters(task.job_id, OPERATOR, handles)
    with load_state_backend(job_config=task.backend_config).create_operator_state_backend(params) as operator:
        elements = tuple(operator.get_union_list_state(UNION_MARKERS).get())
    return UnionRestore(metadata.checkpoint_id, op.parallelism, subtask, elements)


def _union_snapshot(task: EpochTask, subtask: int) -> tuple[Any, ...]:
    """This subtask's union list state for the epoch's checkpoint: its own marker (what it restored from the others
    is theirs to write), as the operator state handle it acknowledges."""
    params = OperatorBackendParameters(task.job_id, OPERATOR, ())
    with load_state_backend(job_config=task.backend_config).create_operator_state_backend(params) as operator:
        operator.get_union_list_state(UNION_MARKERS).update([marker(subtask, task.checkpoint_id)])
        handle = operator.snapshot(task.checkpoint_id, task.timestamp_ms, task.location(), task.options).run()
    return (handle,) if handle else ()


def process_partition(task: EpochTask, subtask: int, records: EpochRecords) -> Iterator[tuple[Any, ...]]:
    """One keyed subtask's epoch. Yields one result: ("ack", subtask, state, staged output, attempt, the union list
    restore or None),
    ("decline", subtask, reason) when its snapshot could not be written, or ("error", class name, message)
    for a documented error (e.g. a savepoint this backend cannot restore)."""
    attempt = _attempt()
    try:
        keyed, restored_from = _restore(task, subtask, attempt)
    except StateCertError as exc:
        yield ("error", type(exc).__name__, str(exc))
        return
    try:
        union = _restored_union(task, subtask, restored_from) if task.union_state and restored_from else None
    except StateCertError as exc:
        keyed.dispose()
        yield ("error", type(exc).__name__, str(exc))
        return
    try:
        staged = _process(task, subtask, attempt, keyed, records)
        snapshot = keyed.snapshot(task.checkpoint_id, task.timestamp_ms, task.location(), task.options)
        _fault(task, subtask, "snapshot", attempt)  # after the synchronous part, before anything is written
        try:
            with failing_writes(task.failing_writes):
                handle = snapshot.run()
                operator_handles = _union_snapshot(task, subtask) if task.union_state else ()
        except OSError as exc:
            keyed.dispose()
            yield ("decline", subtask, f"{type(exc).__name__}: {exc}")
            return
        _fault(task, subtask, "upload", attempt)  # written but never acknowledged: the retry writes again
    except BaseException:
        keyed.dispose()  # this attempt's state is gone; a retry restores from the checkpoint
        raise
    if task.cache:
        _CACHE[(task.job_id, subtask)] = _Cached(task.checkpoint_id, task.parallelism, task.restarts, keyed)
    else:
        keyed.dispose()
    state = OperatorSubtaskState((handle,) if handle else (), operator_handles)
    yield ("ack", subtask, state, staged, attempt, union)


def epoch_watermark(task: EpochTask) -> int:
    """The watermark every subtask has once the epoch's records are in: the least over the source splits of what
    each has sent by the epoch's end (the simulator's sources send the same watermarks)."""
    length = task.inputs.records_per_source
    return min(split_watermark(task.ranges[s][1], length, task.window_ms) for s in task.ranges)


def _process_windows(task: EpochTask, subtask: int, attempt: int, keyed: Any, records: EpochRecords) -> StagedOutput:
    """The epoch's records into their windows, then the epoch's watermark: the windows it passes fire, in timer
    order, into the staged output as (key, window start, sum)."""
    windows = TumblingWindowOperator(keyed, task.window_ms)
    halfway = len(records) // 2
    weight = task.aggregate.weight
    for i, (key, offset) in enumerate(zip(records.keys(), records.offsets.tolist(), strict=True)):
        if i == halfway:
            _fault(task, subtask, "processing", attempt)
        windows.process(key, offset, weight(offset))
    if not len(records):
        _fault(task, subtask, "processing", attempt)
    return StagedOutput.from_rows(windows.advance_watermark(epoch_watermark(task)))


def _process_mini_batch(task: EpochTask, subtask: int, attempt: int, keyed: Any, records: EpochRecords) -> StagedOutput:
    """Mini-batch aggregation, as Flink's MiniBatchGroupAggFunction does it: per key one state read, the epoch's
    records folded (vectorized, `KeyedAggregate.fold`), per key one state write. Each record's output still
    carries its key's running total after it, in arrival order, so the exactly-once checks are the per-record
    ones."""
    state = keyed.get_or_create_state(task.aggregate.descriptor)
    set_current_key, get, update = keyed.set_current_key, state.value, state.update
    before = []
    for key in records.distinct:
        set_current_key(key)
        before.append(get())
    after, totals = task.aggregate.fold(before, records.index, records.offsets)
    halfway = len(after) // 2
    for i, (key, value) in enumerate(zip(records.distinct, after, strict=True)):
        if i == halfway:
            _fault(task, subtask, "processing", attempt)
        set_current_key(key)
        update(value)
    if not after:
        _fault(task, subtask, "processing", attempt)
    return StagedOutput(records.distinct, records.index, records.offsets, totals)


def _process(task: EpochTask, subtask: int, attempt: int, keyed: Any, records: EpochRecords) -> StagedOutput:
    if task.window_ms:
        return _process_windows(task, subtask, attempt, keyed, records)
    if task.mini_batch:
        return _process_mini_batch(task, subtask, attempt, keyed, records)
    state = keyed.get_or_create_state(task.aggregate.descriptor)
    totals: list[int] = []
    # the loop's lookups hoisted: per record, only the backend calls and the aggregate remain
    add, stage = task.aggregate.add, totals.append
    set_current_key, get, update = keyed.set_current_key, state.value, state.update

    def process(keys: list[Any], offsets: list[int]) -> None:
        for key, offset in zip(keys, offsets, strict=True):
            set_current_key(key)
            value = add(get(), offset)
            update(value)
            stage(value["total"])

    halfway = len(records) // 2
    keys, offsets = records.keys(), records.offsets.tolist()
    process(keys[:halfway], offsets[:halfway])
    _fault(task, subtask, "processing", attempt)  # halfway through the epoch's records (or with none)
    process(keys[halfway:], offsets[halfway:])
    return StagedOutput(records.distinct, records.index, records.offsets, np.array(totals, dtype=np.int64))


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
