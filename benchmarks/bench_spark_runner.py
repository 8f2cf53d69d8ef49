"""The PySpark runner's throughput against the peers a Spark user would pick instead, measured in one run on the same
SparkSession (local[2]) over the same input (default 1,000,000 records, 2,000 keys, 5 checkpointed epochs):

- a plain DataFrame `groupBy(key).sum` (stateless batch: the ceiling of what Spark does with this input);
- Spark Structured Streaming's native aggregation over the same records as 5 Parquet micro-batches, with the
  HDFS-backed state store, the RocksDB provider, and the RocksDB provider with changelog checkpointing (the
  checkpointed, exactly-once stateful peers);
- Spark's Python stateful operators `applyInPandasWithState` and `transformWithStateInPandas` (with the `bench`
  extra: pandas, pyarrow, protobuf).

The runner reads its input from Parquet written once before any timing (as the peers read their micro-batches'
files) and its job is timed (epochs, snapshots, acknowledgements, commits) without its DataFrame oracle, per
backend in two modes: per record (every record reads and writes its key's state, the default) and mini-batch
(`--mini-batch`: one state read and write per key per epoch, as Flink's mini-batch aggregation and Spark's own
streaming aggregation do); the exactly-once check of its committed output in Python, which follows, is timed
apart. Prints records per second and ratios; asserts nothing.

    python benchmarks/bench_spark_runner.py [--records 500000] [--epoch 100000] [--backend hashmap] [--json F]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from figures import add_json_argument, record

from statecert.reference.loader import load_state_backend
from statecert.scenarios.catalog import resolve
from statecert.scenarios.loader import load_scenario
from statecert.scenarios.model import Scenario
from statecert.scenarios.results import aggregate_of
from statecert.scenarios.spark import worker
from statecert.scenarios.spark.oracle import OracleCheck
from statecert.scenarios.spark.runner import run_on_spark
from statecert.scenarios.spark.session import spark_session
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, KeyedBackendParameters
from statecert.spec.keygroups import KeyGroupRange

PROVIDERS = {
    "hdfs": ("org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider", False),
    "rocksdb": ("org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider", False),
    "rocksdb_changelog": ("org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider", True),
}


def write_micro_batches(frame: Any, epoch: int, epochs: int, directory: str) -> None:
    """The input as one Parquet file per epoch, oldest first, so a file stream reads one epoch per micro-batch."""
    from pyspark.sql import functions as F

    for e in range(epochs):
        part = frame.filter((F.col("offset") >= e * epoch) & (F.col("offset") < (e + 1) * epoch))
        part.coalesce(1).write.mode("append").parquet(directory)
        time.sleep(0.05)  # distinct modification times: the file source orders by them


def timed_stream(
    spark: Any, directory: str, provider: str, changelog: bool, partitions: int, query_of: Callable[[Any], Any]
) -> float:
    """Wall seconds of the streaming query `query_of(stream)` over the Parquet micro-batches with the state store
    `provider`, exactly-once with its state checkpointed every micro-batch, to the no-op sink."""
    from statecert.scenarios.spark.oracle import INPUT_SCHEMA

    spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", str(changelog).lower())
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    stream = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(directory)
    with tempfile.TemporaryDirectory() as checkpoints:
        start = time.perf_counter()
        query = (
            query_of(stream)
            .writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", checkpoints)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return time.perf_counter() - start


def streaming_aggregation(spark: Any, directory: str, provider: str, changelog: bool, partitions: int) -> float:
    """Structured Streaming's native `groupBy(key).sum`, as Spark users keep keyed state."""
    from pyspark.sql import functions as F

    def aggregate(stream: Any) -> Any:
        return stream.groupBy("key").agg(F.sum("weight").alias("total"))

    return timed_stream(spark, directory, provider, changelog, partitions, aggregate)


def _apply_in_pandas_with_state(stream: Any) -> Any:
    import pandas as pd
    from pyspark.sql.streaming.state import GroupStateTimeout

    def running_sum(key: Any, batches: Any, state: Any) -> Any:
        total = state.get[0] if state.exists else 0
        for batch in batches:
            total += int(batch["weight"].sum())
        state.update((total,))
        yield pd.DataFrame({"key": [key[0]], "total": [total]})

    return stream.groupBy("key").applyInPandasWithState(
        running_sum, "key string, total long", "total long", "Update", GroupStateTimeout.NoTimeout
    )


def _transform_with_state_in_pandas(stream: Any) -> Any:
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class RunningSum(StatefulProcessor):  # type: ignore[misc,unused-ignore]
        def init(self, handle: Any) -> None:
            self.total = handle.getValueState("total", "total long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            total = self.total.get()[0] if self.total.exists() else 0
            for batch in rows:
                total += int(batch["weight"].sum())
            self.total.update((total,))
            yield pd.DataFrame({"key": [key[0]], "total": [total]})

        def close(self) -> None:
            pass

    return stream.groupBy("key").transformWithStateInPandas(
        statefulProcessor=RunningSum(), outputStructType="key string, total long", outputMode="Update", timeMode="None"
    )


PYTHON_PEERS = {
    "apply_in_pandas_with_state": _apply_in_pandas_with_state,
    "transform_with_state_pandas": _transform_with_state_in_pandas,
}


def python_stateful(spark: Any, directory: str, peer: str, partitions: int) -> float:
    """Spark's Python stateful operator `peer` keeping a running sum per key (RocksDB state store, which
    transformWithState requires)."""
    return timed_stream(spark, directory, PROVIDERS["rocksdb"][0], False, partitions, PYTHON_PEERS[peer])


def subtask_loop_us(scenario: Scenario, backend: str, records: int = 100_000, keys: int = 1_000) -> float:
    """Microseconds per record of a keyed subtask's per-record loop (`set_current_key`, a value read, the aggregate,
    a write, staging the total: the worker's own code), outside Spark on one backend; best of 5 passes."""
    aggregate = aggregate_of(scenario)
    rows = [(f"k{i % keys}", 0, i) for i in range(records)]
    epoch = worker.EpochRecords.from_rows(aggregate, rows)
    task = worker.EpochTask(
        job_id="bench",
        checkpoint_id=1,
        storage_access=None,  # `_process` only processes: the snapshot is not part of the loop
        options=DEFAULT_CHECKPOINT_OPTIONS,
        restore_pointer=None,
        restore_id=None,
        backend_config={},
        parallelism=1,
        max_parallelism=128,
        aggregate=aggregate,
        inputs=worker.InputSpec(seed=0, sources=1, keys_per_source=keys, records_per_source=records, key_skew=0.0),
        ranges={},
    )
    params = KeyedBackendParameters("bench", "op", aggregate.key_type.serializer(), 128, KeyGroupRange(0, 127))
    best = float("inf")
    for _ in range(5):
        keyed = load_state_backend(job_config={"state.backend.type": backend}).create_keyed_state_backend(params)
        try:
            start = time.perf_counter()
            worker._process(task, 0, 1, keyed, epoch)
            best = min(best, time.perf_counter() - start)
        finally:
            keyed.dispose()
    return best / records * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000, help="records per source split (2 splits)")
    parser.add_argument("--epoch", type=int, default=100_000, help="records per split per epoch")
    parser.add_argument("--keys", type=int, default=1_000, help="keys per source split")
    parser.add_argument("--backend", action="append", help="backends to measure (default: hashmap and rocksdb)")
    add_json_argument(parser)
    args = parser.parse_args()
    base = load_scenario(resolve("task-failure-processing"))
    scenario = dataclasses.replace(
        base,
        input=dataclasses.replace(base.input, records_per_source=args.records, keys_per_source=args.keys),
        checkpointing=dataclasses.replace(base.checkpointing, records_per_epoch=args.epoch),
        runs=(dataclasses.replace(base.runs[0], events=()),),
        expect=dataclasses.replace(
            base.expect, state_equals_oracle=False, failovers=dataclasses.replace(base.expect.failovers, min=None)
        ),
    )
    records = args.records * scenario.job.sources
    spark = spark_session()
    oracle = OracleCheck(spark, scenario)
    oracle.input.count()  # materialize the cached input before timing
    everything = {s: args.records for s in range(scenario.job.sources)}
    oracle.expected_totals(everything).collect()  # warm-up, as the runner gets one below
    start = time.perf_counter()
    rows = oracle.expected_totals(everything).collect()
    plain = time.perf_counter() - start
    print(f"input: {records} records, {len(rows)} keys, epochs of {args.epoch} records per split")
    print(f"plain DataFrame groupBy(key).sum: {plain:.2f} s = {records / plain:,.0f} records/s")
    figures: dict[str, Any] = {"records": records, "keys": len(rows), "plain_records_per_s": round(records / plain)}
    epochs = -(-args.records // args.epoch)
    with tempfile.TemporaryDirectory() as directory:
        write_micro_batches(oracle.input, args.epoch, epochs, f"{directory}/input")
        streaming_aggregation(spark, f"{directory}/input", PROVIDERS["hdfs"][0], False, scenario.job.parallelism)
        for name, (provider, changelog) in PROVIDERS.items():
            wall = streaming_aggregation(spark, f"{directory}/input", provider, changelog, scenario.job.parallelism)
            figures[f"streaming_{name}_records_per_s"] = round(records / wall)
            print(
                f"Structured Streaming groupBy(key).sum, {name} state store, {epochs} micro-batches: {wall:.2f} s = "
                f"{records / wall:,.0f} records/s"
            )
        try:
            import pandas  # noqa: F401
            import pyarrow  # noqa: F401
        except ImportError:
            peers_note = "not measured: Spark's Python stateful operators need pandas and pyarrow (.[bench])"
            print(peers_note)
        else:
            peers_note = ""
            for peer in PYTHON_PEERS:
                try:
                    wall = python_stateful(spark, f"{directory}/input", peer, scenario.job.parallelism)
                except Exception as exc:  # a Spark without the operator: say so, measure the rest
                    print(f"{peer}: not measured ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
                    continue
                figures[f"{peer}_records_per_s"] = round(records / wall)
                print(f"Structured Streaming {peer}, {epochs} batches: {wall:.2f} s = {records / wall:,.0f} records/s")
    runner_input = tempfile.TemporaryDirectory()  # the runner's Parquet input, written by the warm-up run
    with tempfile.TemporaryDirectory() as workdir:  # warm-up: Python workers started, modules imported
        run_on_spark(scenario, Path(workdir), spark, "hashmap", oracle=False, input_dir=runner_input.name)
    for backend in args.backend or ["hashmap", "rocksdb"]:
        for mini_batch in (False, True):
            label = f"{backend}_mini_batch" if mini_batch else backend
            mode = "mini-batch (one state read and write per key per epoch)" if mini_batch else "per record"
            with tempfile.TemporaryDirectory() as workdir:
                start = time.perf_counter()
                result = run_on_spark(
                    scenario,
                    Path(workdir),
                    spark,
                    backend,
                    oracle=False,
                    mini_batch=mini_batch,
                    input_dir=runner_input.name,
                )
                total = time.perf_counter() - start
            wall = result.seconds  # the job: epochs, snapshots, acknowledgements, commits (what the peers do)
            epochs = result.runs[0].completed_checkpoints if result.runs else 0
            print(
                f"Spark runner, {backend}, {mode}: {wall:.2f} s = {records / wall:,.0f} records/s "
                f"({epochs} checkpointed epochs, exactly-once={result.passed}, checked in {total - wall:.2f} s "
                f"more); {plain / wall:.2f}x the plain aggregation's rate"
            )
            figures[f"runner_{label}_check_s"] = round(total - wall, 2)
            figures[f"runner_{label}_records_per_s"] = round(records / wall)
            figures[f"runner_{label}_exactly_once"] = result.passed
            for peer in PROVIDERS:
                ratio = records / wall / figures[f"streaming_{peer}_records_per_s"]
                figures[f"ratio_{label}_vs_streaming_{peer}"] = round(ratio, 3)
                print(f"  {ratio:.2f}x Structured Streaming with the {peer} state store")
            for peer in PYTHON_PEERS:
                if f"{peer}_records_per_s" in figures:
                    ratio = records / wall / figures[f"{peer}_records_per_s"]
                    figures[f"ratio_{label}_vs_{peer}"] = round(ratio, 3)
                    print(f"  {ratio:.2f}x {peer}")
    for label, heap in (("hashmap", "heap"), ("hashmap_mini_batch", "heap_mini_batch")):
        if f"runner_{label}_records_per_s" not in figures:
            continue
        figures[f"ratio_{heap}_vs_streaming_rocksdb"] = figures[f"ratio_{label}_vs_streaming_rocksdb"]
        tws = figures.get(f"ratio_{label}_vs_transform_with_state_pandas")
        figures[f"ratio_{heap}_vs_transform_with_state_pandas"] = tws
        if tws is None:
            figures[f"ratio_{heap}_vs_transform_with_state_pandas_note"] = (
                peers_note or "transformWithStateInPandas failed"
            )
    runner_input.cleanup()
    for backend in args.backend or ["hashmap", "rocksdb"]:
        loop = subtask_loop_us(scenario, backend)
        figures[f"subtask_loop_{backend}_us_per_record"] = round(loop, 2)
        print(f"a subtask's per-record loop outside Spark, {backend}: {loop:.2f} us per record (best of 5)")
    record(args.json, "spark_runner", figures)
    spark.stop()


if __name__ == "__main__":
    main()
