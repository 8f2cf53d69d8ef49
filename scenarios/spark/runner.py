"""Running a scenario on PySpark: the job runs in epochs between checkpoints, each epoch one Spark job (read the
epoch's records from the input's Parquet files as a DataFrame, partition them by owning subtask with
`repartitionById`, and process and snapshot each subtask's Arrow batches with `mapInArrow`). The driver runs the
checkpoint coordinator: it triggers the epoch's checkpoint or savepoint, takes the acknowledgements, writes
`_metadata`, and commits the staged sink output when the checkpoint completes.

An epoch whose checkpoint fails (declined, or the coordinator died before `_metadata`) is rolled back: the job
goes on from the latest completed checkpoint, as after a failover. A task that fails inside an epoch is retried by
Spark and restores from checkpoint storage."""

from __future__ import annotations

import contextlib
import itertools
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec

from statecert.reference import config as cfg
from statecert.reference.config import catalog
from statecert.reference.coordinator.coordinator import CheckpointCoordinator, CoordinatorCrash, JobVertex
from statecert.reference.coordinator.failures import FailureReason
from statecert.reference.coordinator.recovery import recover_from_storage
from statecert.reference.coordinator.scheduler import ManualScheduler
from statecert.reference.coordinator.settings import JobStatus
from statecert.reference.loader import load_state_backend
from statecert.reference.simulator.cuts import source_offsets
from statecert.reference.simulator.tasks import OFFSET
from statecert.reference.storage.faulty_fs import faulty_url
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.jobmanager import JobManagerCheckpointStorage
from statecert.reference.storage.literal_paths import remove_tree
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.reference.union_markers import UnionRestore
from statecert.scenarios.loader import scenario_restart, scenario_settings
from statecert.scenarios.model import Action, Event, Scenario
from statecert.scenarios.plan import RunSettings, backend_config, expected_error, resume_pointer, run_settings
from statecert.scenarios.results import RunResult, ScenarioResult, aggregate_of, evaluate
from statecert.scenarios.spark import input_table, worker
from statecert.scenarios.spark.job_failure import SparkJobFailed, is_spark_failure, job_failed, retried
from statecert.scenarios.spark.oracle import OracleCheck
from statecert.scenarios.spark.staged_output import Row, StagedOutput
from statecert.scenarios.spark.worker import EpochTask, InputSpec, TaskFault
from statecert.spec import errors
from statecert.spec.errors import StateCertError
from statecert.spec.metadata import CheckpointKind, OperatorSubtaskState
from statecert.spec.operator_backend import OperatorBackendParameters


@dataclass
class _Position:
    """Where the job's state is: a completed snapshot (id, pointer) and the source offsets it covers."""

    checkpoint_id: int | None
    pointer: str | None
    offsets: dict[int, int]


@dataclass
class _Run:
    scenario: Scenario
    plan: RunSettings
    index: int
    workdir: Path
    spark: Any
    restore_from: str | None
    input_url: str = ""  # the input's Parquet files (`input_table`)
    key_names: Any = None  # a Spark broadcast of the input's key names, in order of id
    storage_root: str | None = None  # checkpoint storage (an fsspec URL); default: `workdir` on this machine
    mini_batch: bool = False  # running totals folded per key per epoch (one state read and write per key)
    job_id: str = field(default_factory=lambda: f"job-{uuid.uuid4().hex[:8]}")
    staged: dict[int, list[StagedOutput]] = field(default_factory=dict)
    committed: list[StagedOutput] = field(default_factory=list)  # as the workers sent it: rows made when checked
    completed: list[int] = field(default_factory=list)
    failovers: int = 0
    union_restores: list[UnionRestore] = field(default_factory=list)  # the subtasks' restores of union state (OS-2)
    restarts: int = 0  # job failovers (every subtask restores from checkpoint storage), not Spark task retries
    failover_requested: bool = False
    job_failed: bool = False
    stopped: str | None = None
    savepoints: list[str] = field(default_factory=list)
    last_committed: _Position | None = None
    pending_stop: bool = False  # the epoch's snapshot is a stop-with-savepoint
    cancelled: bool = False

    def __post_init__(self) -> None:
        scenario, plan = self.scenario, self.plan
        self.config = backend_config(
            plan.backend,
            self.workdir,
            scenario.checkpointing.incremental,
            plan.changelog,
            scenario.checkpointing.materialize_interval_ms,
            scenario.config,
        )
        self.backend = load_state_backend(job_config=self.config)
        self.restart = scenario_restart(scenario)
        self.restart_rng = random.Random(scenario.input.seed ^ 0x5EED)
        root = faulty_url(self.storage_root or str(self.workdir.resolve()))
        if scenario.job.storage == "jobmanager":
            storage: Any = JobManagerCheckpointStorage(checkpoint_dir=f"{root}/checkpoints", savepoint_dir=f"{root}/sp")
        else:
            storage = FileSystemCheckpointStorage(f"{root}/checkpoints", savepoint_dir=f"{root}/sp")
        self.access = storage.create_checkpoint_storage(self.job_id)
        self.task_access = storage.create_checkpoint_storage(self.job_id)  # the tasks' own view (CS-13)
        self.vertices = [
            JobVertex("source", scenario.job.sources, scenario.job.max_parallelism),
            JobVertex(worker.OPERATOR, plan.parallelism, scenario.job.max_parallelism),
        ]
        self.scheduler = ManualScheduler()
        self.splits = input_table.scan(self.spark, self.input_url, scenario.job.sources)
        self.markers = subtask_markers(self.spark, plan.parallelism)
        initial = load_checkpoint_metadata(self.restore_from) if self.restore_from else None
        start = source_offsets(initial, self.backend) if initial else {}
        self.start = {s: start.get(s, 0) for s in range(scenario.job.sources)}
        self.initial = _Position(initial.checkpoint_id if initial else None, self.restore_from, dict(self.start))
        self.position = self.initial  # the state the next epoch starts from
        self.coordinator = self._new_coordinator(None, 1)  # a restore below goes on from the snapshot's id
        self.initial_metadata = initial
        self.claim = cfg.read(dict(scenario.config), catalog.STATE_RECOVERY_CLAIM_MODE) == "CLAIM"
        if initial is not None and self.restore_from is not None:
            self.coordinator.restore_from(self.restore_from, initial, claim=self.claim)

    # -- the coordinator's listener -------------------------------------------------------------------------------
    def trigger(self, checkpoint_id: int, timestamp_ms: int, options: Any) -> None:
        """The epoch's Spark job carries the barrier: nothing to send here."""

    def notify_complete(self, checkpoint_id: int, kind: CheckpointKind) -> None:
        self.completed.append(checkpoint_id)
        if kind.is_savepoint:
            self.savepoints.append(str(self.coordinator.last_savepoint))
            if not self.pending_stop:
                return  # an intermediate savepoint has no side effects: committed with the next checkpoint
        for n in sorted(c for c in self.staged if c <= checkpoint_id):
            self.committed.extend(self.staged.pop(n))

    def notify_aborted(self, checkpoint_id: int, reason: FailureReason) -> None:
        self.staged.pop(checkpoint_id, None)

    def failover(self, reason: str) -> None:
        self.failover_requested = True

    # -- running ------------------------------------------------------------------------------------------------------
    def _new_coordinator(self, store: Any, next_id: int) -> CheckpointCoordinator:
        settings = scenario_settings(self.scenario)
        return CheckpointCoordinator(
            self.job_id, self.vertices, self.access, settings, self.scheduler, self, store, next_id
        )

    def _recovery_point(self) -> _Position:
        latest = self.coordinator.latest_completed()
        if latest is None:
            return self.initial
        return _Position(latest.metadata.checkpoint_id, latest.pointer, source_offsets(latest.metadata, self.backend))

    def _fail_over(self) -> None:
        self.failovers += 1
        self.restarts += 1
        self.failover_requested = False
        self.coordinator.abort_all(FailureReason.TASK_FAILED)
        self.staged.clear()
        self.position = self._recovery_point()
        delay = self.restart.on_failure(self.scheduler.now_ms(), self.restart_rng)
        if delay is None:
            self.job_failed = True
        else:
            self.scheduler.advance(int(delay))  # the restart strategy's delay passes on the epoch clock

    def committed_rows(self) -> list[Row]:
        """The committed sink output, row by row in commit order."""
        return [row for output in self.committed for row in output.rows()]

    def end_job(self) -> list[str]:
        """Retention for the ended run (COORD-11): its checkpoints go unless the setting keeps them."""
        if self.job_failed:
            status = JobStatus.FAILED
        elif self.cancelled:
            status = JobStatus.CANCELED
        else:
            status = JobStatus.FINISHED
        return self.coordinator.end_job(status)

    def execute(self, progress: Callable[[str], None]) -> None:
        scenario = self.scenario
        total = scenario.input.records_per_source
        per_epoch = scenario.checkpointing.records_per_epoch
        fired: set[int] = set()
        storage_failures = 0
        events = list(enumerate(scenario.runs[self.index].events))
        for epoch in itertools.count(1):
            offsets = self.position.offsets
            if self.job_failed or self.stopped or all(offsets[s] >= total for s in offsets):
                return
            now = [(i, e) for i, e in events if e.epoch <= epoch and i not in fired]
            if any(e.action is Action.CANCEL for _, e in now):
                self.cancelled = True
                return
            ranges = {s: (offsets[s], min(total, offsets[s] + per_epoch)) for s in offsets}
            savepoint = next((e for _, e in now if e.action in (Action.SAVEPOINT, Action.STOP_WITH_SAVEPOINT)), None)
            faults: list[TaskFault] = []
            for i, e in now:
                if e.action is Action.TASK_FAILURE:
                    faults.append(TaskFault(e.task, "exception", e.phase.value))
                elif e.action is Action.WORKER_KILL:
                    faults.append(TaskFault(e.task, "kill"))
                elif e.action is Action.STORAGE_WRITE_FAILURE:
                    storage_failures += e.count
                elif e.action is Action.COORDINATOR_CRASH:
                    self.coordinator.before_metadata_write = _crash
                if e.action not in (Action.SAVEPOINT, Action.STOP_WITH_SAVEPOINT) or e is savepoint:
                    fired.add(i)  # one savepoint per epoch; a second one waits for the next epoch
            failing = storage_failures > 0
            storage_failures = max(0, storage_failures - 1)
            progress(f"run {self.index + 1}, epoch {epoch}: records {ranges}")
            self._epoch(ranges, savepoint, tuple(faults), failing)
            self.coordinator.before_metadata_write = None
            self.scheduler.advance(scenario.checkpointing.interval_ms)

    def _epoch(
        self, ranges: dict[int, tuple[int, int]], savepoint: Event | None, faults: tuple[TaskFault, ...], failing: bool
    ) -> None:
        coordinator = self.coordinator
        if savepoint is not None:
            checkpoint_id = coordinator.trigger_savepoint(
                stop=savepoint.action is Action.STOP_WITH_SAVEPOINT, native=savepoint.format == "native"
            )
            self.pending_stop = savepoint.action is Action.STOP_WITH_SAVEPOINT
        else:
            triggered = coordinator.trigger_checkpoint()
            if triggered.checkpoint_id is None:
                raise RuntimeError(f"checkpoint not triggered: {triggered.declined}")
            checkpoint_id = triggered.checkpoint_id
        pending = coordinator.pending[checkpoint_id]
        task = EpochTask(
            job_id=self.job_id,
            checkpoint_id=checkpoint_id,
            storage_access=self.task_access,
            options=pending.options,
            restore_pointer=self.position.pointer,
            restore_id=self.position.checkpoint_id,
            backend_config=self.config,
            parallelism=self.plan.parallelism,
            max_parallelism=self.scenario.job.max_parallelism,
            aggregate=aggregate_of(self.scenario, self.plan.serializer_version),
            inputs=InputSpec(
                self.scenario.input.seed,
                self.scenario.job.sources,
                self.scenario.input.keys_per_source,
                self.scenario.input.records_per_source,
                self.scenario.input.key_skew,
            ),
            ranges=ranges,
            faults=faults,
            failing_writes=f"{_local(self.access.job_dir)}/*" if failing else None,
            timestamp_ms=self.scheduler.now_ms(),
            window_ms=self.scenario.job.window_ms,
            mini_batch=self.mini_batch,
            key_names=self.key_names,
            restarts=self.restarts,
            union_state=self.scenario.job.union_state,
        )
        try:
            results = run_epoch_job(task, self.splits, self.markers)
        except SparkJobFailed:
            self._fail_over()
            return
        for result in results:
            if result[0] == "error":
                error_type = getattr(errors, result[1], None)
                if isinstance(error_type, type) and issubclass(error_type, StateCertError):
                    raise error_type(result[2])
                raise StateCertError(f"{result[1]}: {result[2]}")
        if any(r[0] == "ack" and r[4] > 0 for r in results):
            self.failovers += 1  # a task failed and Spark's retry restored it from the checkpoint
        declined = [r for r in results if r[0] == "decline"]
        if declined:
            coordinator.decline(checkpoint_id, (worker.OPERATOR, declined[0][1]), FailureReason.IO_ERROR)
            self._roll_back()
            return
        acks = sorted((r for r in results if r[0] == "ack"), key=lambda r: r[1])
        self.union_restores += [r[5] for r in acks if r[5] is not None]
        self.staged[checkpoint_id] = [r[3] for r in acks]
        try:
            with worker.failing_writes(task.failing_writes):  # the outage reaches the driver's writes too
                for s, (_, end) in ranges.items():
                    state = self._source_state(checkpoint_id, pending, s, end)
                    coordinator.acknowledge(checkpoint_id, ("source", s), state)
                for r in acks:
                    coordinator.acknowledge(checkpoint_id, (worker.OPERATOR, r[1]), r[2])
        except CoordinatorCrash:
            self._coordinator_crash()
            return
        if checkpoint_id not in self.completed:  # `_metadata` could not be written: the checkpoint failed
            self._roll_back()
            return
        latest = coordinator.latest_completed()
        pointer = coordinator.last_savepoint if pending.is_savepoint else latest.pointer if latest else None
        if pointer is not None:
            self.position = _Position(checkpoint_id, pointer, {s: end for s, (_, end) in ranges.items()})
            if not pending.is_savepoint or self.pending_stop:
                self.last_committed = self.position
            if self.pending_stop:
                self.stopped = pointer
        self.pending_stop = False

    def _roll_back(self) -> None:
        """The epoch's checkpoint failed: past the tolerable count the job fails over, else the epoch is rolled
        back to the latest completed checkpoint and runs again."""
        self.pending_stop = False
        if self.failover_requested:
            self._fail_over()
        else:
            self.position = self._recovery_point()
            self.staged.clear()

    def _source_state(self, checkpoint_id: int, pending: Any, source: int, offset: int) -> OperatorSubtaskState:
        """The source split's offset in operator state, snapshotted on the driver (the split enumerator's side)."""
        params = OperatorBackendParameters(self.job_id, "source", ())
        with self.backend.create_operator_state_backend(params) as operator:
            operator.get_list_state(OFFSET).update([offset])
            location = self.task_access.resolve_checkpoint_storage_location(
                checkpoint_id, pending.options.target_location
            )
            handle = operator.snapshot(checkpoint_id, self.scheduler.now_ms(), location, pending.options).run()
        return OperatorSubtaskState((), (handle,) if handle else ())

    def _coordinator_crash(self) -> None:
        """The coordinator died after the acknowledgements, before `_metadata`: a new one recovers the completed
        checkpoints from storage alone, and the job fails over to the latest of them."""
        self.coordinator.halt()
        recovered = recover_from_storage(
            self.access.job_dir, self.scenario.checkpointing.retained, None if self.claim else self.restore_from
        )
        self.coordinator = self._new_coordinator(recovered.store, recovered.next_checkpoint_id)
        self.coordinator.restore_initial(self.restore_from, self.initial_metadata, self.claim)
        self.pending_stop = False
        self._fail_over()


def _crash(checkpoint_id: int) -> None:
    raise CoordinatorCrash(f"coordinator crashed before writing checkpoint {checkpoint_id}")


def _local(url: str) -> str:
    """A URL's path as the fault-injecting file systems match their rules against it."""
    return str(fsspec.core.url_to_fs(url)[1])


def subtask_markers(spark: Any, parallelism: int) -> Any:
    """One row per keyed subtask with no record (`EPOCH_COLUMNS` null): its partition runs with records or without."""
    from pyspark.sql import functions as F

    nothing = [
        F.lit(None).cast(t).alias(c) for c, t in zip(input_table.EPOCH_COLUMNS, ("int", "long", "int"), strict=True)
    ]
    return spark.range(parallelism).select(*nothing, F.col("id").cast("int").alias("subtask"))


def run_epoch_job(task: EpochTask, splits: Any, markers: Any) -> list[tuple[Any, ...]]:
    """One epoch as one Spark job: the epoch's records (of `splits`, the input's Parquet files as a DataFrame) ->
    partitioned by owning subtask, in the JVM -> each subtask's Arrow batches processed in a Python worker. The
    `markers` (`subtask_markers`) make every subtask's partition run, with records or without."""
    records = input_table.read_epoch(splits, task.ranges, task.parallelism, task.max_parallelism)
    try:
        rows = (
            records.unionByName(markers)
            .repartitionById(task.parallelism, "subtask")
            .mapInArrow(lambda batches: worker.subtask_epochs(task, batches), worker.RESULTS_SCHEMA)
            .collect()
        )
    except Exception as exc:  # Py4JJavaError: the job failed after its task retries
        if is_spark_failure(exc):
            raise job_failed(exc, f"epoch of checkpoint {task.checkpoint_id}") from exc
        raise
    return [worker.epoch_result(row.result) for row in rows]


def input_shape(scenario: Scenario) -> input_table.InputShape:
    i, job = scenario.input, scenario.job
    aggregate = aggregate_of(scenario)
    return input_table.InputShape(
        i.seed,
        job.sources,
        i.keys_per_source,
        i.records_per_source,
        i.key_skew,
        scenario.checkpointing.records_per_epoch,
        job.max_parallelism,
        aggregate.key_selector,
        aggregate.key_type.name,
    )


def run_on_spark(
    scenario: Scenario,
    workdir: Path,
    spark: Any,
    backend: str | None = None,
    progress: Callable[[str], None] = lambda message: None,
    oracle: bool = True,
    checkpoint_dir: str | None = None,
    mini_batch: bool = False,
    input_dir: str | None = None,
) -> ScenarioResult:
    """`oracle=False` skips the DataFrame oracle and the state read-back (benchmarks time the job alone); the
    expectations that need them then report what is missing. `checkpoint_dir` (any fsspec URL every executor
    reaches: `s3://...`, `hdfs://...`, a shared `file://` mount) holds all checkpoints and savepoints instead of
    `workdir`, which then only holds RocksDB's local working directories (on each executor's own disk).
    `mini_batch`: the running-total job reads and writes each key's state once per epoch, folding the epoch's
    records in between (Flink's mini-batch aggregation), instead of once per record; window jobs are unaffected."""
    started = time.perf_counter()
    plans = run_settings(scenario, backend)
    result = ScenarioResult(
        scenario.name, "spark", plans[0].backend, [], expected_error=expected_error(scenario, plans)
    )
    restore_from = str(scenario.job.start_from) if scenario.job.start_from else None
    runs: list[_Run] = []
    input_url = input_dir or f"{(checkpoint_dir or str(workdir.resolve())).rstrip('/')}/input"
    key_names: Any = None
    try:
        names = input_table.write_input(input_shape(scenario), aggregate_of(scenario), input_url)
        key_names = spark.sparkContext.broadcast(names)
        for i, plan in enumerate(plans):
            resume = scenario.runs[i].resume
            if resume is not None:
                previous = runs[-1]
                latest = previous.coordinator.latest_completed()
                moved: Path | str = workdir / f"moved-{i + 1}"
                if checkpoint_dir:
                    moved = f"{faulty_url(checkpoint_dir.rstrip('/'))}/moved-{i + 1}"
                restore_from = resume_pointer(resume, previous.savepoints, latest.pointer if latest else None, moved)
            root = f"{checkpoint_dir.rstrip('/')}/run-{i + 1}" if checkpoint_dir else None
            run = _Run(
                scenario, plan, i, workdir / f"run-{i + 1}", spark, restore_from, input_url, key_names, root, mini_batch
            )
            runs.append(run)
            run.execute(progress)
            result.runs.append(_run_result(scenario, run, spark, oracle))
            run.end_job()
            if run.job_failed:
                break
        if oracle and scenario.job.window_ms and result.runs:
            committed = [out for run in runs for out in run.committed_rows()]
            result.runs[-1].oracle_mismatches = retried(
                lambda: OracleCheck(spark, scenario).compare_windows(committed), "the oracle's window comparison"
            )
    except StateCertError as exc:
        result.error, result.error_message = type(exc).__name__, str(exc)
    except Exception as exc:  # a Spark job outside an epoch's failed beyond its retries: one line, not a trace
        if not is_spark_failure(exc):
            raise
        failed = job_failed(exc, "a Spark job outside the epochs")
        result.error, result.error_message = type(failed).__name__, str(failed)
    finally:
        for run in runs:
            _clear_worker_caches(spark, run.job_id)
        if key_names is not None:
            key_names.destroy()
        if input_dir is None:
            with contextlib.suppress(OSError):
                fs, path = fsspec.core.url_to_fs(input_url)
                remove_tree(fs, path)
    result.seconds = time.perf_counter() - started
    for run, run_result in zip(runs, result.runs, strict=False):  # rows for the checks, made after the timing
        run_result.committed = run.committed_rows()
    result.failures = evaluate(scenario, result)
    return result


def _run_result(scenario: Scenario, run: _Run, spark: Any, with_oracle: bool) -> RunResult:
    last = run.last_committed or run.initial
    final_state, mismatches = None, []
    if with_oracle and last.pointer is not None and not scenario.job.window_ms:
        oracle, pointer, offsets = OracleCheck(spark, scenario), last.pointer, last.offsets
        state = retried(
            lambda: oracle.final_state(pointer, run.plan.serializer_version, run.config), f"reading back {pointer}"
        )
        final_state = state
        mismatches = retried(
            lambda: oracle.compare(run.committed_rows(), run.start, offsets, state), "the oracle's comparison"
        )
    return RunResult(
        backend=run.plan.backend,
        parallelism=run.plan.parallelism,
        serializer_version=run.plan.serializer_version,
        start_offsets=dict(run.start),
        end_offsets=dict(last.offsets),
        completed_checkpoints=len(run.completed),
        failovers=run.failovers,
        union_restores=run.union_restores,
        job_failed=run.job_failed,
        final_state=final_state,
        oracle_mismatches=mismatches,
    )


def _clear_worker_caches(spark: Any, job_id: str) -> None:
    """Best effort: dispose cached backends in the workers this job ran on."""
    sc = spark.sparkContext
    with contextlib.suppress(Exception):
        sc.parallelize(range(4), 4).foreach(lambda _: worker.clear_cache(job_id))
