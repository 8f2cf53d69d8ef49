"""Mini-batch on the simulator (SIM-15): keyed tasks bundle the buffers they take and apply a bundle to keyed
state once per key; every guarantee of the per-buffer model holds for any bundle size and latency, and without
faults the committed output is exactly the one without mini-batch."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from statecert.reference.coordinator.settings import CheckpointingMode
from statecert.reference.simulator.flink_config import with_flink_config
from statecert.reference.simulator.job_spec import Fault, JobSpec, SimulationSpecError, load_job_spec, to_toml
from statecert.reference.simulator.keyed_tasks import KeyedTask
from statecert.reference.simulator.runtime import Simulation
from statecert.spec.errors import IllegalConfigurationError
from tests.test_network_buffers import FAULTS as BUFFER_FAULTS
from tests.test_network_buffers import buffered, faults_in

MODES = [CheckpointingMode.EXACTLY_ONCE, CheckpointingMode.UNALIGNED, CheckpointingMode.AT_LEAST_ONCE]
BUNDLES = st.integers(1, 400)  # records per bundle
LATENCIES = st.sampled_from([0.0, 0.5, 4.0, 40.0])  # ms a bundle may wait (0: applied when full or at a snapshot)
BUFFERS = st.integers(1, 32)  # records per network buffer
# the network-buffer tests' faults, and crashes in the snapshot and upload phases (a bundle is applied before both)
FAULTS = st.one_of(
    BUFFER_FAULTS,
    st.builds(
        Fault,
        st.just("task-crash"),
        at_ms=st.integers(5, 300).map(float),
        task=st.just("counter-1"),
        phase=st.sampled_from(["snapshot", "upload"]),
    ),
)


def job(mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE, **changes: Any) -> JobSpec:
    """The network-buffer tests' job, bounded to 20 simulated seconds (a job that never applies its bundles ends)."""
    return buffered(mode, **{"max_time_ms": 20_000.0, **changes})


def simulate(spec: JobSpec, seed: int, workdir: Path) -> Simulation:
    simulation = Simulation(spec, seed, workdir)
    simulation.run()
    return simulation


@pytest.mark.requirement("SIM-15", "SIM-2")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bundle=BUNDLES,
    latency=LATENCIES,
    buffer=BUFFERS,
    stages=st.sampled_from([2, 3]),
    mode=st.sampled_from(MODES),
    backend=st.sampled_from(["hashmap", "rocksdb"]),
    operator=st.sampled_from(["count", "sum"]),
    seed=st.integers(0, 10_000),
)
def test_without_faults_mini_batch_commits_exactly_the_output_of_the_per_buffer_model(
    tmp_path_factory: Any,
    bundle: int,
    latency: float,
    buffer: int,
    stages: int,
    mode: CheckpointingMode,
    backend: str,
    operator: str,
    seed: int,
) -> None:
    spec = job(
        mode, stages=stages, buffer_size_records=buffer, buffer_timeout_ms=1.0, backend=backend, operator=operator
    )
    bundled = dataclasses.replace(spec, mini_batch_size=bundle, mini_batch_latency_ms=latency)
    note(f"replay: save as job.toml and run `statecert simulate job.toml --seed {seed}`\n{to_toml(bundled)}")
    plain = simulate(spec, seed, tmp_path_factory.mktemp("plain"))
    batched = simulate(bundled, seed, tmp_path_factory.mktemp("bundled"))
    report = batched.report()
    assert report["terminated"] and report["checks"]["exactly_once"], report["checks"]
    assert report["checks"]["violations"] == [], report["checks"]["violations"]
    assert sorted(batched.committed) == sorted(plain.committed), (
        f"committed (key, offset, running total) with mini_batch_size={bundle}, latency {latency} ms differs "
        "from the per-buffer model's"
    )


@pytest.mark.requirement("SIM-15", "SIM-2", "SIM-9")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bundle=BUNDLES,
    latency=LATENCIES,
    buffer=BUFFERS,
    stages=st.sampled_from([2, 3]),
    sink_ms=st.sampled_from([0.0, 0.5]),
    mode=st.sampled_from(MODES[:2]),
    faults=st.lists(FAULTS, min_size=1, max_size=2),
    seed=st.integers(0, 10_000),
)
def test_a_bundle_lost_with_its_task_is_replayed_and_every_checkpoint_is_a_consistent_cut(
    tmp_path_factory: Any,
    bundle: int,
    latency: float,
    buffer: int,
    stages: int,
    sink_ms: float,
    mode: CheckpointingMode,
    faults: list[Fault],
    seed: int,
) -> None:
    faults = faults_in(faults, stages)
    spec = job(
        mode,
        stages=stages,
        buffer_size_records=buffer,
        buffer_timeout_ms=1.0,
        sink_ms=sink_ms,
        faults=tuple(faults),
        mini_batch_size=bundle,
        mini_batch_latency_ms=latency,
    )
    note(f"replay: save as job.toml and run `statecert simulate job.toml --seed {seed}`\n{to_toml(spec)}")
    report = simulate(spec, seed, tmp_path_factory.mktemp("faults")).report()
    assert report["terminated"], "the job did not finish"
    assert report["checks"]["exactly_once"] and report["checks"]["violations"] == [], report["checks"]


@pytest.mark.requirement("SIM-15", "SIM-1")
def test_mini_batch_runs_are_deterministic_per_seed(tmp_path: Path) -> None:
    spec = job(
        CheckpointingMode.UNALIGNED, stages=3, buffer_size_records=8, mini_batch_size=50, mini_batch_latency_ms=3
    )
    first = Simulation(spec, 5, tmp_path / "a").run()
    second = Simulation(spec, 5, tmp_path / "b").run()
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


@pytest.mark.requirement("SIM-15")
def test_a_bundle_reads_each_keys_state_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bundle larger than the input, with no latency, is applied only before snapshots: at most one state read
    per key and snapshot, far fewer than the per-buffer model's reads."""
    reads = {"count": 0}
    update = KeyedTask.update

    def counting_update(task: KeyedTask, records: Any) -> None:
        read = task.aggregate.value

        def counted() -> Any:
            reads["count"] += 1
            return read()

        task.aggregate.value = counted
        try:
            update(task, records)
        finally:
            del task.aggregate.value

    monkeypatch.setattr(KeyedTask, "update", counting_update)
    results = {}
    for size in (0, 10**6):
        reads["count"] = 0
        spec = job(buffer_size_records=16, mini_batch_size=size)
        report = Simulation(spec, 1, tmp_path / str(size)).run()
        assert report["checks"]["exactly_once"], report["checks"]
        results[size] = (reads["count"], len(report["completed_checkpoints"]) + len(report["savepoints"]))
    (per_buffer, _), (bundled, snapshots) = results[0], results[10**6]
    keys = spec.sources * spec.keys_per_source
    assert bundled <= keys * (snapshots + 1), f"{bundled} state reads for {keys} keys and {snapshots} snapshots"
    assert bundled < per_buffer, f"mini-batch read state {bundled} times, the per-buffer model {per_buffer}"


@pytest.mark.requirement("SIM-15", "SIM-6")
def test_mini_batch_settings_come_from_flinks_keys_and_bad_ones_are_refused_naming_the_key(tmp_path: Path) -> None:
    enabled = {"table.exec.mini-batch.enabled": "true"}
    spec = with_flink_config(
        JobSpec(), {**enabled, "table.exec.mini-batch.allow-latency": "5 ms", "table.exec.mini-batch.size": "500"}
    )
    assert (spec.mini_batch_size, spec.mini_batch_latency_ms) == (500, 5.0)
    assert with_flink_config(JobSpec(), {"table.exec.mini-batch.size": "500"}).mini_batch_size == 0  # not enabled
    for missing, present in (("size", "allow-latency"), ("allow-latency", "size")):
        refused = re.escape(f"table.exec.mini-batch.{missing}: must be positive")
        with pytest.raises(IllegalConfigurationError, match=refused):
            with_flink_config(JobSpec(), {**enabled, f"table.exec.mini-batch.{present}": "5"})
    path = tmp_path / "job.toml"
    path.write_text("[job]\nmini_batch_size = -1\n")
    with pytest.raises(SimulationSpecError, match=r"job\.mini_batch_size"):
        load_job_spec(path)
