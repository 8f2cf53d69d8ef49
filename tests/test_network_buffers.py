"""Records in network buffers on the simulator (SIM-14): one message per buffer, and every guarantee of the
per-record model kept for any buffer size and timeout."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

from statecert.reference.coordinator.settings import CheckpointingMode
from statecert.reference.keyed_states import ValueStateImpl
from statecert.reference.simulator.job_spec import Fault, JobSpec, SimulationSpecError, load_job_spec, to_toml
from statecert.reference.simulator.keyed_tasks import KeyedTask
from statecert.reference.simulator.runtime import Simulation

JOBS = Path(__file__).resolve().parent.parent / "scenarios" / "simulator"


def buffered(mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE, **changes: Any) -> JobSpec:
    base = load_job_spec(JOBS / "crash-aligned.toml")
    checkpointing = dataclasses.replace(base.checkpointing, mode=mode)
    return dataclasses.replace(base, checkpointing=checkpointing, **{"faults": (), **changes})


def run(spec: JobSpec, seed: int, workdir: Path) -> dict[str, Any]:
    workdir.mkdir(parents=True)
    return Simulation(spec, seed, workdir).run()


@pytest.mark.requirement("SIM-14")
def test_a_buffer_is_one_message_and_one_record_per_buffer_is_one_message_per_record(tmp_path: Path) -> None:
    single = run(buffered(buffer_size_records=1), 1, tmp_path / "single")["metrics"]
    batched = run(buffered(buffer_size_records=32, buffer_timeout_ms=20.0), 1, tmp_path / "batched")["metrics"]
    assert single["records_processed"] == batched["records_processed"] == 600
    assert single["messages_delivered"] >= 600, f"expected a message per record, got {single['messages_delivered']}"
    assert batched["messages_delivered"] < 600 / 4, (
        f"expected about one message per 32-record buffer, got {batched['messages_delivered']} for 600 records"
    )


@pytest.mark.requirement("SIM-2", "SIM-5", "SIM-14")
def test_the_buffered_example_job_is_exactly_once_with_a_message_per_buffer(tmp_path: Path) -> None:
    spec = load_job_spec(JOBS / "buffered-three-stage.toml")
    assert (spec.stages, spec.buffer_size_records) == (3, 256)
    report = run(spec, 1, tmp_path / "r")
    checks, metrics = report["checks"], report["metrics"]
    assert report["terminated"] and report["failovers"], report["failovers"]
    assert checks["exactly_once"] and checks["violations"] == [], checks
    assert metrics["messages_delivered"] * 10 < metrics["records_processed"], (
        f"expected far fewer messages than records, got {metrics['messages_delivered']:,} messages for "
        f"{metrics['records_processed']:,} records"
    )


@pytest.mark.requirement("SIM-14")
def test_partly_filled_buffers_leave_at_the_timeout(tmp_path: Path) -> None:
    """Buffers that never fill (a buffer larger than the whole input) still leave, at the timeout or the end of
    the input, and the job finishes exactly once."""
    report = run(buffered(buffer_size_records=10_000, buffer_timeout_ms=5.0), 1, tmp_path / "r")
    assert report["terminated"] and report["checks"]["exactly_once"], report["checks"]
    assert report["metrics"]["records_processed"] == 600


@pytest.mark.requirement("SIM-1", "SIM-14")
def test_buffered_runs_are_deterministic_per_seed(tmp_path: Path) -> None:
    spec = buffered(CheckpointingMode.UNALIGNED, buffer_size_records=8, buffer_timeout_ms=3.0, sink_ms=0.5)
    reports = [json.dumps(run(spec, seed, tmp_path / f"{i}"), sort_keys=True) for i, seed in enumerate((4, 4, 5))]
    assert reports[0] == reports[1], "same job and seed must give the same report"
    assert reports[0] != reports[2], "another seed must give another schedule"


@pytest.mark.requirement("SIM-5", "SIM-14", "SIM-9")
@pytest.mark.parametrize(("stages", "sender"), [(2, "source"), (3, "router")])
def test_unaligned_barriers_overtake_open_buffers_as_output_channel_state(
    tmp_path: Path, stages: int, sender: str
) -> None:
    """A slow sink backs the shuffle up; unaligned barriers overtake the buffers a source (2 stages) or a router
    (3 stages) has not sent yet, which are persisted as its output channel state; a crash of that sender then
    restores them, exactly once."""
    spec = buffered(
        CheckpointingMode.UNALIGNED,
        stages=stages,
        buffer_size_records=16,
        buffer_timeout_ms=10.0,
        buffer_records=2,
        sink_ms=2.0 if stages == 3 else 0.5,
        faults=(Fault("task-crash", at_ms=150.0, task=f"{sender}-1"),),
    )
    report = run(spec, 1, tmp_path / "r")
    checks = report["checks"]
    assert report["metrics"]["persisted_output_records"] > 0, f"no {sender} buffer was ever persisted"
    assert report["failovers"] and report["terminated"], report["failovers"]
    assert checks["exactly_once"] and checks["violations"] == [], checks


FAULTS = st.one_of(
    st.builds(
        Fault,
        st.just("task-crash"),
        at_ms=st.integers(5, 300).map(float),
        task=st.sampled_from(["source-0", "source-1", "counter-0", "counter-2", "router-1"]),
    ),
    st.builds(Fault, st.just("coordinator-crash-before-metadata"), checkpoint=st.integers(1, 5)),
    st.builds(
        Fault,
        st.just("network-spike"),
        at_ms=st.integers(5, 300).map(float),
        duration_ms=st.integers(5, 100).map(float),
        extra_ms=st.integers(1, 20).map(float),
    ),
)


def faults_in(faults: list[Fault], stages: int) -> list[Fault]:
    """The faults whose task a job of `stages` has (only a 3-stage job has routers)."""
    return [f for f in faults if stages == 3 or not f.task.startswith("router")]


@pytest.mark.requirement("SIM-2", "SIM-9", "SIM-14")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    size=st.integers(1, 64),
    timeout=st.sampled_from([0.0, 0.5, 3.0, 25.0]),
    credits=st.integers(1, 8),
    stages=st.sampled_from([2, 3]),
    sink_ms=st.sampled_from([0.0, 0.5, 2.0]),
    mode=st.sampled_from([CheckpointingMode.EXACTLY_ONCE, CheckpointingMode.UNALIGNED]),
    faults=st.lists(FAULTS, max_size=2),
    seed=st.integers(0, 10_000),
)
@example(  # a counter failed over while replaying restored input channel state kept replaying into closed backends
    size=1,
    timeout=0.0,
    credits=2,
    stages=2,
    sink_ms=2.0,
    mode=CheckpointingMode.UNALIGNED,
    faults=[
        Fault("task-crash", at_ms=144.0, task="source-0"),
        Fault("coordinator-crash-before-metadata", checkpoint=2),
    ],
    seed=0,
)
def test_any_buffer_size_and_timeout_keep_exactly_once_and_consistent_cuts(
    tmp_path_factory: Any,
    size: int,
    timeout: float,
    credits: int,
    stages: int,
    sink_ms: float,
    mode: CheckpointingMode,
    faults: list[Fault],
    seed: int,
) -> None:
    faults = faults_in(faults, stages)
    spec = buffered(
        mode,
        stages=stages,
        buffer_size_records=size,
        buffer_timeout_ms=timeout,
        buffer_records=credits,
        sink_ms=sink_ms,
        faults=tuple(faults),
        max_time_ms=20_000.0,
    )
    note(f"replay: save as job.toml and run `statecert simulate job.toml --seed {seed}`\n{to_toml(spec)}")
    report = Simulation(spec, seed, tmp_path_factory.mktemp("buffers")).run()
    checks = report["checks"]
    assert report["terminated"], "the job did not finish"
    assert checks["exactly_once"] and checks["violations"] == [], checks


@pytest.mark.requirement("SIM-1", "SIM-14")
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    size=st.integers(2, 96),
    stages=st.sampled_from([2, 3]),
    mode=st.sampled_from([CheckpointingMode.EXACTLY_ONCE, CheckpointingMode.UNALIGNED]),
    faults=st.lists(FAULTS, max_size=1),
    operator=st.sampled_from(["count", "sum"]),
    version=st.sampled_from([1, 2]),
    seed=st.integers(0, 10_000),
)
def test_small_buffers_grouped_in_python_give_the_array_paths_state_and_report(
    tmp_path_factory: Any,
    size: int,
    stages: int,
    mode: CheckpointingMode,
    faults: list[Fault],
    operator: str,
    version: int,
    seed: int,
) -> None:
    """A keyed task groups a buffer of up to `KeyedTask.small_buffer` records by key in Python and larger ones
    with array operations: the same job and seed must write the same state values (each key's total and, in
    schema version 2, its last offset) in the same order and give a byte-identical report, whichever path each
    buffer takes (forced here by moving the threshold)."""
    spec = buffered(
        mode,
        stages=stages,
        buffer_size_records=size,
        buffer_timeout_ms=3.0,
        faults=tuple(faults_in(faults, stages)),
        operator=operator,
        serializer_version=version,
    )
    runs = []
    original = ValueStateImpl.update
    for threshold in (KeyedTask.small_buffer, 1, 1_000):
        writes: list[tuple[Any, Any]] = []

        def recording(state: ValueStateImpl, value: Any, writes: list[tuple[Any, Any]] = writes) -> None:
            writes.append((state._backend.get_current_key(), value))
            original(state, value)

        with patch.object(KeyedTask, "small_buffer", threshold), patch.object(ValueStateImpl, "update", recording):
            report = Simulation(spec, seed, tmp_path_factory.mktemp("paths")).run()
        runs.append((json.dumps(report, sort_keys=True), writes))
    assert runs[1] == runs[0] == runs[2], f"state writes or report differ by grouping path (size {size}, seed {seed})"


@pytest.mark.requirement("SIM-6", "SIM-14")
@pytest.mark.parametrize(
    ("network", "problem"),
    [
        ("buffer_size_records = 0", "buffer_size_records: expected numbers in 1..65536"),
        ("buffer_records = 0", "buffer_records and buffer_size_records"),
        ("buffer_timeout_ms = -1", "network.buffer_timeout_ms: expected 0.."),
        ("buffer_size_records = 'many'", "network.buffer_size_records: expected int"),
    ],
)
def test_invalid_buffer_settings_are_rejected_naming_the_key(tmp_path: Path, network: str, problem: str) -> None:
    path = tmp_path / "job.toml"
    path.write_text(f"[network]\n{network}\n")
    with pytest.raises(SimulationSpecError) as error:
        load_job_spec(path)
    assert str(path) in str(error.value) and problem in str(error.value), str(error.value)
