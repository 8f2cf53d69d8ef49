"""The oracle on Spark: the scenario's input as a DataFrame, the expected totals as a DataFrame aggregation over it,
and the committed sink output and the final state (read with `state_reader`) compared against both."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statecert.scenarios.model import Scenario
from statecert.scenarios.results import aggregate_of
from statecert.scenarios.spark import worker
from statecert.scenarios.spark.state_reader import WrittenBy, read_keyed_state

INPUT_SCHEMA = "source int, offset int, key string, weight long"
OUTPUT_SCHEMA = "key string, offset int, total long"
WINDOW_SCHEMA = "key string, start long, total long"


def _split_rows(spec: worker.InputSpec, scenario_aggregate: Any, source: int) -> list[tuple[int, int, str, int]]:
    return [
        (
            r.source,
            r.offset,
            scenario_aggregate.render(scenario_aggregate.key(r.key, r.source)),
            scenario_aggregate.weight(r.offset),
        )
        for r in worker.inputs(spec)[source]
    ]


class OracleCheck:
    def __init__(self, spark: Any, scenario: Scenario) -> None:
        self.spark, self.scenario = spark, scenario
        i = scenario.input
        spec = worker.InputSpec(i.seed, scenario.job.sources, i.keys_per_source, i.records_per_source, i.key_skew)
        aggregate = aggregate_of(scenario)
        sources = list(range(scenario.job.sources))
        rows = spark.sparkContext.parallelize(sources, len(sources)).flatMap(lambda s: _split_rows(spec, aggregate, s))
        self.input = spark.createDataFrame(rows, INPUT_SCHEMA).cache()

    def _range(self, start: dict[int, int], end: dict[int, int]) -> Any:
        from pyspark.sql import functions as F

        condition = F.lit(False)
        for s in range(self.scenario.job.sources):
            inside = (F.col("source") == s) & (F.col("offset") >= start.get(s, 0)) & (F.col("offset") < end.get(s, 0))
            condition = condition | inside
        return self.input.filter(condition)

    def expected_totals(self, end: dict[int, int]) -> Any:
        """The oracle: per key the aggregate over every record before `end` (a DataFrame aggregation)."""
        from pyspark.sql import functions as F

        consumed = self._range({}, end)
        return consumed.groupBy("key").agg(F.sum("weight").alias("total"))

    def final_state(
        self, pointer: str, serializer_version: int, backend_config: Mapping[str, object]
    ) -> dict[str, int]:
        """The sink operator's totals in a checkpoint or savepoint, read as a DataFrame (a format the reference
        cannot read restored by the backend in `backend_config`, the one that wrote it)."""
        aggregate = aggregate_of(self.scenario, serializer_version)
        written_by = WrittenBy(backend_config, aggregate.key_type.serializer())
        state = read_keyed_state(self.spark, pointer, worker.OPERATOR, written_by, aggregate.descriptor.name)
        return {
            aggregate.render(row["key"]): int(row["value_total"])
            for row in state.select("key", "value_total").collect()
        }

    def expected_windows(self) -> Any:
        """The oracle of a window job: a DataFrame tumbling-window aggregation over the whole input, event time
        being the record's offset in milliseconds."""
        from pyspark.sql import functions as F

        window = F.window(F.timestamp_millis(F.col("offset")), f"{self.scenario.job.window_ms} milliseconds")
        sums = self.input.groupBy("key", window.alias("w")).agg(F.sum("weight").alias("total"))
        return sums.select("key", F.unix_millis(F.col("w.start")).alias("start"), "total")

    def compare_windows(self, committed: list[tuple[str, int, int]]) -> list[str]:
        """Mismatches between the window results the runs committed and the DataFrame window aggregation."""
        render = aggregate_of(self.scenario).render
        output = self.spark.createDataFrame([(render(k), s, t) for k, s, t in committed], WINDOW_SCHEMA)
        expected = self.expected_windows()
        duplicated = output.groupBy("key", "start").count().filter("count > 1").count()
        missing = expected.exceptAll(output).count()
        unexpected = output.exceptAll(expected).count()
        if not (duplicated or missing or unexpected):
            return []
        return [
            f"committed windows vs DataFrame window aggregation: expected {expected.count()} windows once each, "
            f"got {missing} missing or different, {unexpected} not in the aggregation, {duplicated} committed "
            "more than once"
        ]

    def compare(
        self,
        committed: list[tuple[str, int, int]],
        start: dict[int, int],
        end: dict[int, int],
        final_state: dict[str, int],
    ) -> list[str]:
        """Mismatches between the job's results and the oracle, each as expected vs got."""
        render = aggregate_of(self.scenario).render
        output = self.spark.createDataFrame([(render(k), o, t) for k, o, t in committed], OUTPUT_SCHEMA)
        expected = self._range(start, end).select("key", "offset")
        problems = []
        lost = expected.join(output, ["key", "offset"], "left_anti").count()
        unexpected = output.join(expected, ["key", "offset"], "left_anti").count()
        duplicated = output.groupBy("key", "offset").count().filter("count > 1").count()
        if lost or unexpected or duplicated:
            problems.append(
                f"committed output vs input (DataFrames): expected each of {expected.count()} records once, got "
                f"{lost} lost, {duplicated} committed more than once, {unexpected} not in the input range"
            )
        state = self.spark.createDataFrame([(render(k), t) for k, t in final_state.items()], "key string, total long")
        oracle = self.expected_totals(end)
        differing = oracle.exceptAll(state).count() + state.exceptAll(oracle).count()
        if differing:
            problems.append(f"final state vs DataFrame aggregation of the input: {differing} row(s) differ")
        return problems
