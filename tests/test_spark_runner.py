"""The PySpark runner on local Spark (one session for the whole test session): real task failures and worker
kills retried by Spark, the coordinator on the driver, the DataFrame oracle and the state reader (chapter SCN).
A fast subset of the library runs here; `tox -e scenarios` runs all of it on both runners and backends."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.reference.loader import load_state_backend
from statecert.scenarios.catalog import resolve
from statecert.scenarios.final_state import final_totals
from statecert.scenarios.loader import load_scenario
from statecert.scenarios.plan import backend_config
from statecert.scenarios.results import expected_totals
from statecert.scenarios.sim_runner import run_on_simulator
from statecert.scenarios.spark import worker
from statecert.scenarios.spark.job_failure import SparkJobFailed, retried
from statecert.scenarios.spark.runner import run_on_spark
from statecert.scenarios.spark.state_reader import WrittenBy, keyed_state_rows, read_keyed_state
from statecert.spec.errors import StateCertError
from statecert.spec.keyed_backend import CheckpointOptions


def run(spark: Any, tmp_path: Path, name: str, backend: str) -> Any:
    return run_on_spark(load_scenario(resolve(name)), tmp_path, spark, backend)


@pytest.mark.requirement("SCN-6", "SCN-3", "SCN-4")
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_a_worker_killed_mid_epoch_ends_with_the_oracles_result_exactly_once(
    spark: Any, tmp_path: Path, backend: str
) -> None:
    result = run(spark, tmp_path, "worker-killed", backend)
    assert result.passed, result.failures
    (only,) = result.runs
    assert only.failovers >= 1, "the killed worker's task was never retried"
    assert only.oracle_mismatches == [] and only.final_state == expected_totals(
        load_scenario(resolve("worker-killed")), only.end_offsets
    )
    assert len(only.committed) == 480 and len(set(only.committed)) == 480


@pytest.mark.requirement("SCN-6")
def test_a_task_failing_after_its_upload_is_retried_and_restores_from_the_checkpoint(
    spark: Any, tmp_path: Path
) -> None:
    result = run(spark, tmp_path, "task-failure-upload", "rocksdb")
    assert result.passed and result.runs[0].failovers >= 1, result.failures


@pytest.mark.requirement("SCN-7")
def test_the_coordinator_dropped_before_metadata_recovers_from_storage(spark: Any, tmp_path: Path) -> None:
    result = run(spark, tmp_path, "coordinator-crash", "hashmap")
    assert result.passed and result.runs[0].failovers >= 1, result.failures


@pytest.mark.requirement("SCN-7")
def test_storage_write_failures_beyond_the_tolerable_count_fail_over(spark: Any, tmp_path: Path) -> None:
    result = run(spark, tmp_path, "repeated-failures", "hashmap")
    assert result.passed and result.runs[0].failovers >= 1, result.failures


@pytest.mark.requirement("SCN-5", "SP-3")
def test_a_native_rocksdb_savepoint_into_the_heap_backend_fails_with_the_documented_error(
    spark: Any, tmp_path: Path
) -> None:
    result = run(spark, tmp_path, "native-savepoint-other-backend", "rocksdb")
    assert result.error == "UnsupportedSnapshotError" and result.passed, (result.error, result.failures)


@pytest.mark.requirement("SCN-2", "SCN-3")
def test_stop_with_savepoint_and_rescale_on_spark(spark: Any, tmp_path: Path) -> None:
    result = run(spark, tmp_path, "stop-and-rescale", "rocksdb")
    assert result.passed, result.failures
    assert [r.parallelism for r in result.runs] == [2, 4, 1]


@pytest.mark.requirement("OS-2", "SCN-6")
def test_union_state_reaches_every_subtask_after_a_task_failure_on_spark(spark: Any, tmp_path: Path) -> None:
    """A task retry restores its subtask from checkpoint storage at unchanged parallelism: it reads every old
    subtask's union marker, as every subtask does after the rescaled resume."""
    result = run(spark, tmp_path, "union-state-restart", "hashmap")
    assert result.passed, result.failures
    first, rescaled = result.runs
    assert first.failovers >= 1 and any(r.parallelism == first.parallelism for r in first.union_restores), (
        f"OS-2: expected a restore at unchanged parallelism {first.parallelism}, got {first.union_restores}"
    )
    assert {r.subtask for r in rescaled.union_restores} == {0, 1}, (
        f"OS-2: expected both subtasks of the rescaled run to restore union state, got {rescaled.union_restores}"
    )


@pytest.mark.requirement("SCN-6", "SCN-7")
def test_checkpoint_storage_at_a_url_keeps_nothing_on_the_driver_disk(spark: Any, tmp_path: Path) -> None:
    """`checkpoint_dir` holds every checkpoint and savepoint (here a `file://` URL standing for shared storage),
    storage faults are injected there, and the driver's workdir gets no checkpoint state."""
    scenario = load_scenario(resolve("repeated-failures"))  # storage write failures beyond the tolerable count
    result = run_on_spark(scenario, tmp_path / "work", spark, "rocksdb", checkpoint_dir=f"file://{tmp_path}/shared")
    assert result.passed and result.runs[0].failovers >= 1, result.failures
    # the finished job's checkpoints were discarded there (COORD-11); its directories show where they were
    assert list((tmp_path / "shared" / "run-1" / "checkpoints").iterdir()), "nothing in the checkpoint dir"
    assert not list((tmp_path / "work").rglob("_metadata")), "checkpoint state on the driver's workdir"


@pytest.mark.requirement("KG-1", "SCN-3", "SCN-4")
def test_int_keys_on_spark_match_the_dataframe_oracle_through_failure_and_rescale(spark: Any, tmp_path: Path) -> None:
    """Java Integer keys (half negative) shuffled by `Integer.hashCode` key groups; the committed output and the
    final state, read as a DataFrame, match the DataFrame aggregation."""
    result = run(spark, tmp_path, "int-keys-rescale", "hashmap")
    assert result.passed, result.failures
    assert [r.parallelism for r in result.runs] == [2, 3]
    assert any(isinstance(k, int) and k < 0 for k, _, _ in result.runs[0].committed)


@pytest.mark.requirement("SCN-10", "SCN-6", "TM-6", "TM-7")
@pytest.mark.parametrize("backend", ["rocksdb", "tests.broken_backends:timers_forget_restored"])
def test_windows_on_spark_match_the_dataframe_window_aggregation(spark: Any, tmp_path: Path, backend: str) -> None:
    """Failures between window firings, a stop-with-savepoint holding open windows and a rescaled resume: every
    window is committed once with the sum of `groupBy(key, window(...))`; a backend whose restored timers never
    fire loses windows, and the DataFrame comparison says so too."""
    scenario = load_scenario(resolve("event-time-windows"))
    result = run_on_spark(scenario, tmp_path, spark, backend)
    if backend == "rocksdb":
        assert result.passed, result.failures
        assert [r.parallelism for r in result.runs] == [2, 3] and sum(r.failovers for r in result.runs) >= 2
        return
    assert not result.passed, "a backend that forgets restored timers passed the window scenario on Spark"
    assert any("DataFrame window aggregation" in f for f in result.failures), result.failures


@pytest.mark.requirement("SCN-9", "KB-RESTORE-1")
@pytest.mark.parametrize("backend", ["hashmap", "tests.broken_backends:stale_restore"])
def test_a_backend_keeping_stale_state_after_restore_fails_a_spark_scenario(
    spark: Any, tmp_path: Path, backend: str
) -> None:
    """The job rolls back to its latest completed checkpoint four times while the workers hold newer state and
    new keys keep arriving: keys newer than the checkpoint must not survive the restore. The reference backend
    passes the same scenario."""
    scenario = load_scenario(Path(__file__).parent / "scenarios" / "repeated-rollbacks.toml")
    result = run_on_spark(scenario, tmp_path, spark, backend)
    if backend == "hashmap":
        assert result.passed, result.failures
        return
    assert not result.passed, "a backend that keeps stale state after restore passed"
    assert any("wrong running totals" in f or "final state" in f for f in result.failures), result.failures


@pytest.mark.requirement("SCN-6")
@pytest.mark.parametrize("failover_since", [False, True])
def test_a_cached_backend_is_reused_only_when_no_failover_came_between(tmp_path: Path, failover_since: bool) -> None:
    """A worker process reuses the backend it cached at exactly the checkpoint an epoch restores; after a failover
    the job restarts and every subtask restores from checkpoint storage instead (no local recovery)."""
    task = worker.EpochTask(
        job_id="job-cache",
        checkpoint_id=3,
        storage_access=None,
        options=CheckpointOptions(),
        restore_pointer=None,
        restore_id=2,
        backend_config=backend_config("hashmap", tmp_path, incremental=False),
        parallelism=1,
        max_parallelism=128,
        aggregate=KeyedAggregate(),
        inputs=worker.InputSpec(1, 1, 1, 1, 0.0),
        ranges={},
    )
    cached, _ = worker._restore(task, 0, attempt=0)
    worker._CACHE[(task.job_id, 0)] = worker._Cached(2, 1, task.restarts, cached)
    later = dataclasses.replace(task, restarts=task.restarts + 1) if failover_since else task
    restored, _ = worker._restore(later, 0, attempt=0)  # takes the cache entry, reused or disposed
    try:
        assert (restored is cached) is not failover_since, (
            f"restarts {task.restarts} -> {later.restarts}: expected the cached backend "
            f"{'not ' if failover_since else ''}to be reused"
        )
    finally:
        cached.dispose()
        restored.dispose()


@pytest.mark.requirement("SCN-8")
@pytest.mark.parametrize(
    "backend,incremental",
    [("hashmap", False), ("rocksdb", True), ("tests.incremental_backends:by_key_group", True)],
)
def test_the_state_reader_gives_one_row_per_key_namespace_and_state(
    spark: Any, tmp_path: Path, backend: str, incremental: bool
) -> None:
    """Read a checkpoint (canonical, RocksDB native incremental, or a third-party native format restored by the
    backend that wrote it) as a DataFrame; compare it with the state restored through the backend, an independent
    path."""
    scenario = load_scenario(resolve("incremental-chain" if incremental else "task-failure-processing"))
    simulation_result = run_on_simulator(scenario, tmp_path / "sim", backend, end_jobs=False)
    assert simulation_result.passed
    pointer = next((tmp_path / "sim" / "run-1" / "checkpoints").glob("*/chk-*/_metadata"))
    written_by = WrittenBy({"state.backend.type": backend}, KeyedAggregate().key_type.serializer())
    frame = read_keyed_state(spark, str(pointer), "counter", written_by)
    expected_columns = ("operator", "key_group", "key", "namespace", "state", "value_total")
    assert tuple(frame.columns) == expected_columns, f"SCN-8: read_keyed_state columns: {frame.columns}"
    assert frame.schema["value_total"].dataType.simpleString() == "bigint", "SCN-8: the total is a typed long"
    rows = frame.collect()
    assert {r["operator"] for r in rows} == {"counter"} and {r["state"] for r in rows} == {"count"}
    keys = [r["key"] for r in rows]
    assert len(keys) == len(set(keys)), "one row per key, namespace and state"
    from_reader = {KeyedAggregate().render(r["key"]): r["value_total"] for r in rows}
    restored = final_totals(
        str(pointer), load_state_backend(job_config={"state.backend.type": backend}), KeyedAggregate()
    )
    assert from_reader == restored, f"SCN-8: read_keyed_state gave {from_reader}, the restored backend {restored}"
    plain = {(r[2], r[1]) for r in keyed_state_rows(str(pointer), "counter", written_by)}
    assert plain == {(KeyedAggregate().render(r["key"]), r["key_group"]) for r in rows}, "SCN-8: rows differ"


@pytest.mark.requirement("SCN-11", "SCN-6", "SCN-3", "SCN-4")
@pytest.mark.parametrize(("name", "backend"), [("worker-killed", "hashmap"), ("task-failure-processing", "rocksdb")])
def test_mini_batch_on_spark_stays_exactly_once_through_real_faults(
    spark: Any, tmp_path: Path, name: str, backend: str
) -> None:
    scenario = load_scenario(resolve(name))
    result = run_on_spark(scenario, tmp_path, spark, backend, mini_batch=True)
    assert result.passed, result.failures
    (only,) = result.runs
    assert only.failovers >= 1, "the failed task was never retried"
    assert only.oracle_mismatches == [] and only.final_state == expected_totals(scenario, only.end_offsets)


@pytest.mark.requirement("SCN-11", "SCN-9", "KB-RESTORE-1")
def test_a_backend_keeping_stale_state_after_restore_fails_a_mini_batch_spark_scenario(
    spark: Any, tmp_path: Path
) -> None:
    """One state access per key per epoch still catches the stale-restore bug the per-record mode catches."""
    scenario = load_scenario(Path(__file__).parent / "scenarios" / "repeated-rollbacks.toml")
    result = run_on_spark(scenario, tmp_path, spark, "tests.broken_backends:stale_restore", mini_batch=True)
    assert not result.passed, "a backend that keeps stale state after restore passed in mini-batch mode"
    assert any("wrong running totals" in f or "final state" in f for f in result.failures), result.failures


def _fails_while_marked(marker: str) -> Any:
    """A Python function for a Spark task that fails (a PythonException in the driver) while `marker` has lines
    left, taking one away each time: a query that fails its first attempts, as one whose executor died."""

    def task(row: Any) -> Any:
        path = Path(marker)
        left = path.read_text().splitlines()
        if left:
            path.write_text("\n".join(left[1:]))
            raise RuntimeError("the task's executor is gone")
        return row

    return task


@pytest.mark.requirement("SCN-6")
def test_a_read_only_query_failing_in_spark_runs_again_and_then_fails_as_one_documented_line(
    spark: Any, tmp_path: Path
) -> None:
    master = re.fullmatch(r"local\[\d+,(\d+)\]", spark.sparkContext.master)
    tries = int(master.group(1)) if master else int(spark.conf.get("spark.task.maxFailures", "4"))
    marker = tmp_path / "failures-left"
    marker.write_text("\n".join(["fail"] * 2 * tries))  # every attempt of the task fails, in two jobs
    query = _fails_while_marked(str(marker))
    got = retried(lambda: spark.sparkContext.parallelize([7], 1).map(query).collect(), "a query", attempts=3)
    assert got == [7], f"SCN-6: retried(a query failing twice, attempts=3): expected its result [7], got {got}"
    marker.write_text("\n".join(["fail"] * 3 * tries))
    with pytest.raises(SparkJobFailed) as raised:
        retried(lambda: spark.sparkContext.parallelize([7], 1).map(query).collect(), "a query", attempts=3)
    message = str(raised.value)
    assert isinstance(raised.value, StateCertError) and message.startswith("a query (failed 3 times): "), (
        f"SCN-6: retried(a query failing 3 times, attempts=3): expected SparkJobFailed naming it, got {message!r}"
    )
    assert "\n" not in message, f"SCN-6: a failed query's error: expected one line, got {message!r}"
