"""The barrier simulator on the real coordinator and backends (chapter SIM)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statecert.reference.coordinator.settings import CheckpointingMode
from statecert.reference.simulator.job_spec import Fault, JobSpec, SimulationSpecError, load_job_spec
from statecert.reference.simulator.runtime import Simulation

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


def test_fault_dataclass_defaults_are_harmless() -> None:
    assert Fault("task-crash").at_ms == 0.0
    assert json.dumps(dataclasses.asdict(Fault("task-crash")))
