"""The exactly-once checkers against an independent model (SIM-2, SIM-3, SCN-3): a committed output is built from
the expected records with faults of known kinds and number injected, and each checker must count exactly those.
A checker that misses a kind certifies a run that lost or doubled records."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.reference.simulator.checkers import (
    CheckResult,
    check_output_columns,
    check_outputs,
    report_violations,
)
from statecert.reference.tumbling_windows import WindowCheck, check_windows
from statecert.scenarios.catalog import resolve
from statecert.scenarios.loader import load_scenario
from statecert.scenarios.model import Bound, Scenario
from statecert.scenarios.results import (
    RunResult,
    ScenarioResult,
    aggregate_of,
    evaluate,
    expected_totals,
    inputs_of,
)

Row = tuple[int, int, int]  # key, offset, running total


@dataclass
class FaultyOutput:
    """A committed output with its faults counted as they were injected: the model's verdict."""

    expected: dict[int, list[int]]
    initial: dict[int, int]
    committed: list[Row]
    verdict: CheckResult


FOREIGN = st.sets(st.integers(0, 70), max_size=2)  # offsets committed under a key: those it does not have


@st.composite
def faulty_outputs(draw: Any, weight: Any) -> FaultyOutput:
    """Per key, its expected offsets with some dropped, foreign records (offsets the key does not have, or keys
    with no expected records) sorted in, disjoint adjacent pairs of distinct offsets swapped (one descent each),
    some records committed twice (the copy right after the original, no descent), the keys interleaved at random,
    running totals as the job would compute them from what it committed, and some totals made wrong."""
    rnd = draw(st.randoms(use_true_random=False))  # the many small choices: one draw, not hundreds
    keys = draw(st.integers(1, 5))
    expected = {k: sorted(draw(st.sets(st.integers(0, 60), max_size=12))) for k in range(keys)}
    initial = {k: draw(st.integers(-5, 5)) for k in range(keys + 2) if draw(st.booleans())}
    lost = duplicated = unexpected = out_of_order = 0
    per_key: dict[int, list[int]] = {}
    for k in range(keys + 2):  # keys and keys + 1 expect nothing: whatever they commit is unexpected
        offsets = expected.get(k, [])
        kept = [o for o in offsets if rnd.random() >= 0.25]
        lost += len(offsets) - len(kept)
        foreign = draw(FOREIGN) - set(offsets)
        unexpected += len(foreign)
        sequence = sorted(kept + sorted(foreign))
        i = 0
        while i + 1 < len(sequence):
            if sequence[i] != sequence[i + 1] and rnd.random() < 0.25:
                sequence[i], sequence[i + 1] = sequence[i + 1], sequence[i]
                out_of_order += 1
                i += 2
            else:
                i += 1
        with_copies: list[int] = []
        for o in sequence:
            with_copies.append(o)
            if rnd.random() < 0.15:
                with_copies.append(o)
                duplicated += 1
        per_key[k] = with_copies
    order = [k for k, offsets in per_key.items() for _ in offsets]
    rnd.shuffle(order)
    positions = dict.fromkeys(per_key, 0)
    totals = {k: initial.get(k, 0) for k in per_key}
    committed: list[Row] = []
    for k in order:
        offset = per_key[k][positions[k]]
        positions[k] += 1
        totals[k] += weight(offset)
        committed.append((k, offset, totals[k]))
    wrong = set(rnd.sample(range(len(committed)), min(len(committed), draw(st.integers(0, 3)))))
    for i in wrong:
        k, offset, total = committed[i]
        committed[i] = (k, offset, total + rnd.choice([-2, -1, 1, 3]))
    return FaultyOutput(
        expected, initial, committed, CheckResult(lost, duplicated, out_of_order, len(wrong), unexpected)
    )


@pytest.mark.requirement("SIM-2", "SIM-3")
@settings(max_examples=300, deadline=None)
@given(data=st.data(), operator=st.sampled_from(["count", "sum"]))
def test_the_sink_checks_count_every_injected_fault_by_kind(data: Any, operator: str) -> None:
    """Both sink checkers, the row one and the columnar one of long runs, count each kind of fault as injected:
    lost, duplicated, unexpected (another key's offset, or a key with nothing expected), out of order, wrong
    running totals; and call the output exactly-once only without any."""
    weight = KeyedAggregate(operator=operator).weight
    run = data.draw(faulty_outputs(weight))
    rows = check_outputs(run.expected, run.committed, run.initial, weight)  # type: ignore[arg-type]
    assert rows == run.verdict, f"check_outputs gave {rows}, expected {run.verdict} for committed={run.committed}"
    key_count = len(run.expected) + 2
    columns = check_output_columns(
        np.array([k for k, offsets in run.expected.items() for _ in offsets], dtype=np.int64),
        np.array([o for offsets in run.expected.values() for o in offsets], dtype=np.int64),
        tuple(np.array([row[i] for row in run.committed], dtype=np.int64) for i in range(3)),  # type: ignore[arg-type]
        np.array([run.initial.get(k, 0) for k in range(key_count)], dtype=np.int64),
        KeyedAggregate(operator=operator).weights,
    )
    assert columns == run.verdict, f"check_output_columns gave {columns}, expected {run.verdict}"
    assert rows.exactly_once == (not any(asdict(run.verdict).values()))


@pytest.mark.requirement("SCN-10")
@settings(max_examples=200, deadline=None)
@given(
    expected=st.dictionaries(st.tuples(st.sampled_from("abc"), st.sampled_from(range(0, 100, 10))), st.integers(1, 50)),
    rnd=st.randoms(use_true_random=False),
)
def test_the_window_check_counts_every_injected_fault_by_kind(expected: dict[tuple[str, int], int], rnd: Any) -> None:
    """Each expected window committed once with its sum, but some dropped, some committed twice (the copy with the
    same sum), some with a wrong sum, and windows nobody expected (another key's, or another start) committed:
    the window check counts each as injected."""
    windows = sorted(expected)
    dropped = {w for w in windows if rnd.random() < 0.2}
    kept = [w for w in windows if w not in dropped]
    wrong = {w for w in kept if rnd.random() < 0.2}
    committed = [
        (key, start, expected[(key, start)] + (rnd.choice([-1, 1, 7]) if (key, start) in wrong else 0))
        for key, start in kept
    ]
    copies = [row for row in committed if (row[0], row[1]) not in wrong and rnd.random() < 0.2]
    foreign = {(rnd.choice("abcd"), rnd.randrange(0, 100, 5)) for _ in range(rnd.randrange(3))} - set(expected)
    committed += copies + [(key, start, 1) for key, start in sorted(foreign)]
    rnd.shuffle(committed)
    got = check_windows(expected, committed)
    want = WindowCheck(lost=len(dropped), duplicated=len(copies), wrong_sums=len(wrong), unexpected=len(foreign))
    assert got == want, f"check_windows gave {got}, expected {want} for committed={committed}"
    assert got.exactly_once == (not (dropped or copies or wrong or foreign))


# -- the scenario verdict over several runs (SCN-3, SCN-4) ------------------------------------------------------------

SCENARIO = load_scenario(resolve("stop-and-rescale"))
CLEAN = {"violations": [], "concurrency_bound_held": True, "max_pending_checkpoints": 1, "checkpoints_past_timeout": []}
# what the simulator's own checkers report (SIM-9), as a run's report has it
CHECKER_FAULTS = {
    "not-a-cut": {**CLEAN, "violations": ["checkpoint 2 is not a consistent cut at counter for keys ['s0-k1']"]},
    "too-many-pending": {**CLEAN, "concurrency_bound_held": False, "max_pending_checkpoints": 3},
    "past-timeout": {**CLEAN, "checkpoints_past_timeout": [4]},
}
# what the scenario expects besides the output (SCN-4, SCN-5): the documented error, the job's fate, the counts
OUTCOME_FAULTS = [
    "unexpected-error",
    "missing-error",
    "other-error",
    "job-failed",
    "few-checkpoints",
    "too-many-failovers",
    "final-state-differs",
    "no-final-state",
]
OUTPUT_FAULTS = ["drop", "duplicate", "swap", "wrong-total", "before-start", "past-end", "gap"]
FAULTS = [*OUTPUT_FAULTS, *CHECKER_FAULTS, *OUTCOME_FAULTS]
PASSING = [None, "expected-error-raised", "failovers-within-bound"]


def _committed(aggregate: KeyedAggregate, start: dict[int, int], end: dict[int, int]) -> list[tuple[Any, int, int]]:
    """What a correct run from `start` to `end` commits: every record of the range, split by split, with its key's
    running total from the input before `start`."""
    totals = dict(expected_totals(SCENARIO, start))
    rows = []
    for s, records in enumerate(inputs_of(SCENARIO)):
        for r in records[start[s] : end[s]]:
            key = aggregate.key(r.key, r.source)
            totals[key] = totals.get(key, 0) + aggregate.weight(r.offset)
            rows.append((key, r.offset, totals[key]))
    return rows


@pytest.mark.requirement("SCN-3", "SCN-4", "SIM-9")
@settings(max_examples=150, deadline=None)
@given(data=st.data(), fault=st.sampled_from([*PASSING, *FAULTS]))
def test_the_scenario_verdict_fails_a_history_exactly_when_a_run_went_wrong(data: Any, fault: str | None) -> None:
    """Runs of stop-and-rescale's input, each resumed at or before the previous one's end (a replay is allowed),
    the last reading the input to its end; a fault in one run (a record lost, committed twice, out of order, with a
    wrong total, one from before its start or past its end committed once, a run starting after the previous
    one's end, or a violation the simulator's own checkers reported), or an outcome the scenario does not expect
    (`_outcome`) must fail the verdict, and a history without one must pass it."""
    aggregate = aggregate_of(SCENARIO)
    lengths = [len(records) for records in inputs_of(SCENARIO)]
    count = data.draw(st.integers(2 if fault == "gap" else 1, 4), label="runs")
    ends = [
        [*sorted(data.draw(st.lists(st.integers(1, n - 1), min_size=count - 1, max_size=count - 1))), n]
        for n in lengths
    ]
    runs, start = [], dict.fromkeys(range(len(lengths)), 0)
    for i in range(count):
        end = {s: max(ends[s][i], start[s]) for s in range(len(lengths))}
        runs.append(RunResult("hashmap", 2, 1, dict(start), end, _committed(aggregate, start, end), 4))
        start = {s: data.draw(st.integers(0, end[s]), label="resume at") for s in end}  # at or before the end
    runs[-1].final_state = expected_totals(SCENARIO, runs[-1].end_offsets)
    result = ScenarioResult(SCENARIO.name, "model", "hashmap", runs)
    scenario = SCENARIO
    if fault in OUTCOME_FAULTS or fault in PASSING:
        scenario = _outcome(data, fault, result)
    elif fault is not None:
        _inject(data, fault, runs, lengths, aggregate)
    failures = evaluate(scenario, result)
    if fault in PASSING:
        assert failures == [], f"a correct history failed: {failures}"
        assert report_violations(CLEAN) == []
    else:
        assert failures, f"a history with a {fault} fault passed: {[(r.start_offsets, r.end_offsets) for r in runs]}"


def _outcome(data: Any, fault: str | None, result: ScenarioResult) -> Scenario:
    """The scenario (its expectations changed where the fault is in them) and the result with the outcome `fault`
    names: an error where none or another was expected, none where one was, a failed job, too few checkpoints, too
    many failovers, a final state off by one for a key or missing; or one that meets them."""
    scenario, runs = SCENARIO, result.runs
    last = runs[-1]
    assert last.final_state is not None
    if fault == "unexpected-error":
        result.error, result.error_message = "CheckpointFormatError", "chk-2/_metadata: truncated"
    elif fault == "missing-error":
        result.expected_error = "UnsupportedSnapshotError"
    elif fault == "other-error":
        result.expected_error, result.error = "UnsupportedSnapshotError", "CheckpointFormatError"
    elif fault == "expected-error-raised":
        result.expected_error = result.error = "UnsupportedSnapshotError"
    elif fault == "job-failed":
        data.draw(st.sampled_from(runs), label="failed run").job_failed = True
    elif fault == "few-checkpoints":
        for run in runs:
            run.completed_checkpoints = 0
    elif fault in ("too-many-failovers", "failovers-within-bound"):
        bound = Bound(max=data.draw(st.integers(0, 2), label="max failovers"))
        scenario = replace(SCENARIO, expect=replace(SCENARIO.expect, failovers=bound))
        assert bound.max is not None
        extra = 1 if fault == "too-many-failovers" else data.draw(st.integers(-bound.max, 0), label="fewer")
        data.draw(st.sampled_from(runs), label="failing over run").failovers = bound.max + extra
    elif fault == "final-state-differs":
        key = data.draw(st.sampled_from(sorted(last.final_state)), label="key")
        last.final_state[key] += data.draw(st.sampled_from([-1, 1]), label="off by")
    elif fault == "no-final-state":
        last.final_state = None
    return scenario


def _inject(data: Any, fault: str, runs: list[RunResult], lengths: list[int], aggregate: KeyedAggregate) -> None:
    """One fault of the kind in one run whose range allows it (a correct history otherwise)."""
    if fault in CHECKER_FAULTS:
        run = data.draw(st.sampled_from(runs), label="faulty run")
        run.checker_violations = report_violations(CHECKER_FAULTS[fault])
        return
    if fault == "gap":
        i = data.draw(st.integers(1, len(runs) - 1), label="gap run")
        s = data.draw(st.integers(0, len(lengths) - 1), label="gap split")
        previous = runs[i - 1].end_offsets[s]
        if previous >= lengths[s]:
            previous = runs[i - 1].end_offsets[s] = lengths[s] - 1
            runs[i - 1].committed = _committed(aggregate, runs[i - 1].start_offsets, runs[i - 1].end_offsets)
        runs[i].start_offsets[s] = previous + 1
        runs[i].end_offsets[s] = max(runs[i].end_offsets[s], previous + 1)
        runs[i].committed = _committed(aggregate, runs[i].start_offsets, runs[i].end_offsets)
        return
    run = data.draw(st.sampled_from(runs), label="faulty run")
    s = data.draw(st.integers(0, len(lengths) - 1), label="split")
    start, end = run.start_offsets, run.end_offsets
    if fault in ("before-start", "past-end"):
        if fault == "before-start":
            start[s] = max(start[s], 1)
            offset = data.draw(st.integers(0, start[s] - 1), label="offset")
        else:  # only the last run reads to the input's end: its end moves back, no run resumes from it
            end[s] = min(end[s], lengths[s] - 1)
            offset = data.draw(st.integers(end[s], lengths[s] - 1), label="offset")
        start[s] = min(start[s], end[s])
        run.committed = _committed(aggregate, start, end)
        record = inputs_of(SCENARIO)[s][offset]
        key = aggregate.key(record.key, record.source)
        at = data.draw(st.integers(0, len(run.committed)), label="at")
        total = sum(aggregate.weight(o) for k, o, _ in run.committed[:at] if k == key)
        before = expected_totals(SCENARIO, start).get(key, 0)
        # committed once with the running total the job would give it, so only the range tells it apart
        run.committed.insert(at, (key, offset, before + total + aggregate.weight(offset)))
        later = [i for i in range(at + 1, len(run.committed)) if run.committed[i][0] == key]
        for i in later:
            k, o, t = run.committed[i]
            run.committed[i] = (k, o, t + aggregate.weight(offset))
        if run is runs[-1]:
            run.final_state = expected_totals(SCENARIO, run.end_offsets)
        return
    if not run.committed:
        run.start_offsets[s] = 0
        run.end_offsets[s] = lengths[s]
        run.committed = _committed(aggregate, run.start_offsets, run.end_offsets)
    i = data.draw(st.integers(0, len(run.committed) - 1), label="row")
    key, offset, total = run.committed[i]
    if fault == "drop":
        del run.committed[i]
    elif fault == "duplicate":
        run.committed.insert(i + 1, (key, offset, total + aggregate.weight(offset)))
    elif fault == "wrong-total":
        run.committed[i] = (key, offset, total + 1)
    elif fault == "swap":
        same = [j for j in range(len(run.committed)) if run.committed[j][0] == key]
        if len(same) < 2:
            run.committed.insert(i + 1, (key, offset, total))  # a duplicate then
            return
        a, b = same[0], same[1]
        run.committed[a], run.committed[b] = run.committed[b], run.committed[a]
