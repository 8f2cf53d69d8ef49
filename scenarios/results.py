"""What a scenario run produced (per job run: committed sink output, offsets, checkpoints, failovers, final state)
and the judgement of it against the scenario's expectations, the same for every runner."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from statecert.reference.key_types import KeyType
from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.reference.simulator.checkers import check_outputs
from statecert.reference.simulator.inputs import generate_inputs
from statecert.reference.simulator.record import Record
from statecert.reference.tumbling_windows import check_windows, expected_windows
from statecert.reference.union_markers import UnionRestore, union_problems
from statecert.scenarios.model import Scenario

Output = tuple[str, int, int]  # key, source offset, the key's running total


@dataclass
class RunResult:
    """One job run. `end_offsets`: per source split, where its input ended (all of it, or a stop-with-savepoint).
    `final_state`: per key the total in the run's last completed checkpoint or savepoint. `checker_violations`:
    what the runner's own checkers found wrong in the run (the simulator's, SIM-9), each a sentence.
    `union_restores`: with `job.union_state`, each keyed subtask's restore and the union elements it read (OS-2)."""

    backend: str
    parallelism: int
    serializer_version: int
    start_offsets: dict[int, int]
    end_offsets: dict[int, int]
    committed: list[Output] = field(default_factory=list)
    completed_checkpoints: int = 0
    failovers: int = 0
    job_failed: bool = False
    final_state: dict[Any, int] | None = None
    oracle_mismatches: list[str] = field(default_factory=list)  # from a runner's own oracle (Spark DataFrames)
    checker_violations: list[str] = field(default_factory=list)
    union_restores: list[UnionRestore] = field(default_factory=list)


def run_summary(index: int, run: RunResult) -> str:
    """One line per job run for a person: backend, parallelism, checkpoints, failovers, output and offsets."""
    splits = sorted(run.end_offsets)
    offsets = ", ".join(f"{run.start_offsets.get(s, 0)}..{run.end_offsets[s]}" for s in splits)
    line = (
        f"run {index + 1}: {run.backend} at parallelism {run.parallelism}, {run.completed_checkpoints} checkpoints "
        f"and savepoints completed, {run.failovers} failovers, {len(run.committed)} outputs committed, "
        f"source offsets {offsets}"
    )
    if run.union_restores:
        line += f", {len(run.union_restores)} subtask restores of union state"
    return line + (", job failed" if run.job_failed else "")


@dataclass
class ScenarioResult:
    scenario: str
    runner: str
    backend: str
    runs: list[RunResult]
    error: str | None = None  # the class name of the documented error a run ended with
    error_message: str = ""
    expected_error: str | None = None
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for run in data["runs"]:
            run["committed"] = len(run["committed"])  # the count, not the records
        return {**data, "passed": self.passed}


_INPUTS: dict[tuple[int, int, int, int, float], list[list[Record]]] = {}


def inputs_of(scenario: Scenario) -> list[list[Record]]:
    """The scenario's seeded input, as both runners draw it (the last one drawn is kept: checking a scenario's
    runs draws it again, and a million records take seconds to draw)."""
    i = scenario.input
    key = (i.seed, scenario.job.sources, i.keys_per_source, i.records_per_source, i.key_skew)
    if key not in _INPUTS:
        _INPUTS.clear()
        _INPUTS[key] = generate_inputs(random.Random(i.seed), *key[1:])
    return _INPUTS[key]


def aggregate_of(scenario: Scenario, serializer_version: int | None = None) -> KeyedAggregate:
    job = scenario.job
    return KeyedAggregate(
        job.operator,
        job.key_selector,
        serializer_version or job.serializer_version,
        KeyType(job.key_type, scenario.input.keys_per_source),
    )


def expected_totals(scenario: Scenario, end_offsets: dict[int, int]) -> dict[str, int]:
    """The oracle in plain Python: per key the aggregate over every record before `end_offsets`."""
    aggregate = aggregate_of(scenario)
    totals: Counter[str] = Counter()
    for s, records in enumerate(inputs_of(scenario)):
        for r in records[: end_offsets.get(s, len(records))]:
            totals[aggregate.key(r.key, r.source)] += aggregate.weight(r.offset)
    return dict(totals)


def evaluate(scenario: Scenario, result: ScenarioResult) -> list[str]:
    """Every expectation that does not hold, each stated as expected vs got."""
    expect = scenario.expect
    failures: list[str] = []
    if result.expected_error != result.error:
        if result.expected_error is None:
            failures.append(f"expected no error, got {result.error}: {result.error_message}")
        else:
            failures.append(f"expected {result.expected_error}, got {result.error or 'no error'}")
    if result.error is not None:
        return failures
    runs = result.runs
    for i, run in enumerate(runs):  # the runner's checkers hold in every run, whatever the scenario expects
        failures += [f"run {i + 1}: {violation}" for violation in run.checker_violations]
    if expect.job_failed != any(r.job_failed for r in runs):
        failures.append(f"expected job_failed={expect.job_failed}, got {not expect.job_failed}")
    completed = sum(r.completed_checkpoints for r in runs)
    if not expect.completed_checkpoints.holds(completed):
        failures.append(f"expected {expect.completed_checkpoints} completed checkpoints, got {completed}")
    failovers = sum(r.failovers for r in runs)
    if not expect.failovers.holds(failovers):
        failures.append(f"expected {expect.failovers} failovers, got {failovers}")
    if scenario.job.union_state:
        failures += _union_state(runs)
    if expect.job_failed:
        return failures
    inputs = inputs_of(scenario)
    aggregate = aggregate_of(scenario)
    if scenario.job.window_ms:
        return failures + _windows_exactly_once(scenario, inputs, aggregate, runs)
    if expect.exactly_once:
        failures += _exactly_once(inputs, aggregate, runs)
    if expect.state_equals_oracle:
        last = runs[-1]
        # keys compared as text: the Spark runner reads the final state as a DataFrame of rendered keys
        oracle = {aggregate.render(k): v for k, v in expected_totals(scenario, last.end_offsets).items()}
        if last.final_state is None:
            failures.append("expected a final state, got no completed checkpoint or savepoint in the last run")
        elif (got := {aggregate.render(k): v for k, v in last.final_state.items()}) != oracle:
            wrong = sorted(k for k in set(oracle) | set(got) if oracle.get(k) != got.get(k))
            shown = ", ".join(f"{k}: expected {oracle.get(k)}, got {got.get(k)}" for k in wrong[:5])
            failures.append(f"final state differs from the oracle for {len(wrong)} key(s): {shown}")
        failures += last.oracle_mismatches
    return failures


def _union_state(runs: list[RunResult]) -> list[str]:
    """Every keyed subtask's restore gave it every old subtask's union elements (OS-2), and there was one."""
    restores = [r for run in runs for r in run.union_restores]
    if not restores:
        return ["OS-2: expected at least one restore of the keyed subtasks' union list state, got none"]
    return union_problems(restores)


def expected_window_results(scenario: Scenario, inputs: list[list[Record]]) -> dict[tuple[str, int], int]:
    """The oracle of a window job in plain Python: per (key, window start) the sum over the whole input."""
    aggregate = aggregate_of(scenario)
    records = [(aggregate.key(r.key, r.source), r.offset) for split in inputs for r in split]
    return expected_windows(records, scenario.job.window_ms, aggregate.weight)


def _windows_exactly_once(
    scenario: Scenario, inputs: list[list[Record]], aggregate: KeyedAggregate, runs: list[RunResult]
) -> list[str]:
    """A window job's runs together commit every window of the input once, with its sum: a window that a
    savepoint holds open fires in the run that resumes it. (The per-key final state is not compared: after the
    input ends every window has fired and emptied its state.)"""
    failures = []
    if scenario.expect.exactly_once:
        committed = [out for run in runs for out in run.committed]
        check = check_windows(expected_window_results(scenario, inputs), committed)
        if not check.exactly_once:
            failures.append(f"expected every window of the input committed once with its sum, got {check}")
    if scenario.expect.state_equals_oracle:
        failures += runs[-1].oracle_mismatches
    return failures


def _exactly_once(inputs: list[list[Record]], aggregate: KeyedAggregate, runs: list[RunResult]) -> list[str]:
    """Each run commits every record of its input range once, in order, with correct running totals; the runs
    cover the input (a run may resume before the previous one's end: that replay is Flink's semantics too)."""
    failures = []
    for i, run in enumerate(runs):
        expected: dict[str, list[int]] = {}
        initial: Counter[str] = Counter()
        for s, records in enumerate(inputs):
            start, end = run.start_offsets.get(s, 0), run.end_offsets.get(s, len(records))
            for r in records[:start]:
                initial[aggregate.key(r.key, r.source)] += aggregate.weight(r.offset)
            for r in records[start:end]:
                expected.setdefault(aggregate.key(r.key, r.source), []).append(r.offset)
        checks = check_outputs(expected, run.committed, initial, aggregate.weight)
        if not checks.exactly_once:
            failures.append(
                f"run {i + 1}: expected every record committed once in order, got {checks.lost} lost, "
                f"{checks.duplicated} duplicated, {checks.unexpected} not of its input range, "
                f"{checks.out_of_order} out of order, {checks.wrong_counts} wrong running totals"
            )
        if i + 1 < len(runs):
            after = runs[i + 1].start_offsets
            gaps = [s for s in range(len(inputs)) if after.get(s, 0) > run.end_offsets.get(s, len(inputs[s]))]
            if gaps:
                failures.append(f"run {i + 2} starts after run {i + 1} ended for splits {gaps}: records skipped")
    return failures
