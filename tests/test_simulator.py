"""The barrier simulator on the real coordinator and backends (chapter SIM)."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import fsspec
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from statecert.reference.coordinator.settings import CheckpointingMode
from statecert.reference.simulator.job_spec import Fault, JobSpec, SimulationSpecError, load_job_spec, to_toml
from statecert.reference.simulator.runtime import Simulation
from statecert.spec.errors import CheckpointFormatError, UnsupportedSnapshotError

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "scenarios" / "simulator"


def run(spec: JobSpec, seed: int, tmp_path: Path) -> dict[str, Any]:
    workdir = tmp_path / f"run-{seed}-{spec.checkpointing.mode.value}-{len(list(tmp_path.iterdir()))}"
    workdir.mkdir()
    return Simulation(spec, seed, workdir).run()


def with_mode(spec: JobSpec, mode: CheckpointingMode, **changes: Any) -> JobSpec:
    return dataclasses.replace(spec, checkpointing=dataclasses.replace(spec.checkpointing, mode=mode), **changes)


@pytest.mark.requirement("SIM-1")
def test_same_file_and_seed_give_identical_reports(tmp_path: Path) -> None:
    outputs = []
    for seed in (7, 7, 8):
        path = tmp_path / f"r{len(outputs)}.json"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "statecert.cli.main",
                "simulate",
                str(JOBS / "crash-aligned.toml"),
                "--seed",
                str(seed),
                "--report",
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(path.read_bytes())
    assert outputs[0] == outputs[1], "same file and seed must give byte-identical reports"
    assert outputs[0] != outputs[2], "another seed must give another schedule"


@pytest.mark.requirement("SIM-2")
@pytest.mark.parametrize("mode", [CheckpointingMode.EXACTLY_ONCE, CheckpointingMode.UNALIGNED])
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_exactly_once_after_task_crash(tmp_path: Path, mode: CheckpointingMode, backend: str, seed: int) -> None:
    spec = with_mode(load_job_spec(JOBS / "crash-aligned.toml"), mode, backend=backend)
    report = run(spec, seed, tmp_path)
    assert report["terminated"] and report["failovers"], report["failovers"]
    assert report["checks"]["exactly_once"], f"{mode.value}/{backend}/seed {seed}: {report['checks']}"


@pytest.mark.requirement("SIM-3")
def test_at_least_once_with_a_failure_reports_duplicates(tmp_path: Path) -> None:
    spec = with_mode(load_job_spec(JOBS / "crash-aligned.toml"), CheckpointingMode.AT_LEAST_ONCE)
    duplicated = [run(spec, seed, tmp_path)["checks"]["duplicated"] for seed in (1, 2, 3, 4)]
    assert any(d > 0 for d in duplicated), f"no duplicates in at-least-once mode with a failure: {duplicated}"
    clean = run(dataclasses.replace(spec, faults=()), 1, tmp_path)
    assert clean["checks"]["exactly_once"], "without a failure nothing is replayed"


@pytest.mark.requirement("SIM-2", "SIM-3", "SIM-9")
@pytest.mark.parametrize(
    "backend,mode,status,printed",
    [
        ("hashmap", "exactly-once", 0, None),
        ("hashmap", "at-least-once", 0, None),  # duplicates are at-least-once's (SIM-3): not a failure
        ("tests.broken_backends:operator_update_appends", "exactly-once", 1, "duplicated"),
        ("tests.broken_backends:changelog_ignores_log", "exactly-once", 1, "wrong counts"),
    ],
)
def test_simulate_exits_1_when_a_check_fails(
    tmp_path: Path, backend: str, mode: str, status: int, printed: str | None
) -> None:
    """`statecert simulate` exits 0 only when the run terminated and every check held: its output exactly-once (with
    at-least-once checkpoints, nothing lost) and no checker violation; it exited 0 on a run with 120 wrong running
    totals, and did not print them."""
    job = (JOBS / "crash-aligned.toml").read_text(encoding="utf-8").replace('"hashmap"', f'"{backend}"')
    job = job.replace('mode = "exactly-once"', f'mode = "{mode}"')
    (tmp_path / "job.toml").write_text(job, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", "simulate", str(tmp_path / "job.toml"), "--seed", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == status, f"expected exit status {status}, got {done.returncode}: {done.stdout}"
    if printed is not None:
        assert printed in done.stdout, done.stdout


@pytest.mark.requirement("SIM-4", "COORD-8")
def test_coordinator_crash_before_metadata_recovers_previous_checkpoint(tmp_path: Path) -> None:
    report = run(load_job_spec(JOBS / "coordinator-crash.toml"), 1, tmp_path)
    assert report["failovers"][0]["restored_from"] == 2, report["failovers"]
    crash = next(e["t"] for e in report["timeline"] if e["event"] == "coordinator-crash")
    before = [e["checkpoint"] for e in report["timeline"] if e["event"] == "complete" and e["t"] <= crash]
    assert before == [1, 2], "checkpoint 3 must not complete: its _metadata was never written"
    assert report["terminated"] and report["checks"]["exactly_once"], report["checks"]


@pytest.mark.requirement("SIM-5")
def test_unaligned_checkpoints_persist_overtaken_records(tmp_path: Path) -> None:
    spec = with_mode(
        load_job_spec(JOBS / "crash-aligned.toml"),
        CheckpointingMode.UNALIGNED,
        latency_ms=5.0,
        latency_jitter_ms=5.0,
        processing_ms=1.0,
    )
    report = run(spec, 2, tmp_path)
    assert report["metrics"]["persisted_in_flight_bytes"] > 0
    assert report["checks"]["exactly_once"], report["checks"]


@pytest.mark.requirement("SIM-6", "ERR-2")
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[job]\nsources = 'two'\n", "job.sources: expected int"),
        ("[checkpointing]\nmode = 'sometimes'\n", "checkpointing.mode: expected one of"),
        ("[[faults]]\nkind = 'meteor'\n", "faults[0].kind: expected one of"),
        ("[[faults]]\nkind = 'task-crash'\ntask = 'counter-9'\n", "task 'counter-9'"),
        ("[jobs]\n", "unknown section(s) ['jobs']"),
        ("not toml [", "invalid TOML"),
    ],
)
def test_invalid_simulation_file(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(SimulationSpecError, match=str(path)) as caught:
        load_job_spec(path)
    assert problem in str(caught.value)
    done = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", "simulate", str(path)], capture_output=True, text=True, timeout=60
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and problem in lines[0], done.stderr


@pytest.mark.requirement("ERR-2")
@pytest.mark.parametrize("option", ["--report", "--plot"])
def test_an_output_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path, option: str) -> None:
    """A report or plot under a regular file was found only after the simulation, as an OSError without the option's
    name; it is one line naming the option before anything runs, and nothing is written."""
    (tmp_path / "file").write_text("a file, not a directory")
    target = tmp_path / "file" / "out"
    done = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", "simulate", str(JOBS / "crash-aligned.toml"), option, str(target)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stdout + done.stderr
    assert f"argument {option}: {tmp_path / 'file'} is not a directory" in lines[0], lines[0]
    assert done.stdout == "" and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_fault_dataclass_defaults_are_harmless() -> None:
    assert Fault("task-crash").at_ms == 0.0
    assert json.dumps(dataclasses.asdict(Fault("task-crash")))


def spec_with(**changes: Any) -> JobSpec:
    base = load_job_spec(JOBS / "crash-aligned.toml")
    checkpointing = changes.pop("checkpointing", {})
    return dataclasses.replace(base, checkpointing=dataclasses.replace(base.checkpointing, **checkpointing), **changes)


@pytest.mark.requirement("SIM-7", "COORD-6")
def test_storage_outage_fails_checkpoints_until_failover(tmp_path: Path) -> None:
    spec = spec_with(
        faults=(Fault("storage-outage", at_ms=100, duration_ms=150),), checkpointing={"tolerable_failures": 1}
    )
    report = run(spec, 1, tmp_path)
    reasons = [e.get("reason") for e in report["timeline"] if e["event"] == "abort"]
    assert "io-error" in reasons and "io-error" in report["failovers"][0]["reason"], report["failovers"]
    assert report["terminated"] and report["checks"]["exactly_once"]


@pytest.mark.requirement("SIM-7")
def test_worker_loss_network_spike_and_slow_storage(tmp_path: Path) -> None:
    spec = spec_with(
        faults=(
            Fault("worker-loss", at_ms=150, tasks=("counter-0", "source-1")),
            Fault("network-spike", at_ms=60, duration_ms=200, extra_ms=30.0),
            Fault("storage-slowdown", at_ms=0, duration_ms=400, factor=50.0),
        ),
        backend="rocksdb",
        incremental=True,
        checkpointing={"retained": 2},
    )
    report = run(spec, 2, tmp_path)
    assert "worker with counter-0, source-1 lost" in report["failovers"][0]["reason"]
    assert report["terminated"] and report["checks"]["exactly_once"], report["checks"]
    assert report["checks"]["violations"] == [] and report["checks"]["leaked_shared_files"] == 0


def median_checkpoint_ms_without_and_with(calm: JobSpec, fault: Fault, tmp_path: Path) -> list[float]:
    """The median checkpoint duration of `calm` and of the same job with `fault` (seed 3 both times); each run
    must finish with exactly-once output."""
    durations = []
    for spec in (calm, dataclasses.replace(calm, faults=(fault,))):
        report = run(spec, 3, tmp_path)
        assert report["terminated"] and report["checks"]["exactly_once"], report["checks"]
        durations.append(report["metrics"]["checkpoint_duration_ms"]["p50"])
    return durations


@pytest.mark.requirement("SIM-7")
@pytest.mark.parametrize("mode", [CheckpointingMode.EXACTLY_ONCE, CheckpointingMode.UNALIGNED])
def test_a_network_delay_spike_slows_checkpoints_down(tmp_path: Path, mode: CheckpointingMode) -> None:
    """The same job and seed with a spike over the whole run: every message (records and barriers alike) is
    delayed, so checkpoints take longer, and the output stays exactly once."""
    spike = Fault("network-spike", at_ms=0, duration_ms=10_000, extra_ms=5.0)
    durations = median_checkpoint_ms_without_and_with(with_mode(spec_with(faults=()), mode), spike, tmp_path)
    # the barrier's last hop alone is 5 ms later (reported durations are rounded to the µs)
    assert durations[1] >= durations[0] + 4.99, f"median checkpoint duration calm vs spiked by 5 ms: {durations}"


@pytest.mark.requirement("SIM-7")
def test_a_storage_slowdown_slows_checkpoints_down(tmp_path: Path) -> None:
    """The same job and seed with storage 1,000x slower over the whole run: uploads take longer, so checkpoints do,
    and the output stays exactly once."""
    slowdown = Fault("storage-slowdown", at_ms=0, duration_ms=10_000, factor=1000.0)
    durations = median_checkpoint_ms_without_and_with(spec_with(faults=()), slowdown, tmp_path)
    assert durations[1] > 2 * durations[0], f"median checkpoint duration calm vs slowed 1,000x: {durations}"


@pytest.mark.requirement("SIM-7")
def test_restart_attempts_exhausted_fail_the_job(tmp_path: Path) -> None:
    spec = spec_with(
        restart_attempts=1,
        faults=(Fault("task-crash", at_ms=80, task="counter-0"), Fault("task-crash", at_ms=200, task="source-0")),
    )
    report = run(spec, 1, tmp_path)
    assert report["job_failed"] and not report["terminated"] and len(report["failovers"]) == 2


@pytest.mark.requirement("SIM-8")
def test_alignment_timeout_switches_to_unaligned_and_stays_exactly_once(tmp_path: Path) -> None:
    spec = spec_with(
        latency_ms=5.0, latency_jitter_ms=20.0, processing_ms=1.0, checkpointing={"alignment_timeout_ms": 1}
    )
    report = run(spec, 3, tmp_path)
    assert report["metrics"]["switched_to_unaligned"] > 0
    assert report["checks"]["exactly_once"] and report["checks"]["violations"] == [], report["checks"]


@pytest.mark.requirement("SIM-9", "COORD-2")
@pytest.mark.parametrize("mode", list(CheckpointingMode))
def test_invariants_hold_in_every_mode(tmp_path: Path, mode: CheckpointingMode) -> None:
    report = run(with_mode(spec_with(checkpointing={"max_concurrent": 1}), mode), 4, tmp_path)
    checks = report["checks"]
    assert checks["concurrency_bound_held"] and checks["max_pending_checkpoints"] <= 1
    assert checks["checkpoints_past_timeout"] == [] and checks["violations"] == [], checks


@pytest.mark.requirement("SIM-9")
def test_consistent_cut_checker_flags_at_least_once_cuts(tmp_path: Path) -> None:
    """The cut checker can fail: at-least-once snapshots include records after the barrier."""
    flagged = []
    for seed in range(1, 6):
        sim = Simulation(
            with_mode(
                spec_with(faults=(), latency_jitter_ms=5.0, checkpointing={"retained": 20}),
                CheckpointingMode.AT_LEAST_ONCE,
            ),
            seed,
            tmp_path / f"alo-{seed}",
        )
        sim.run()
        sim.spec = with_mode(sim.spec, CheckpointingMode.EXACTLY_ONCE)  # judge the cuts as exactly-once would
        sim.violations.clear()
        sim._check_cuts()
        flagged.append(any("not a consistent cut" in v for v in sim.violations))
    assert any(flagged), "at-least-once cuts were never flagged"


@pytest.mark.requirement("SIM-10")
def test_trend_aligned_duration_grows_with_backpressure_unaligned_stays_flat(tmp_path: Path) -> None:
    def p50(mode: CheckpointingMode, processing_ms: float) -> float:
        spec = with_mode(spec_with(faults=(), processing_ms=processing_ms, buffer_records=64), mode)
        return float(run(spec, 1, tmp_path)["metrics"]["checkpoint_duration_ms"]["p50"])

    aligned = p50(CheckpointingMode.EXACTLY_ONCE, 2.0) / p50(CheckpointingMode.EXACTLY_ONCE, 0.1)
    unaligned = p50(CheckpointingMode.UNALIGNED, 2.0) / p50(CheckpointingMode.UNALIGNED, 0.1)
    assert aligned > 3 * unaligned, f"aligned grew {aligned:.1f}x, unaligned {unaligned:.1f}x under backpressure"


@pytest.mark.requirement("SIM-10")
def test_trend_asynchronous_snapshots_cost_less_throughput_than_synchronous(tmp_path: Path) -> None:
    def throughput(synchronous: bool, interval: int) -> float:
        spec = spec_with(
            faults=(),
            synchronous_snapshots=synchronous,
            bandwidth_bytes_per_ms=20.0,
            checkpointing={"interval_ms": interval},
        )
        return float(run(spec, 1, tmp_path)["metrics"]["throughput_records_per_s"])

    assert throughput(False, 20) > throughput(True, 20), "stop-the-world snapshots should cost throughput"
    assert throughput(True, 20) < throughput(True, 80), "with synchronous snapshots, a shorter interval costs more"


TASKS = ["source-0", "source-1", "counter-0", "counter-1", "counter-2"]
FAULTS = st.one_of(
    st.builds(Fault, st.just("task-crash"), at_ms=st.integers(5, 400).map(float), task=st.sampled_from(TASKS)),
    st.builds(
        Fault,
        st.just("worker-loss"),
        at_ms=st.integers(5, 400).map(float),
        tasks=st.lists(st.sampled_from(TASKS), min_size=1, max_size=3, unique=True).map(tuple),
    ),
    st.builds(Fault, st.just("coordinator-crash-before-metadata"), checkpoint=st.integers(1, 6)),
    st.builds(
        Fault,
        st.just("storage-outage"),
        at_ms=st.integers(5, 400).map(float),
        duration_ms=st.integers(5, 120).map(float),
    ),
    st.builds(
        Fault,
        st.just("network-spike"),
        at_ms=st.integers(5, 400).map(float),
        duration_ms=st.integers(5, 120).map(float),
        extra_ms=st.integers(1, 30).map(float),
    ),
)


@pytest.mark.requirement("SIM-11", "SIM-2", "SIM-9")
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    faults=st.lists(FAULTS, max_size=3),
    seed=st.integers(0, 10_000),
    mode=st.sampled_from([CheckpointingMode.EXACTLY_ONCE, CheckpointingMode.UNALIGNED]),
)
def test_explored_fault_schedules_keep_exactly_once(
    tmp_path_factory: Any, faults: list[Fault], seed: int, mode: CheckpointingMode
) -> None:
    spec = with_mode(
        spec_with(faults=tuple(faults), max_time_ms=5_000.0, checkpointing={"tolerable_failures": 1}), mode
    )
    note(f"replay: save as job.toml and run `statecert simulate job.toml --seed {seed}`\n{to_toml(spec)}")
    report = Simulation(spec, seed, tmp_path_factory.mktemp("explore")).run()
    checks = report["checks"]
    assert report["terminated"], "the job did not finish"
    assert checks["exactly_once"] and checks["violations"] == [], checks


@pytest.mark.requirement("SIM-11")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(faults=st.lists(FAULTS, max_size=4), mode=st.sampled_from(list(CheckpointingMode)))
def test_replay_file_reads_back_the_same_job(
    tmp_path_factory: Any, faults: list[Fault], mode: CheckpointingMode
) -> None:
    spec = with_mode(spec_with(faults=tuple(faults)), mode)
    path = tmp_path_factory.mktemp("replay") / "job.toml"
    path.write_text(to_toml(spec))
    assert load_job_spec(path) == spec


@pytest.mark.requirement("SIM-7")
def test_failover_during_the_restart_delay_restarts_once(tmp_path: Path) -> None:
    """Regression (found by the fault exploration): a second failure before the restart made two task sets."""
    spec = spec_with(
        faults=(
            Fault("worker-loss", at_ms=14.0, tasks=("source-0",)),
            Fault("task-crash", at_ms=20.0, task="source-0"),
        ),
        max_time_ms=5_000.0,
    )
    report = run(spec, 0, tmp_path)
    assert report["terminated"] and report["checks"]["exactly_once"], report["checks"]
    assert report["checks"]["max_pending_checkpoints"] <= 1


THREE_STAGES = {"stages": 3, "processing_ms": 0.3, "sink_ms": 2.0, "buffer_records": 4}


@pytest.mark.requirement("SIM-2", "SIM-5", "SIM-9", "SIM-13")
@pytest.mark.parametrize("mode", [CheckpointingMode.EXACTLY_ONCE, CheckpointingMode.UNALIGNED])
@pytest.mark.parametrize("seed", [1, 2])
def test_three_stage_job_is_exactly_once_after_a_router_crash(
    tmp_path: Path, mode: CheckpointingMode, seed: int
) -> None:
    """Two keyed shuffles; a slow sink backs up the second, so unaligned barriers overtake records that routers
    already processed and still wait to send: those must be persisted as output channel state."""
    crash = Fault("task-crash", at_ms=200.0, task="router-1")
    report = run(with_mode(spec_with(faults=(crash,), **THREE_STAGES), mode), seed, tmp_path)
    checks = report["checks"]
    assert report["terminated"] and report["failovers"], report["failovers"]
    assert checks["exactly_once"] and checks["violations"] == [], f"{mode.value}/seed {seed}: {checks}"
    if mode is CheckpointingMode.UNALIGNED:
        assert report["metrics"]["persisted_output_records"] > 0, "no record was ever persisted as output state"


@pytest.mark.requirement("SIM-3")
def test_three_stage_job_at_least_once_with_a_failure_reports_duplicates(tmp_path: Path) -> None:
    crash = Fault("task-crash", at_ms=200.0, task="router-1")
    spec = with_mode(spec_with(faults=(crash,), **THREE_STAGES), CheckpointingMode.AT_LEAST_ONCE)
    assert run(spec, 1, tmp_path)["checks"]["duplicated"] > 0


@pytest.mark.requirement("SIM-13")
def test_three_stage_job_at_parallelism_64_completes_20_checkpoints(tmp_path: Path) -> None:
    """The scale the issue names: 64 x 64 = 4,096 channels in each of the two shuffles."""
    spec = load_job_spec(JOBS / "three-stage-parallelism-64.toml")
    assert (spec.sources, spec.stages, spec.parallelism) == (64, 3, 64)
    report = run(spec, 1, tmp_path)
    assert len(report["completed_checkpoints"]) >= 20, report["completed_checkpoints"]
    assert report["checks"]["exactly_once"] and report["checks"]["violations"] == [], report["checks"]


@pytest.mark.requirement("SIM-10")
def test_trend_incremental_upload_stays_flat_while_full_checkpoints_grow(tmp_path: Path) -> None:
    """A growing state: full checkpoints grow with it, incremental ones upload only new SST files (and the
    per-checkpoint private files), so their size stays near the change rate."""

    def uploads(incremental: bool) -> list[int]:
        spec = spec_with(
            faults=(),
            backend="rocksdb",
            incremental=incremental,
            parallelism=2,
            keys_per_source=2000,
            records_per_source=6000,
            record_interval_ms=0.2,
            processing_ms=0.02,
            file_state_size_threshold=1024,
            checkpointing={"interval_ms": 200},
        )
        return list(run(spec, 1, tmp_path)["metrics"]["uploaded_bytes"])

    def growth(sizes: list[int]) -> float:
        return statistics.median(sizes[len(sizes) // 2 :]) / sizes[0]

    full, incremental = uploads(False), uploads(True)
    assert growth(full) > 1.5 * growth(incremental), f"full {full} vs incremental {incremental}"
    assert sum(incremental[2:]) < sum(full[2:]), f"full {full} vs incremental {incremental}"


@pytest.mark.requirement("SIM-12", "COORD-7")
@pytest.mark.parametrize("backend,other", [("hashmap", "rocksdb"), ("rocksdb", "hashmap")])
def test_stop_with_savepoint_then_resume_rescaled_on_the_other_backend(
    tmp_path: Path, backend: str, other: str
) -> None:
    """Stop-with-savepoint ends the input at the savepoint, commits what preceded it; a job started from the
    canonical savepoint with another parallelism and backend goes on exactly once."""
    stop = Fault("stop-with-savepoint", at_ms=150.0)
    first = Simulation(spec_with(faults=(stop,), backend=backend), 1, tmp_path / "first")
    report = first.run()
    assert report["stopped_with_savepoint"] and report["checks"]["exactly_once"], report["checks"]
    assert report["checks"]["violations"] == [], report["checks"]
    assert first.end_offsets and sum(first.end_offsets.values()) < 600, first.end_offsets
    second = Simulation(
        spec_with(faults=(), backend=other, parallelism=5),
        1,
        tmp_path / "second",
        restore_from=first.stopped_with_savepoint,
    )
    resumed = second.run()
    assert resumed["restored"] and resumed["terminated"], resumed
    assert resumed["checks"]["exactly_once"] and resumed["checks"]["violations"] == [], resumed["checks"]
    committed = first.committed + second.committed
    assert len(committed) == 600 and len(set(committed)) == 600, "the two runs together commit every record once"


def test_a_job_whose_task_cannot_start_disposes_every_backend_it_created(tmp_path: Path) -> None:
    """When a task cannot start (here the second counter's operator state backend fails, as a damaged checkpoint
    would make it), the error propagates and the tasks already started, the failing one's keyed backend included,
    are disposed: no RocksDB instance stays open, no working directory stays in the job's local directory."""
    sim = Simulation(spec_with(faults=(), backend="rocksdb"), 1, tmp_path)
    real = sim.backend
    counters: list[object] = []

    class SecondCounterFails:
        """The job's real backend, except that the second counter's operator state backend cannot be created."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def create_operator_state_backend(self, params: Any) -> Any:
            if params.operator_id == "counter":
                counters.append(params)
                if len(counters) == 2:
                    raise CheckpointFormatError("counter-1", "damaged operator state")
            return real.create_operator_state_backend(params)

    sim.backend = SecondCounterFails()
    with pytest.raises(CheckpointFormatError, match="damaged operator state"):
        sim.run()
    local = tmp_path / "local"
    left = sorted(p.name for p in local.iterdir()) if local.exists() else []
    assert len(counters) == 2 and left == [], f"expected no working directory left, got {left}"


@pytest.mark.requirement("SIM-12", "SP-3")
def test_native_savepoint_into_the_other_backend_fails_with_the_documented_error(tmp_path: Path) -> None:
    stop = Fault("stop-with-savepoint", at_ms=150.0, native=True)
    first = Simulation(spec_with(faults=(stop,), backend="rocksdb"), 1, tmp_path / "first")
    assert first.run()["stopped_with_savepoint"]
    with pytest.raises(UnsupportedSnapshotError):
        Simulation(spec_with(faults=(), backend="hashmap"), 1, tmp_path / "second", first.stopped_with_savepoint).run()


@pytest.mark.requirement("CKP-2", "COORD-5", "COORD-11")
@pytest.mark.parametrize(
    ("changelog", "slower"),
    [(False, 500.0), (True, 5000.0)],
    ids=["rocksdb-incremental", "rocksdb-incremental-changelog"],
)
def test_checkpoints_that_expire_after_uploading_leak_no_shared_file(
    tmp_path: Path, changelog: bool, slower: float
) -> None:
    """Storage slower for 200 ms makes checkpoints expire after some tasks uploaded new shared files: the
    completions after them delete those files (CKP-2), none is left that nobody will delete, and once the run
    discards its checkpoints (COORD-11) the shared directory is empty."""
    spec = spec_with(
        faults=(Fault("storage-slowdown", at_ms=50, duration_ms=200, factor=slower),),
        backend="rocksdb",
        incremental=True,
        changelog=changelog,
        file_state_size_threshold=0,
        checkpointing={"timeout_ms": 20, "tolerable_failures": 100},
    )
    simulation = Simulation(spec, 1, tmp_path)
    report = simulation.run()
    expired = [e["checkpoint"] for e in report["timeline"] if e.get("reason") == "expired"]
    assert expired and report["completed_checkpoints"], (
        f"expired {expired}, completed {report['completed_checkpoints']}"
    )
    assert report["checks"]["exactly_once"] and report["checks"]["violations"] == [], report["checks"]
    leaked = report["checks"]["leaked_shared_files"]
    assert leaked == 0, f"CKP-2: {leaked} shared files nobody will delete: {report['checks']['violations']}"
    simulation.end_job()
    fs, shared = fsspec.core.url_to_fs(simulation.access.shared_dir)
    left = fs.find(shared) if fs.exists(shared) else []
    assert left == [], f"the run discarded its checkpoints, yet {len(left)} shared files remain: {left[:3]}"
