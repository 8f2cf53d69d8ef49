"""The PySpark runner's throughput against a plain Spark DataFrame aggregation of the same input, measured in one
run on the same SparkSession (local[2]): what checkpointed, exactly-once keyed state costs over a stateless batch
aggregation. The runner is timed without its DataFrame oracle (the committed output is still checked for
exactly-once in Python). Prints records per second of each and their ratio; asserts nothing.

    python benchmarks/bench_spark_runner.py [--records 50000] [--epoch 10000] [--backend hashmap]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

from statecert.scenarios.catalog import resolve
from statecert.scenarios.loader import load_scenario
from statecert.scenarios.spark.oracle import OracleCheck
from statecert.scenarios.spark.runner import run_on_spark
from statecert.scenarios.spark.session import spark_session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=50_000, help="records per source split (2 splits)")
    parser.add_argument("--epoch", type=int, default=10_000, help="records per split per epoch")
    parser.add_argument("--backend", action="append", help="backends to measure (default: hashmap and rocksdb)")
    args = parser.parse_args()
    base = load_scenario(resolve("task-failure-processing"))
    scenario = dataclasses.replace(
        base,
        input=dataclasses.replace(base.input, records_per_source=args.records, keys_per_source=1000),
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
    with tempfile.TemporaryDirectory() as workdir:  # warm-up: Python workers started, modules imported
        run_on_spark(scenario, Path(workdir), spark, "hashmap", oracle=False)
    for backend in args.backend or ["hashmap", "rocksdb"]:
        with tempfile.TemporaryDirectory() as workdir:
            start = time.perf_counter()
            result = run_on_spark(scenario, Path(workdir), spark, backend, oracle=False)
            wall = time.perf_counter() - start
        epochs = result.runs[0].completed_checkpoints if result.runs else 0
        print(
            f"Spark runner, {backend}: {wall:.2f} s = {records / wall:,.0f} records/s "
            f"({epochs} checkpointed epochs, exactly-once={result.passed}); "
            f"{plain / wall:.2f}x the plain aggregation's rate"
        )
    spark.stop()


if __name__ == "__main__":
    main()
