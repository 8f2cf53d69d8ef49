"""A simulation run: the job's tasks on simpy, the real coordinator and backends, faults, failover, and a report.

Deterministic for a seed: all randomness comes from one `random.Random(seed)`, time is simpy's, and nothing from
the host (paths, clocks, ids) enters the report.
"""

from __future__ import annotations

import contextlib
import functools
import random
import statistics
from collections import Counter
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import numpy.typing as npt
import simpy

from statecert.reference import config as cfg
from statecert.reference.config import catalog
from statecert.reference.coordinator.coordinator import CheckpointCoordinator, CoordinatorCrash, JobVertex, TaskId
from statecert.reference.coordinator.failures import FailureReason
from statecert.reference.coordinator.recovery import recover_from_storage
from statecert.reference.coordinator.settings import CheckpointingMode, JobStatus
from statecert.reference.format.paths import is_within
from statecert.reference.loader import load_state_backend
from statecert.reference.rescale import keyed_handles_for_subtask, operator_handles_for_subtasks
from statecert.reference.shared_state_registry import shared_files, subtask_shared_files
from statecert.reference.simulator.checkers import CheckResult, check_output_columns
from statecert.reference.simulator.cuts import cut_violations, source_offsets
from statecert.reference.simulator.flink_config import restart_strategy
from statecert.reference.simulator.inputs import draw_key_indices, split_keys
from statecert.reference.simulator.job_spec import Fault, JobSpec, aggregate_of
from statecert.reference.simulator.keyed_tasks import CounterTask, KeyedTask, RouterTask
from statecert.reference.simulator.keyspace import Keyspace
from statecert.reference.simulator.network import Channel
from statecert.reference.simulator.record import Record
from statecert.reference.simulator.record_batch import RecordBatch
from statecert.reference.simulator.scheduler import SimpyScheduler
from statecert.reference.simulator.sink_output import SinkPart, output_columns, output_rows
from statecert.reference.simulator.tasks import SourceTask
from statecert.reference.storage.discard import remove_file
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.jobmanager import JobManagerCheckpointStorage
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.reference.tumbling_windows import WindowCheck, check_windows, expected_windows
from statecert.reference.union_markers import UnionRestore
from statecert.spec.errors import IllegalConfigurationError
from statecert.spec.handles import ChangelogStateBackendHandle, IncrementalKeyedStateHandle
from statecert.spec.keyed_backend import SnapshotType
from statecert.spec.keygroups import assign_key_to_parallel_operator, key_group_range_for_operator
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata, OperatorSubtaskState


class Simulation:
    def __init__(self, spec: JobSpec, seed: int, workdir: Path, restore_from: str | None = None) -> None:
        """`restore_from`: a savepoint or retained checkpoint (directory or `_metadata`) the job starts from, as
        Flink's `-s`; its operators may have another parallelism (rescaling by key groups) or backend."""
        self.spec, self.seed = spec, seed
        self.env = simpy.Environment()
        self.rng = random.Random(seed)
        self.aggregate = aggregate_of(spec)
        self.keys = self.aggregate.key_type.serializer()
        self._owners: dict[Any, int] = {}
        self._first_owners: dict[tuple[str, int], int] = {}
        self.keyspace = Keyspace(
            lambda r: self.aggregate.key(r.key, r.source),
            self.counter_key,
            self.first_owner,
            lambda r: self.owner(self.counter_key(r)),
        )
        self.input_ids = self._draw_inputs()
        flink_config = dict(spec.config)
        restore_from = restore_from or cfg.read(flink_config, catalog.STATE_RECOVERY_PATH)
        self.claim = cfg.read(flink_config, catalog.STATE_RECOVERY_CLAIM_MODE) == "CLAIM"
        self.initial = load_checkpoint_metadata(restore_from) if restore_from else None
        self.restored_from = restore_from
        self.restart = restart_strategy(spec)
        self.restart_rng = random.Random(seed ^ 0x5EED)  # restart jitter, apart from the job's own draws
        self.storage: Any = FileSystemCheckpointStorage(
            str(workdir / "checkpoints"),
            savepoint_dir=str(workdir / "sp"),
            file_state_size_threshold=spec.file_state_size_threshold,
        ).configure(flink_config)
        if spec.storage == "jobmanager":
            self.storage = JobManagerCheckpointStorage(
                checkpoint_dir=str(workdir / "checkpoints"), savepoint_dir=str(workdir / "sp")
            ).configure(flink_config)
        self.access = self.storage.create_checkpoint_storage("sim")
        self.task_access = self.storage.create_checkpoint_storage("sim")  # the tasks' own view of the storage (CS-13)
        if spec.changelog and spec.checkpointing.max_concurrent > 1:
            raise IllegalConfigurationError(
                "checkpointing.max_concurrent: the changelog backend allows 1 concurrent checkpoint, as Flink "
                f"requires (CL-10), got {spec.checkpointing.max_concurrent}"
            )
        self.backend = load_state_backend(
            job_config={
                **flink_config,
                "state.backend.type": spec.backend,
                "state.backend.rocksdb.localdir": str(workdir / "local"),
                "execution.checkpointing.incremental": str(spec.incremental).lower(),
                "state.changelog.enabled": str(spec.changelog).lower(),
                "state.changelog.periodic-materialize.interval": f"{spec.materialize_interval_ms}ms",
                **(
                    {"state.backend.rocksdb.options-factory": spec.rocksdb_options_factory}
                    if spec.rocksdb_options_factory
                    else {}
                ),
            }
        )
        self.start_offsets = source_offsets(self.initial, self.backend) if self.initial else {}
        self.keyed_stages = ("router", "counter") if spec.stages == 3 else ("counter",)
        self.vertices = [
            JobVertex("source", spec.sources, spec.max_parallelism),
            *(JobVertex(stage, spec.parallelism, spec.max_parallelism) for stage in self.keyed_stages),
        ]
        self.scheduler = SimpyScheduler(self.env)
        self.coordinator = self._coordinator(None, 1)
        if self.initial is not None and restore_from is not None:
            self.coordinator.restore_from(restore_from, self.initial, claim=self.claim)
        self.attempt = 0
        self.sources: list[SourceTask] = []
        self.routers: list[RouterTask] = []
        self.counters: list[CounterTask] = []
        self.in_flight = 0  # records sent and not yet taken by a live task
        self.stop_savepoint: int | None = None  # the pending stop-with-savepoint
        self.stopped_with_savepoint: str | None = None
        self.savepoints: list[dict[str, Any]] = []
        self.savepoint_pointers: list[str] = []  # not in the report: they are host paths
        self.end_offsets: dict[int, int] = {}  # per source, where a stop-with-savepoint ended the input
        self.fired: set[int] = set()  # faults that fire once (phase-armed task crashes, coordinator crashes)
        self.cancelled = False
        self.last_completed_pointer: str | None = None  # the latest completed checkpoint or savepoint
        self.last_committed_pointer: str | None = None  # the latest that committed the sink (not intermediate)
        self.sink: list[SinkPart] = []  # the committed output, in commit order
        self.timeline: list[dict[str, Any]] = []
        self.triggered_at: dict[int, float] = {}
        self.durations: list[float] = []
        self.alignment_ms: list[float] = []
        self.start_delays: list[float] = []
        self.spans: list[dict[str, Any]] = []  # per task: alignment (or unaligned) and snapshot spans
        self.records_per_bucket: dict[str, dict[int, int]] = {}
        self.state_bytes: dict[int, int] = {}
        self.in_flight_bytes = 0
        self.persisted_output_records = 0
        self.processed = 0
        self.last_processed_at = 0.0
        self.messages = 0
        self.uploaded_bytes: dict[int, int] = {}
        self.materialized_bytes = 0  # changelog materializations, uploaded outside checkpoints
        self._uploaded_files: set[str] = set()
        # shared files an upload wrote first, until its acknowledgement reaches the coordinator
        self._unacknowledged: dict[tuple[int, int, TaskId], set[str]] = {}
        # shared files only a dead process knew of: a task crashed before acknowledging them, or the coordinator
        # before completing their checkpoint; Flink leaves them too, nobody can tell they are unused
        self.orphaned_files: set[str] = set()
        self.finished: dict[int, set[int]] = {}
        self.failovers: list[dict[str, Any]] = []
        self.done = self.env.event()
        self.failed = False
        # fault state
        self.storage_down = False
        self.bandwidth_factor = 1.0
        self.extra_latency = 0.0
        self.switched_to_unaligned = 0
        # independent bookkeeping for the checkers
        self.latest_completed_seen: int | None = (
            self.initial.checkpoint_id if self.initial is not None and self.claim else None
        )
        self.discarded_at_end: list[str] = []
        self.max_pending = 0
        self.ended_at: dict[int, float] = {}
        self.violations: list[str] = []
        # union list state (OS-2): the checkpoint the tasks being started restore from (its id and the counters'
        # parallelism in it), and each counter's restore with the union elements it read
        self.restoring: tuple[int, int] | None = None
        self.union_restores: list[UnionRestore] = []
        self._checked_cuts: set[str] = set()  # the snapshots whose consistent cut was checked

    def _draw_inputs(self) -> list[npt.NDArray[np.int64]]:
        """Per source split, its records' key ids (a record's offset is its position)."""
        spec = self.spec
        indices = draw_key_indices(self.rng, spec.sources, spec.keys_per_source, spec.records_per_source, spec.key_skew)
        splits = []
        for s in range(spec.sources):
            names, which = split_keys(s, indices[s])
            ids = np.array([self.keyspace.intern(name, s) for name in names], dtype=np.int64)
            splits.append(ids[which])
        return splits

    @functools.cached_property
    def inputs(self) -> list[list[Record]]:
        """The input as records, per source split (for window checks and callers that want rows)."""
        offsets = [np.arange(len(ids), dtype=np.int64) for ids in self.input_ids]
        return [list(RecordBatch(ids, o, self.keyspace)) for ids, o in zip(self.input_ids, offsets, strict=True)]

    @property
    def committed(self) -> list[tuple[Any, ...]]:
        """The sink's committed output as rows, in commit order: (key, source offset, running total) per record,
        or what fired windows produced."""
        return output_rows(self.sink, self.keyspace)

    def _input_totals(self, offsets: dict[int, int]) -> npt.NDArray[np.int64]:
        """By aggregate key index, what the records before `offsets[s]` of every split s add to the key's total."""
        index = self.keyspace.column("aggregate_index")
        count = len(self.keyspace.keys_by_index["aggregate_index"])
        sums = np.zeros(count, dtype=np.int64)
        for s, ids in enumerate(self.input_ids):
            end = offsets.get(s, 0)
            weights = self.aggregate.weights(np.arange(end, dtype=np.int64)).astype(np.float64)  # exact below 2**53
            sums += np.rint(np.bincount(index[ids[:end]], weights, minlength=count)).astype(np.int64)
        return sums

    def input_weights(self, offsets: dict[int, int]) -> Counter[Any]:
        """Per aggregate key, what the records before `offsets[s]` of every split s add to its total."""
        keys, sums = self.keyspace.keys_by_index["aggregate_index"], self._input_totals(offsets)
        return Counter({keys[k]: int(sums[k]) for k in np.flatnonzero(sums).tolist()})

    # -- wiring ------------------------------------------------------------------------------------------------------
    def _coordinator(self, store: Any, next_id: int) -> CheckpointCoordinator:
        coordinator = CheckpointCoordinator(
            "sim", self.vertices, self.access, self.spec.checkpointing, self.scheduler, self, store, next_id
        )
        coordinator.before_metadata_write = self._crash_hook
        return coordinator

    def _crash_hook(self, checkpoint_id: int) -> None:
        """A coordinator-crash fault fires once, before writing checkpoint `fault.checkpoint`, or (checkpoint 0)
        the first checkpoint completing at or after `fault.at_ms`; savepoints are not affected."""
        pending = self.coordinator.pending.get(checkpoint_id)
        if pending is None or pending.is_savepoint:
            return
        for i, fault in enumerate(self.spec.faults):
            if fault.kind != "coordinator-crash-before-metadata" or i in self.fired:
                continue
            if checkpoint_id == fault.checkpoint or (fault.checkpoint == 0 and self.env.now >= fault.at_ms):
                self.fired.add(i)
                raise CoordinatorCrash(f"coordinator crashed before writing checkpoint {checkpoint_id}")

    def crash_in_phase(self, task: str, phase: str) -> bool:
        """An armed task-crash fault for `task` in `phase` (snapshot or upload) fires now: the task fails over
        instead of going on (once per fault)."""
        for i, fault in enumerate(self.spec.faults):
            if (
                fault.kind == "task-crash"
                and fault.phase == phase
                and fault.task == task
                and self.env.now >= fault.at_ms
                and i not in self.fired
            ):
                self.fired.add(i)
                self.env.process(self._task_crash(0.0, f"task {task} crashed in the {phase} phase"))
                return True
        return False

    def first_owner(self, record: Record) -> int:
        """The subtask of the first keyed stage that `record` goes to (cached per record key and split)."""
        route = (record.key, record.source)
        subtask = self._first_owners.get(route)
        if subtask is None:
            subtask = self._first_owners[route] = self.owner(self.first_stage_key(record))
        return subtask

    def first_stage_key(self, record: Record) -> Any:
        """The key the sources partition by: the routers' in a 3-stage job, else the counters'."""
        return self.aggregate.key(record.key, record.source) if self.spec.stages == 3 else self.counter_key(record)

    def counter_key(self, record: Record) -> Any:
        """The counters' key: in a 3-stage job another key than the routers', so the second shuffle is its own."""
        key = self.aggregate.key(record.key, record.source)
        return key if self.spec.stages == 2 else self.aggregate.key_type.second_stage(key)

    def owner(self, key: Any) -> int:
        """The keyed subtask of `key` (computed once per key: the hash is a murmur over the serialized key)."""
        subtask = self._owners.get(key)
        if subtask is None:
            subtask = self._owners[key] = assign_key_to_parallel_operator(
                self.keys.key_hash(key), self.spec.max_parallelism, self.spec.parallelism
            )
        return subtask

    def unaligned_barriers(self, options: Any) -> bool:
        """Unaligned checkpoints send barriers as priority events; savepoints are always aligned."""
        return (
            self.spec.checkpointing.mode is CheckpointingMode.UNALIGNED
            and options.snapshot_type is SnapshotType.CHECKPOINT
        )

    def location(self, checkpoint_id: int, options: Any) -> Any:
        """Where a task writes checkpoint `checkpoint_id`: resolved by the tasks' storage access from the reference
        the barrier's options carry (CS-13); None once the checkpoint is no longer pending."""
        if checkpoint_id not in self.coordinator.pending:
            return None
        return self.task_access.resolve_checkpoint_storage_location(checkpoint_id, options.target_location)

    def _start_tasks(self) -> None:
        latest = self.coordinator.latest_completed()
        restore = latest.metadata if latest else self.initial
        operators = {op.operator_id: op for op in restore.operators} if restore else {}
        source_op = operators.get("source")

        def operator_shares(op: Any, parallelism: int) -> list[tuple[Any, ...]]:
            """Each subtask's operator state, assigned by mode as Flink assigns it (OS-1..OS-3)."""
            return operator_handles_for_subtasks(op, parallelism) if op else [()] * parallelism

        counter_state = operators.get("counter")
        self.restoring = (restore.checkpoint_id, counter_state.parallelism) if restore and counter_state else None

        created = contextlib.ExitStack()  # the tasks started so far, disposed if a later one cannot start

        def started(task: Any) -> Any:
            created.callback(task.dispose)
            return task

        def keyed_stage(kind: type[KeyedTask], stage: str) -> list[Any]:
            op, p = operators.get(stage), self.spec.parallelism
            shares = operator_shares(op, p)
            return [
                started(
                    kind(
                        self,
                        i,
                        self.attempt,
                        keyed_handles_for_subtask(op, p, i) if op else (),
                        shares[i],
                        key_group_range_for_operator(self.spec.max_parallelism, p, i),
                    )
                )
                for i in range(p)
            ]

        self.in_flight = 0
        with created:
            source_shares = operator_shares(source_op, self.spec.sources)
            sources = [started(SourceTask(self, s, self.attempt, source_shares[s])) for s in range(self.spec.sources)]
            routers = keyed_stage(RouterTask, "router") if self.spec.stages == 3 else []
            counters = keyed_stage(CounterTask, "counter")
            created.pop_all()
        self.sources, self.routers, self.counters = sources, routers, counters
        senders: list[Any] = self.sources
        for stage in ([self.routers] if self.routers else []) + [self.counters]:
            for task in stage:
                task.inputs = [
                    Channel(
                        self.env,
                        task.inbox,
                        s,
                        self.spec.buffer_records,
                        self.spec.latency_ms,
                        self.spec.latency_jitter_ms,
                        self.rng,
                        extra_latency=self._extra_latency,
                        on_priority=task.notify_priority,
                    )
                    for s in range(len(senders))
                ]
            for sender in senders:
                sender.connect([task.inputs[sender.index] for task in stage])
            senders = stage
        for task in self._tasks():
            self.env.process(task.run())
        self.coordinator.start_periodic()

    def _tasks(self) -> list[Any]:
        return [*self.sources, *self.routers, *self.counters]

    def _delivered(self) -> int:
        return sum(c.delivered for task in [*self.routers, *self.counters] for c in task.inputs)

    # -- coordinator listener ------------------------------------------------------------------------------------------
    def trigger(self, checkpoint_id: int, timestamp_ms: int, options: Any) -> None:
        self.triggered_at[checkpoint_id] = self.env.now
        pending = [p for p in self.coordinator.pending.values() if not p.is_savepoint]
        self.max_pending = max(self.max_pending, len(pending))
        self.timeline.append({"t": self.env.now, "event": "trigger", "checkpoint": checkpoint_id})
        for source in self.sources:
            source.request_barrier(checkpoint_id, options)

    def _savepoint(self, fault: Fault) -> Generator[Any, Any, None]:
        yield self.env.timeout(fault.at_ms)
        if self.failed or self.done.triggered:
            return
        stop = fault.kind == "stop-with-savepoint"
        checkpoint_id = self.coordinator.trigger_savepoint(stop=stop, native=fault.native)
        if stop:
            self.stop_savepoint = checkpoint_id

    def notify_complete(self, checkpoint_id: int, kind: CheckpointKind) -> None:
        """Checkpoints and stop-with-savepoint commit the sink; an intermediate savepoint has no side effects (as
        in Flink since 1.15): its output is committed with the next checkpoint, and recovery never uses it."""
        self.durations.append(self.env.now - self.triggered_at.get(checkpoint_id, self.env.now))
        self.ended_at[checkpoint_id] = self.env.now
        self.timeline.append({"t": self.env.now, "event": "complete", "checkpoint": checkpoint_id})
        stop = checkpoint_id == self.stop_savepoint
        if kind.is_savepoint:
            self.savepoints.append({"id": checkpoint_id, "kind": kind.value, "at_ms": round(self.env.now, 3)})
            self.savepoint_pointers.append(str(self.coordinator.last_savepoint))
            self.last_completed_pointer = self.coordinator.last_savepoint
            if not stop:
                return
        else:
            latest = self.coordinator.latest_completed()
            self.last_completed_pointer = latest.pointer if latest else None
            self.latest_completed_seen = checkpoint_id
            self._check_shared_files()
            for task in [*self.routers, *self.counters]:
                task.keyed.notify_checkpoint_complete(checkpoint_id)  # the next incremental checkpoint's base
        self.last_committed_pointer = self.last_completed_pointer
        for counter in self.counters:
            self.sink.extend(counter.commit(checkpoint_id))
        if stop:  # stopped: what came after the savepoint is discarded
            self.stopped_with_savepoint = self.coordinator.last_savepoint
            if not self.done.triggered:
                self.done.succeed()
            return
        drained = self.in_flight == 0 and all(task.idle for task in [*self.routers, *self.counters])
        if len(self.finished.get(checkpoint_id, ())) == self.spec.sources and drained and not self.done.triggered:
            self.done.succeed()  # everything emitted was processed and committed

    def notify_aborted(self, checkpoint_id: int, reason: FailureReason) -> None:
        if checkpoint_id == self.stop_savepoint:  # a failed stop-with-savepoint: the job goes on
            self.stop_savepoint = None
            self.end_offsets.clear()
            for source in self.sources:
                source.resume()
        for task in [*self.routers, *self.counters]:
            task.keyed.notify_checkpoint_aborted(checkpoint_id)
        self.ended_at[checkpoint_id] = self.env.now
        self.timeline.append({"t": self.env.now, "event": "abort", "checkpoint": checkpoint_id, "reason": reason.value})

    def failover(self, reason: str) -> None:
        self._failover(reason)

    # -- acknowledgements after the asynchronous part's simulated duration -------------------------------------------
    def ack_later(
        self, attempt: int, checkpoint_id: int, task: TaskId, state: OperatorSubtaskState, finished: bool = False
    ) -> float:
        """Acknowledge once the asynchronous part has written `state` at the storage's bandwidth. Returns how long
        the task itself is blocked: that time with synchronous snapshots, else nothing."""
        if finished:
            self.finished.setdefault(checkpoint_id, set()).add(task[1])
        self.state_bytes[checkpoint_id] = self.state_bytes.get(checkpoint_id, 0) + state.state_size
        self._unacknowledged[(attempt, checkpoint_id, task)] = subtask_shared_files(state) - self._uploaded_files
        uploaded = self._new_bytes(state)
        self.uploaded_bytes[checkpoint_id] = self.uploaded_bytes.get(checkpoint_id, 0) + uploaded
        # the upload takes the bytes this checkpoint writes: files of earlier checkpoints are only referenced
        delay = uploaded / (self.spec.bandwidth_bytes_per_ms * self.bandwidth_factor)
        self.spans.append(
            {
                "task": f"{task[0]}-{task[1]}",
                "kind": "snapshot",
                "start": round(self.env.now, 3),
                "end": round(self.env.now + delay, 3),
                "checkpoint": checkpoint_id,
            }
        )
        self.env.process(self._ack(attempt, checkpoint_id, task, state, delay))
        return delay if self.spec.synchronous_snapshots else 0.0

    def _new_shared(self, streams: Any) -> int:
        """Bytes of the streams not uploaded by an earlier checkpoint (a referenced file costs nothing)."""
        total = 0
        for stream in streams:
            path = getattr(stream, "path", None)
            if path is None or path not in self._uploaded_files:
                total += stream.size
                if path is not None:
                    self._uploaded_files.add(path)
        return total

    def _new_bytes(self, state: OperatorSubtaskState) -> int:
        """Bytes this acknowledgement wrote: shared files already uploaded by earlier checkpoints are referenced."""
        total = 0
        for handle in state.managed_keyed_state:
            if isinstance(handle, ChangelogStateBackendHandle):
                # the log's new segments; a materialization is uploaded in the background (CL-8), so its files
                # are never charged to a checkpoint
                total += self._new_shared(segment.delegate for segment in handle.changelog)
                for part in handle.materialized:
                    if isinstance(part, IncrementalKeyedStateHandle):
                        streams = [*part.shared_state.values(), *part.private_state.values(), part.meta_state]
                    else:
                        streams = [part.delegate]
                    self.materialized_bytes += self._new_shared(streams)
            elif isinstance(handle, IncrementalKeyedStateHandle):
                for shared in handle.shared_state.values():
                    path = getattr(shared, "path", None)
                    if path is None or path not in self._uploaded_files:
                        total += shared.size
                        if path is not None:
                            self._uploaded_files.add(path)
                total += sum(h.size for h in handle.private_state.values()) + handle.meta_state.size
            else:
                total += handle.size
        return total + sum(h.size for h in state.managed_operator_state)

    def decline(self, checkpoint_id: int, task: TaskId) -> None:
        """A task could not write its snapshot (storage outage): an I/O failure that counts (COORD-6)."""
        self.coordinator.decline(checkpoint_id, task, FailureReason.IO_ERROR)

    def _ack(
        self, attempt: int, checkpoint_id: int, task: TaskId, state: OperatorSubtaskState, delay: float
    ) -> Generator[Any, Any, None]:
        yield self.env.timeout(delay)
        if attempt != self.attempt:
            return  # its attempt ended: its task was cancelled, and what it wrote discarded
        written = self._unacknowledged.pop((attempt, checkpoint_id, task), set())
        if self.crash_in_phase(f"{task[0]}-{task[1]}", "upload"):
            self.orphaned_files |= written
            return
        try:
            self.coordinator.acknowledge(checkpoint_id, task, state)
        except CoordinatorCrash as crash:
            self._coordinator_crash(str(crash))

    # -- faults and recovery -----------------------------------------------------------------------------------------
    def _coordinator_crash(self, reason: str) -> None:
        self.timeline.append({"t": self.env.now, "event": "coordinator-crash"})
        self.coordinator.halt()
        known = self.coordinator.store.registry.registered()
        recovered = recover_from_storage(
            self.access.job_dir, self.spec.checkpointing.retained, None if self.claim else self.restored_from
        )
        self.orphaned_files |= known - recovered.store.shared_files()
        self.coordinator = self._coordinator(recovered.store, recovered.next_checkpoint_id)
        self.coordinator.restore_initial(self.restored_from, self.initial, self.claim)
        self._failover(reason)

    def _failover(self, reason: str) -> None:
        latest = self.coordinator.latest_completed()
        restored_from = latest.metadata.checkpoint_id if latest else None
        if restored_from != self.latest_completed_seen:
            self.violations.append(
                f"recovered from checkpoint {restored_from}, the latest completed is {self.latest_completed_seen}"
            )
        if latest is not None and self._checkpoints_are_cuts():
            # the checkpoint the job restores from, taken mid-run (in flight data, channel state): the run's end
            # sees only the retained ones, of a job that has drained by then
            self._check_cut(latest.pointer, latest.metadata)
        self.failovers.append(
            {
                "at_ms": round(self.env.now, 3),
                "reason": reason,
                "restored_from": latest.metadata.checkpoint_id if latest else None,
            }
        )
        self.timeline.append({"t": self.env.now, "event": "failover", "reason": reason})
        self.attempt += 1
        self.coordinator.stop_periodic()
        self.coordinator.abort_all(FailureReason.TASK_FAILED)
        for task in self._tasks():
            task.dispose()
        self._discard_unacknowledged()
        self.messages += self._delivered()
        self.sources, self.routers, self.counters = [], [], []
        delay = self.restart.on_failure(self.env.now, self.restart_rng)
        if delay is None:
            self.failed = True
            self.timeline.append({"t": self.env.now, "event": "job-failed"})
            if not self.done.triggered:
                self.done.succeed()
            return
        self.env.process(self._restart(self.attempt, delay))

    def _restart(self, attempt: int, delay: float) -> Generator[Any, Any, None]:
        yield self.env.timeout(delay)
        if attempt == self.attempt:  # a failover during the restart delay supersedes this restart
            self._start_tasks()

    def _task_crash(self, at_ms: float, what: str) -> Generator[Any, Any, None]:
        yield self.env.timeout(at_ms)
        if not self.done.triggered:
            self._failover(f"{what} at {self.env.now} ms")

    def _cancel(self, at_ms: float) -> Generator[Any, Any, None]:
        yield self.env.timeout(at_ms)
        if not self.done.triggered:
            self.cancelled = True
            self.timeline.append({"t": self.env.now, "event": "cancel"})
            self.done.succeed()

    def _extra_latency(self) -> float:
        """A network delay spike's latency on top of every channel's (SIM-7)."""
        return self.extra_latency

    def _window(self, fault: Any, attribute: str, during: Any, after: Any) -> Generator[Any, Any, None]:
        """Hold `attribute` at `during` from `at_ms` for `duration_ms`, then set it to `after`."""
        yield self.env.timeout(fault.at_ms)
        self.timeline.append({"t": self.env.now, "event": fault.kind})
        setattr(self, attribute, during)
        yield self.env.timeout(fault.duration_ms)
        setattr(self, attribute, after)

    def _schedule_faults(self) -> None:
        for fault in self.spec.faults:
            if fault.kind == "task-crash" and fault.phase:
                continue  # armed: fires in its phase (crash_in_phase)
            if fault.kind == "cancel":
                self.env.process(self._cancel(fault.at_ms))
            elif fault.kind == "task-crash":
                self.env.process(self._task_crash(fault.at_ms, f"task {fault.task} crashed"))
            elif fault.kind == "worker-loss":
                self.env.process(self._task_crash(fault.at_ms, f"worker with {', '.join(fault.tasks)} lost"))
            elif fault.kind == "storage-outage":
                self.env.process(self._window(fault, "storage_down", True, False))
            elif fault.kind == "storage-slowdown":
                self.env.process(self._window(fault, "bandwidth_factor", 1 / fault.factor, 1.0))
            elif fault.kind == "network-spike":
                self.env.process(self._window(fault, "extra_latency", fault.extra_ms, 0.0))
            elif fault.kind in ("savepoint", "stop-with-savepoint"):
                self.env.process(self._savepoint(fault))

    def _check_shared_files(self) -> None:
        """Every shared file a retained checkpoint references exists (CKP-2)."""
        for completed in self.coordinator.store.retained:
            for path in shared_files(completed.metadata):
                fs, local = fsspec.core.url_to_fs(path)
                if not fs.exists(local):
                    self.violations.append(f"checkpoint {completed.metadata.checkpoint_id} references deleted {path}")

    # -- running -------------------------------------------------------------------------------------------------------
    def run(self, progress: Callable[[float], None] = lambda now: None) -> dict[str, Any]:
        self._schedule_faults()
        self._start_tasks()
        self.env.process(self._ticker(progress))
        self.env.run(until=self.env.any_of([self.done, self.env.timeout(self.spec.max_time_ms)]))
        progress(self.env.now)
        for task in self._tasks():
            task.dispose()
        self._discard_unacknowledged()
        self.coordinator.halt()
        return self.report()

    def _discard_unacknowledged(self) -> None:
        """The attempt ended with uploads whose acknowledgement had not reached the coordinator: their tasks are
        cancelled, and a cancelled asynchronous part deletes the shared files it wrote first (KB-SNAP-6, Flink's
        AsyncCheckpointRunnable), unless an acknowledgement the coordinator received references them (the registry
        holds every file of a retained checkpoint too). Only files in the job's shared directory are its uploads: a
        snapshot the job started from is never touched."""
        keep = self.coordinator.store.registry.registered()
        for key in list(self._unacknowledged):
            for path in sorted(self._unacknowledged.pop(key) - keep):
                if is_within(path, self.access.shared_dir):
                    remove_file(path)

    @property
    def status(self) -> JobStatus:
        """How the run ended: cancelled, failed (restarts exhausted), finished (input done or stopped with a
        savepoint), or suspended (the simulation's time limit)."""
        if self.cancelled:
            return JobStatus.CANCELED
        if self.failed:
            return JobStatus.FAILED
        return JobStatus.FINISHED if self.done.triggered else JobStatus.SUSPENDED

    def end_job(self) -> list[str]:
        """Apply `execution.checkpointing.externalized-checkpoint-retention` to the ended run (COORD-11): call it
        once the run's results are read; returns the checkpoints it discarded."""
        self.discarded_at_end = self.coordinator.end_job(self.status)
        return self.discarded_at_end

    def _window_checks(self) -> WindowCheck:
        """A window job's committed output against the windows of its whole input (a run from a savepoint or a
        stop-with-savepoint is checked by the scenario, over all its runs)."""
        records = [(self.aggregate.key(r.key, r.source), r.offset) for split in self.inputs for r in split]
        expected = expected_windows(records, self.spec.window_ms, self.aggregate.weight)
        return check_windows(expected, self.committed)

    def _check_output(self) -> CheckResult:
        """Per key: every record between the start and end offsets committed once, in order, with its total."""
        index = self.keyspace.column("aggregate_index")
        expected_keys, expected_offsets = [], []
        for s, ids in enumerate(self.input_ids):
            start, end = self.start_offsets.get(s, 0), self.end_offsets.get(s, len(ids))
            expected_keys.append(index[ids[start:end]])
            expected_offsets.append(np.arange(start, max(start, end), dtype=np.int64))
        return check_output_columns(
            np.concatenate([np.zeros(0, dtype=np.int64), *expected_keys]),
            np.concatenate([np.zeros(0, dtype=np.int64), *expected_offsets]),
            output_columns(self.sink, self.keyspace),
            self._input_totals(self.start_offsets),
            self.aggregate.weights,
        )

    def _check_cuts(self) -> None:
        """Every retained checkpoint and every savepoint is a consistent cut, as is every checkpoint a failover
        restored from (`_failover`); savepoints are always aligned, at-least-once checkpoints are not cuts. Window
        state is checked through the window results instead."""
        if self._checkpoints_are_cuts():
            for completed in self.coordinator.store.retained:
                self._check_cut(completed.pointer, completed.metadata)
        if not self.spec.window_ms:
            for pointer in self.savepoint_pointers:
                self._check_cut(pointer, load_checkpoint_metadata(pointer))

    def _checkpoints_are_cuts(self) -> bool:
        return not self.spec.window_ms and self.spec.checkpointing.mode is not CheckpointingMode.AT_LEAST_ONCE

    def _check_cut(self, pointer: str, metadata: CheckpointMetadata) -> None:
        """One snapshot's consistent-cut check (SIM-9), once per snapshot."""
        if pointer in self._checked_cuts:
            return
        self._checked_cuts.add(pointer)
        self.violations += cut_violations(
            metadata, self.backend, self.keys, self.input_weights, self.keyed_stages, self._original_key, self.aggregate
        )

    def _original_key(self, stage: str, key: Any) -> Any:
        if stage == "counter" and self.spec.stages == 3:
            return self.aggregate.key_type.first_stage(key)
        return key

    def _recovery_times(self) -> list[float]:
        """Per failover: time until the first checkpoint completed after it (the job is back to steady state)."""
        times = []
        for failover in self.failovers:
            after = [e["t"] for e in self.timeline if e["event"] == "complete" and e["t"] > failover["at_ms"]]
            if after:
                times.append(round(after[0] - failover["at_ms"], 3))
        return times

    def _leaked_shared_files(self) -> int:
        """Shared files no retained checkpoint references, that the coordinator will not delete (it never heard of
        them) and that no dead process left (CKP-2: none may leak); each is a violation."""
        referenced = self.coordinator.store.shared_files()
        fs, shared = fsspec.core.url_to_fs(self.access.shared_dir)
        present = {fs.unstrip_protocol(p) for p in fs.find(shared)} if fs.exists(shared) else set()
        leaked = sorted(present - referenced - self.coordinator.store.registry.registered() - self.orphaned_files)
        if leaked:
            self.violations.append(f"{len(leaked)} shared files leaked, no checkpoint references them: {leaked[:3]}")
        return len(leaked)

    def _ticker(self, progress: Callable[[float], None]) -> Generator[Any, Any, None]:
        while True:
            yield self.env.timeout(max(1.0, self.spec.max_time_ms / 500))
            progress(self.env.now)

    def report(self) -> dict[str, Any]:
        checks: CheckResult | WindowCheck = self._window_checks() if self.spec.window_ms else self._check_output()
        self._check_cuts()
        timeout = self.spec.checkpointing.timeout_ms
        late = [
            c
            for c, t in self.triggered_at.items()
            if self.ended_at.get(c, self.env.now) - t > timeout + 1e-6 and self.env.now - t > timeout
        ]
        leaked = self._leaked_shared_files()
        completed = sorted(e["checkpoint"] for e in self.timeline if e["event"] == "complete")
        sim_seconds = max(self.last_processed_at, 1e-9) / 1000  # not the wait for the final commit
        return {
            "seed": self.seed,
            "mode": self.spec.checkpointing.mode.value,
            "backend": self.spec.backend,
            "sources": self.spec.sources,
            "parallelism": self.spec.parallelism,
            "records": sum(len(ids) for ids in self.input_ids),
            "terminated": self.done.triggered and not self.failed and not self.cancelled,
            "job_failed": self.failed,
            "sim_time_ms": round(self.env.now, 3),
            "completed_checkpoints": completed,
            "savepoints": self.savepoints,
            "stopped_with_savepoint": self.stopped_with_savepoint is not None,
            "cancelled": self.cancelled,
            "restored": self.initial is not None,
            "failovers": self.failovers,
            "checks": {
                **checks.to_dict(),
                "max_pending_checkpoints": self.max_pending,
                "concurrency_bound_held": self.max_pending <= self.spec.checkpointing.max_concurrent,
                "checkpoints_past_timeout": late,
                "leaked_shared_files": leaked,
                "orphaned_shared_files": len(self.orphaned_files),
                "violations": self.violations,
            },
            "metrics": {
                "checkpoint_duration_ms": percentiles(self.durations),
                "alignment_ms": percentiles(self.alignment_ms),
                "start_delay_ms": percentiles(self.start_delays),
                "recovery_ms": self._recovery_times(),
                "checkpointed_bytes": [self.state_bytes.get(c, 0) for c in completed],
                "uploaded_bytes": [self.uploaded_bytes.get(c, 0) for c in completed],
                **({"materialized_bytes": self.materialized_bytes} if self.spec.changelog else {}),
                "persisted_in_flight_bytes": self.in_flight_bytes,
                "persisted_output_records": self.persisted_output_records,
                "switched_to_unaligned": self.switched_to_unaligned,
                "records_processed": self.processed,
                "messages_delivered": self.messages + self._delivered(),
                "throughput_records_per_s": round(self.processed / sim_seconds, 3),
            },
            "task_spans": self.spans,
            "records_per_10ms": {task: dict(sorted(b.items())) for task, b in sorted(self.records_per_bucket.items())},
            "timeline": [{k: round(v, 3) if isinstance(v, float) else v for k, v in e.items()} for e in self.timeline],
        }


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "count": 0}
    if len(values) == 1:
        return {"p50": round(values[0], 3), "p90": round(values[0], 3), "p99": round(values[0], 3), "count": 1}
    q = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": round(q[49], 3), "p90": round(q[89], 3), "p99": round(q[98], 3), "count": len(values)}
