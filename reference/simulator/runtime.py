"""A simulation run: the job's tasks on simpy, the real coordinator and backends, faults, failover, and a report.

Deterministic for a seed: all randomness comes from one `random.Random(seed)`, time is simpy's, and nothing from
the host (paths, clocks, ids) enters the report.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import simpy

from statecert.reference.coordinator.coordinator import CheckpointCoordinator, CoordinatorCrash, JobVertex, TaskId
from statecert.reference.coordinator.failures import FailureReason
from statecert.reference.coordinator.recovery import recover_from_storage
from statecert.reference.loader import load_state_backend
from statecert.reference.rescale import keyed_handles_for_subtask
from statecert.reference.serializers import StringSerializer
from statecert.reference.simulator.checkers import check_outputs
from statecert.reference.simulator.job_spec import JobSpec
from statecert.reference.simulator.network import Channel
from statecert.reference.simulator.scheduler import SimpyScheduler
from statecert.reference.simulator.tasks import CounterTask, Record, SourceTask
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.keygroups import assign_to_key_group, key_group_range_for_operator, operator_index_for_key_group
from statecert.spec.metadata import CheckpointKind, OperatorSubtaskState


class Simulation:
    def __init__(self, spec: JobSpec, seed: int, workdir: Path) -> None:
        self.spec, self.seed = spec, seed
        self.env = simpy.Environment()
        self.rng = random.Random(seed)
        self.keys = StringSerializer()
        self.inputs = [
            [Record(f"s{s}-k{self.rng.randrange(spec.keys_per_source)}", s, o) for o in range(spec.records_per_source)]
            for s in range(spec.sources)
        ]
        self.storage = FileSystemCheckpointStorage(str(workdir / "checkpoints"), savepoint_dir=str(workdir / "sp"))
        self.access = self.storage.create_checkpoint_storage("sim")
        self.backend = load_state_backend(
            job_config={"state.backend.type": spec.backend, "state.backend.rocksdb.localdir": str(workdir / "local")}
        )
        self.vertices = [
            JobVertex("source", spec.sources, spec.max_parallelism),
            JobVertex("counter", spec.parallelism, spec.max_parallelism),
        ]
        self.scheduler = SimpyScheduler(self.env)
        self.coordinator = self._coordinator(None, 1)
        self.attempt = 0
        self.sources: list[SourceTask] = []
        self.counters: list[CounterTask] = []
        self.committed: list[tuple[str, int, int]] = []
        self.timeline: list[dict[str, Any]] = []
        self.triggered_at: dict[int, float] = {}
        self.durations: list[float] = []
        self.alignment_ms: list[float] = []
        self.state_bytes: dict[int, int] = {}
        self.in_flight_bytes = 0
        self.processed = 0
        self.finished: dict[int, set[int]] = {}
        self.failovers: list[dict[str, Any]] = []
        self.done = self.env.event()

    # -- wiring ------------------------------------------------------------------------------------------------------
    def _coordinator(self, store: Any, next_id: int) -> CheckpointCoordinator:
        coordinator = CheckpointCoordinator(
            "sim", self.vertices, self.access, self.spec.checkpointing, self.scheduler, self, store, next_id
        )
        for fault in self.spec.faults:
            if fault.kind == "coordinator-crash-before-metadata":
                coordinator.before_metadata_write = self._crash_hook(fault.checkpoint)
        return coordinator

    def _crash_hook(self, at_checkpoint: int) -> Callable[[int], None]:
        def hook(checkpoint_id: int) -> None:
            if checkpoint_id == at_checkpoint:
                raise CoordinatorCrash(f"coordinator crashed before writing checkpoint {checkpoint_id}")

        return hook

    def owner(self, key: str) -> int:
        key_group = assign_to_key_group(self.keys.key_hash(key), self.spec.max_parallelism)
        return operator_index_for_key_group(self.spec.max_parallelism, self.spec.parallelism, key_group)

    def location(self, checkpoint_id: int) -> Any:
        pending = self.coordinator.pending.get(checkpoint_id)
        return None if pending is None else pending.location

    def _start_tasks(self) -> None:
        latest = self.coordinator.latest_completed()
        operators = {op.operator_id: op for op in latest.metadata.operators} if latest else {}
        source_op, counter_op = operators.get("source"), operators.get("counter")

        def operator_handles(op: Any, i: int) -> tuple[Any, ...]:
            return op.subtask_states[i].managed_operator_state if op and i in op.subtask_states else ()

        self.sources = [
            SourceTask(self, s, self.attempt, operator_handles(source_op, s)) for s in range(self.spec.sources)
        ]
        self.counters = [
            CounterTask(
                self,
                p,
                self.attempt,
                keyed_handles_for_subtask(counter_op, self.spec.parallelism, p) if counter_op else (),
                operator_handles(counter_op, p),
                key_group_range_for_operator(self.spec.max_parallelism, self.spec.parallelism, p),
            )
            for p in range(self.spec.parallelism)
        ]
        for counter in self.counters:
            counter.inputs = [
                Channel(
                    self.env,
                    counter.inbox,
                    s,
                    self.spec.buffer_records,
                    self.spec.latency_ms,
                    self.spec.latency_jitter_ms,
                    self.rng,
                )
                for s in range(self.spec.sources)
            ]
        for source in self.sources:
            source.outputs = [counter.inputs[source.index] for counter in self.counters]
        for task in self._tasks():
            self.env.process(task.run())
        self.coordinator.start_periodic()

    def _tasks(self) -> list[SourceTask | CounterTask]:
        return [*self.sources, *self.counters]

    # -- coordinator listener ------------------------------------------------------------------------------------------
    def trigger(self, checkpoint_id: int, timestamp_ms: int, options: Any) -> None:
        self.triggered_at[checkpoint_id] = self.env.now
        self.timeline.append({"t": self.env.now, "event": "trigger", "checkpoint": checkpoint_id})
        for source in self.sources:
            source.request_barrier(checkpoint_id, options)

    def notify_complete(self, checkpoint_id: int, kind: CheckpointKind) -> None:
        self.durations.append(self.env.now - self.triggered_at.get(checkpoint_id, self.env.now))
        self.timeline.append({"t": self.env.now, "event": "complete", "checkpoint": checkpoint_id})
        for counter in self.counters:
            self.committed.extend(counter.commit(checkpoint_id))
        if len(self.finished.get(checkpoint_id, ())) == self.spec.sources and not self.done.triggered:
            self.done.succeed()

    def notify_aborted(self, checkpoint_id: int, reason: FailureReason) -> None:
        self.timeline.append({"t": self.env.now, "event": "abort", "checkpoint": checkpoint_id, "reason": reason.value})

    def failover(self, reason: str) -> None:
        self._failover(reason)

    # -- acknowledgements after the asynchronous part's simulated duration -------------------------------------------
    def ack_later(
        self, attempt: int, checkpoint_id: int, task: TaskId, state: OperatorSubtaskState, finished: bool = False
    ) -> None:
        if finished:
            self.finished.setdefault(checkpoint_id, set()).add(task[1])
        self.state_bytes[checkpoint_id] = self.state_bytes.get(checkpoint_id, 0) + state.state_size
        delay = state.state_size / self.spec.bandwidth_bytes_per_ms
        self.env.process(self._ack(attempt, checkpoint_id, task, state, delay))

    def _ack(
        self, attempt: int, checkpoint_id: int, task: TaskId, state: OperatorSubtaskState, delay: float
    ) -> Generator[Any, Any, None]:
        yield self.env.timeout(delay)
        if attempt != self.attempt:
            return
        try:
            self.coordinator.acknowledge(checkpoint_id, task, state)
        except CoordinatorCrash as crash:
            self._coordinator_crash(str(crash))

    # -- faults and recovery -----------------------------------------------------------------------------------------
    def _coordinator_crash(self, reason: str) -> None:
        self.timeline.append({"t": self.env.now, "event": "coordinator-crash"})
        self.coordinator.halt()
        recovered = recover_from_storage(self.access.job_dir, self.spec.checkpointing.retained)
        self.coordinator = self._coordinator(recovered.store, recovered.next_checkpoint_id)
        self.coordinator.before_metadata_write = None  # the injected crash happens once
        self._failover(reason)

    def _failover(self, reason: str) -> None:
        latest = self.coordinator.latest_completed()
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
        self.sources, self.counters = [], []
        self.env.process(self._restart())

    def _restart(self) -> Generator[Any, Any, None]:
        yield self.env.timeout(self.spec.restart_delay_ms)
        self._start_tasks()

    def _task_crash(self, at_ms: float, task: str) -> Generator[Any, Any, None]:
        yield self.env.timeout(at_ms)
        self._failover(f"task {task} crashed at {at_ms} ms")

    # -- running -------------------------------------------------------------------------------------------------------
    def run(self, progress: Callable[[float], None] = lambda now: None) -> dict[str, Any]:
        for fault in self.spec.faults:
            if fault.kind == "task-crash":
                self.env.process(self._task_crash(fault.at_ms, fault.task))
        self._start_tasks()
        self.env.process(self._ticker(progress))
        self.env.run(until=self.env.any_of([self.done, self.env.timeout(self.spec.max_time_ms)]))
        progress(self.env.now)
        for task in self._tasks():
            task.dispose()
        self.coordinator.halt()
        return self.report()

    def _ticker(self, progress: Callable[[float], None]) -> Generator[Any, Any, None]:
        while True:
            yield self.env.timeout(max(1.0, self.spec.max_time_ms / 500))
            progress(self.env.now)

    def report(self) -> dict[str, Any]:
        expected: dict[str, list[int]] = {}
        for records in self.inputs:
            for r in records:
                expected.setdefault(r.key, []).append(r.offset)
        checks = check_outputs(expected, self.committed)
        completed = sorted(e["checkpoint"] for e in self.timeline if e["event"] == "complete")
        sim_seconds = max(self.env.now, 1e-9) / 1000
        return {
            "seed": self.seed,
            "mode": self.spec.checkpointing.mode.value,
            "backend": self.spec.backend,
            "sources": self.spec.sources,
            "parallelism": self.spec.parallelism,
            "records": sum(len(r) for r in self.inputs),
            "terminated": self.done.triggered,
            "sim_time_ms": round(self.env.now, 3),
            "completed_checkpoints": completed,
            "failovers": self.failovers,
            "checks": checks.to_dict(),
            "metrics": {
                "checkpoint_duration_ms": percentiles(self.durations),
                "alignment_ms": percentiles(self.alignment_ms),
                "checkpointed_bytes": [self.state_bytes.get(c, 0) for c in completed],
                "persisted_in_flight_bytes": self.in_flight_bytes,
                "records_processed": self.processed,
                "throughput_records_per_s": round(self.processed / sim_seconds, 3),
            },
            "timeline": [{k: round(v, 3) if isinstance(v, float) else v for k, v in e.items()} for e in self.timeline],
        }


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "count": 0}
    if len(values) == 1:
        return {"p50": round(values[0], 3), "p90": round(values[0], 3), "p99": round(values[0], 3), "count": 1}
    q = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": round(q[49], 3), "p90": round(q[89], 3), "p99": round(q[98], 3), "count": len(values)}
