"""Retention when a run ends, claim modes when a job starts from a snapshot, and restart strategies, through the
simulator and the scenario runner (COORD-10..13)."""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path
from typing import Any

import fsspec
import pytest

from statecert.reference.config.catalog import CHECKPOINTS_DIRECTORY, ROCKSDB_LOCAL_DIR, SAVEPOINT_DIRECTORY
from statecert.reference.coordinator.settings import ExternalizedCheckpointRetention, JobStatus
from statecert.reference.shared_state_registry import shared_files
from statecert.reference.simulator.flink_config import with_flink_config
from statecert.reference.simulator.job_spec import Fault, SimulationSpecError, load_job_spec, to_toml
from statecert.reference.simulator.runtime import Simulation
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.scenarios.catalog import resolve
from statecert.scenarios.loader import ScenarioError, load_scenario
from statecert.scenarios.sim_runner import run_on_simulator

ROOT = Path(__file__).resolve().parent.parent
BASE = load_job_spec(ROOT / "scenarios" / "simulator" / "crash-aligned.toml")
RETENTION = "execution.checkpointing.externalized-checkpoint-retention"


def _exists(pointer: str) -> bool:
    fs, path = fsspec.core.url_to_fs(pointer)
    return bool(fs.exists(path.removesuffix("/_metadata") + "/_metadata"))


@pytest.mark.requirement("COORD-11")
@pytest.mark.parametrize("retention", list(ExternalizedCheckpointRetention))
@pytest.mark.parametrize("status", list(JobStatus))
def test_retention_decides_which_endings_keep_checkpoints(
    retention: ExternalizedCheckpointRetention, status: JobStatus
) -> None:
    expected = {
        ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS: set(),
        ExternalizedCheckpointRetention.DELETE_ON_CANCELLATION: {JobStatus.FAILED, JobStatus.SUSPENDED},
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION: {
            JobStatus.FAILED,
            JobStatus.SUSPENDED,
            JobStatus.CANCELED,
        },
    }[retention]
    assert retention.retains(status) == (status in expected), (retention, status)


@pytest.mark.requirement("COORD-11", "COORD-10")
@pytest.mark.parametrize(
    ("retention", "cancel", "kept"),
    [
        ("NO_EXTERNALIZED_CHECKPOINTS", True, False),
        ("DELETE_ON_CANCELLATION", True, False),
        ("RETAIN_ON_CANCELLATION", True, True),
        ("RETAIN_ON_CANCELLATION", False, False),  # finished: discarded in every mode
    ],
)
def test_a_simulated_run_applies_retention_when_it_ends(
    tmp_path: Path, retention: str, cancel: bool, kept: bool
) -> None:
    faults = (Fault("cancel", at_ms=250.0),) if cancel else ()
    spec = with_flink_config(dataclasses.replace(BASE, faults=faults), {RETENTION: retention})
    simulation = Simulation(spec, 1, tmp_path)
    simulation.run()
    retained = [c.pointer for c in simulation.coordinator.store.retained]
    assert retained, "the run completed no checkpoint"
    discarded = simulation.end_job()
    assert all(_exists(p) == kept for p in retained), f"{retention}, cancelled={cancel}: {discarded}"
    assert (discarded == []) == kept


@pytest.mark.requirement("COORD-11", "SCN-2")
def test_resuming_from_a_checkpoint_the_ended_run_did_not_retain_is_an_error(tmp_path: Path) -> None:
    """The library's changelog-switch scenario retains checkpoints on cancellation; without that setting the
    resume from the cancelled run's checkpoint has nothing to start from, and says why."""
    path = tmp_path / "switch.toml"
    text = resolve("changelog-switch").read_text(encoding="utf-8")
    path.write_text(text.replace('"RETAIN_ON_CANCELLATION"', '"NO_EXTERNALIZED_CHECKPOINTS"'), encoding="utf-8")
    result = run_on_simulator(load_scenario(path), tmp_path / "run")
    assert result.error == "ScenarioError" and "RETAIN_ON_CANCELLATION" in result.error_message, result.error_message


@pytest.mark.requirement("COORD-13")
@pytest.mark.parametrize("claim", [True, False])
def test_claim_mode_decides_who_owns_the_snapshot_a_job_starts_from(tmp_path: Path, claim: bool) -> None:
    """An incremental RocksDB job retained on cancellation; a second job starts from its checkpoint. CLAIM: the
    checkpoint is subsumed and deleted by the new job; NO_CLAIM: every file of it survives, and the new job's
    checkpoints reference none of them."""
    first = with_flink_config(
        dataclasses.replace(BASE, backend="rocksdb", incremental=True, faults=(Fault("cancel", at_ms=250.0),)),
        {RETENTION: "RETAIN_ON_CANCELLATION", "execution.checkpointing.data-inline-threshold": "0"},
    )
    old = Simulation(first, 1, tmp_path / "first")
    old.run()
    old.end_job()
    latest = old.coordinator.latest_completed()
    assert latest is not None
    old_files = shared_files(latest.metadata)
    assert old_files, "an incremental checkpoint has shared files"
    second = with_flink_config(
        dataclasses.replace(BASE, backend="rocksdb", incremental=True),
        {
            "execution.state-recovery.path": latest.pointer,
            "execution.state-recovery.claim-mode": "CLAIM" if claim else "NO_CLAIM",
            "execution.checkpointing.data-inline-threshold": "0",
        },
    )
    new = Simulation(second, 1, tmp_path / "second")  # the same seed: the same input
    report = new.run()
    assert report["checks"]["exactly_once"] and report["restored"], report["checks"]
    if claim:
        assert not _exists(latest.pointer), "a claimed checkpoint is subsumed and discarded by the new job"
        return
    assert _exists(latest.pointer), "NO_CLAIM: the snapshot's _metadata must survive"
    survivors = [p for p in old_files if fsspec.core.url_to_fs(p)[0].exists(fsspec.core.url_to_fs(p)[1])]
    assert set(survivors) == old_files, "NO_CLAIM: no file of it is deleted"
    for checkpoint in new.coordinator.store.retained:
        assert not (shared_files(checkpoint.metadata) & old_files), "the new job's checkpoints depend on old files"


@pytest.mark.requirement("COORD-12", "SIM-7")
@pytest.mark.parametrize(
    ("config", "crashes", "failed"),
    [
        ({"restart-strategy.type": "none"}, 1, True),
        ({"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "2"}, 2, False),
        ({"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "2"}, 3, True),
        ({"restart-strategy": "failurerate", "restart-strategy.failure-rate.max-failures-per-interval": "1"}, 2, True),
        ({"restart-strategy.type": "exponential-delay"}, 3, False),
    ],
)
def test_the_restart_strategy_decides_when_the_simulated_job_fails(
    tmp_path: Path, config: dict[str, str], crashes: int, failed: bool
) -> None:
    delays = {"restart-strategy.fixed-delay.delay": "5 ms", "restart-strategy.failure-rate.delay": "5 ms"}
    delays |= {"restart-strategy.exponential-delay.initial-backoff": "5 ms"}
    faults = tuple(Fault("task-crash", at_ms=60.0 + 40 * i, task="counter-0") for i in range(crashes))
    spec = with_flink_config(dataclasses.replace(BASE, faults=faults), {**delays, **config})
    report = Simulation(spec, 3, tmp_path).run()
    assert report["job_failed"] == failed, (config, crashes, report["failovers"])
    if not failed:
        assert report["checks"]["exactly_once"], report["checks"]


@pytest.mark.requirement("COORD-12")
def test_exponential_delays_grow_between_restarts(tmp_path: Path) -> None:
    config = {
        "restart-strategy.type": "exponential-delay",
        "restart-strategy.exponential-delay.initial-backoff": "10 ms",
        "restart-strategy.exponential-delay.backoff-multiplier": "3",
        "restart-strategy.exponential-delay.jitter-factor": "0",
    }
    faults = tuple(Fault("task-crash", at_ms=60.0 + 100 * i, task="counter-0") for i in range(3))
    simulation = Simulation(with_flink_config(dataclasses.replace(BASE, faults=faults), config), 3, tmp_path)
    simulation.run()
    restarts = [e["t"] for e in simulation.timeline if e["event"] == "failover"]
    assert len(restarts) == 3
    assert simulation.restart.restarts == 3 and simulation.restart.current_ms == 90.0  # type: ignore[union-attr]


@pytest.mark.requirement("COORD-10", "SIM-6")
def test_job_files_take_a_config_table_and_round_trip(tmp_path: Path) -> None:
    text = to_toml(BASE) + (
        '\n[config]\n"execution.checkpointing.num-retained" = 3\n'
        '"execution.checkpointing.unaligned.enabled" = true\n"state.backend" = "rocksdb"\n'
    )
    path = tmp_path / "job.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.warns(DeprecationWarning, match="state.backend is deprecated"):
        spec = load_job_spec(path)
    assert spec.checkpointing.retained == 3 and spec.backend == "rocksdb"
    assert spec.checkpointing.mode.value == "unaligned"
    path.write_text(to_toml(spec), encoding="utf-8")
    assert load_job_spec(path) == spec
    path.write_text(to_toml(BASE) + '\n[config]\n"execution.checkpointing.timeout" = "soon"\n', encoding="utf-8")
    with pytest.raises(SimulationSpecError, match=r"job\.toml: \[config\]: execution\.checkpointing\.timeout: "):
        load_job_spec(path)


@pytest.mark.requirement("COORD-10", "SCN-1")
def test_scenario_config_tables_are_checked_at_load(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        '[scenario]\ndescription = "x"\n[config]\n"restart-strategy.type" = "sometimes"\n', encoding="utf-8"
    )
    with pytest.raises(ScenarioError, match=r"bad\.toml: \[config\]: restart-strategy\.type: expected one of"):
        load_scenario(path)
    path.write_text('[scenario]\ndescription = "x"\n[config]\n"state.backend.type" = "ROCKSDB"\n', encoding="utf-8")
    assert load_scenario(path).job.backend == "rocksdb"


CHOSEN_BY_THE_RUN = [
    key for option in (CHECKPOINTS_DIRECTORY, SAVEPOINT_DIRECTORY, ROCKSDB_LOCAL_DIR) for key in option.all_keys
]
FILE_KINDS = {  # a file of each kind that takes a [config] table: its sections before it, its loader, its error
    "scenario": ('[scenario]\ndescription = "x"\n', load_scenario, ScenarioError),
    "job": (to_toml(BASE), load_job_spec, SimulationSpecError),
}


def _with_config(tmp_path: Path, file: str, key: str, value: str) -> Path:
    path = tmp_path / f"{file}.toml"
    path.write_text(f'{FILE_KINDS[file][0]}\n[config]\n"{key}" = "{value}"\n', encoding="utf-8")
    return path


@pytest.mark.requirement("SCN-1")
@pytest.mark.parametrize("key", CHOSEN_BY_THE_RUN)
@pytest.mark.parametrize("file", sorted(FILE_KINDS))
def test_directories_every_run_chooses_are_refused_in_config_tables(tmp_path: Path, key: str, file: str) -> None:
    """A scenario or job file setting the checkpoint or savepoint directory or RocksDB's local directory in
    `[config]` is refused naming the file and the key: the runners choose them per run, and ignored them."""
    _, load, error = FILE_KINDS[file]
    path = _with_config(tmp_path, file, key, "/tmp/elsewhere")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(error, match=rf"{file}\.toml: \[config\]: {re.escape(key)}: not settable"):
            load(path)


@pytest.mark.requirement("SCN-1")
@pytest.mark.parametrize("file", sorted(FILE_KINDS))
def test_the_storage_key_of_a_config_table_selects_the_jobs_storage(tmp_path: Path, file: str) -> None:
    _, load, error = FILE_KINDS[file]
    key = "execution.checkpointing.storage"
    for value, expected in (("JobManager", "jobmanager"), ("filesystem", "filesystem")):
        loaded: Any = load(_with_config(tmp_path, file, key, value))
        got = loaded.job.storage if file == "scenario" else loaded.storage
        assert got == expected, f"{file} file with {key} = {value!r}: storage {got!r}"
    with pytest.raises(error, match=r"\[config\]: execution\.checkpointing\.storage: .*'s3-magic'"):
        load(_with_config(tmp_path, file, key, "s3-magic"))


def test_a_claimed_savepoint_metadata_is_read_back(tmp_path: Path) -> None:
    """A sanity check of the helper the claim test relies on: `_metadata` of a completed checkpoint exists."""
    simulation = Simulation(BASE, 1, tmp_path)
    simulation.run()
    latest = simulation.coordinator.latest_completed()
    assert latest is not None and _exists(latest.pointer) and load_checkpoint_metadata(latest.pointer)


@pytest.mark.requirement("COORD-10")
def test_checkpointing_keys_reach_the_simulators_coordinator(tmp_path: Path) -> None:
    config = {
        "execution.checkpointing.interval": "70 ms",
        "execution.checkpointing.timeout": "2 s",
        "execution.checkpointing.min-pause": "5 ms",
        "execution.checkpointing.tolerable-failed-checkpoints": "2",
        "state.checkpoints.num-retained": "4",
        "execution.checkpointing.unaligned": "true",
        "execution.checkpointing.alignment-timeout": "30 ms",
        RETENTION: "DELETE_ON_CANCELLATION",
    }
    with pytest.warns(DeprecationWarning):
        spec = with_flink_config(BASE, config)
    settings = Simulation(spec, 1, tmp_path).coordinator.settings
    assert (settings.interval_ms, settings.timeout_ms, settings.min_pause_ms) == (70, 2000, 5)
    assert (settings.tolerable_failures, settings.retained, settings.alignment_timeout_ms) == (2, 4, 30)
    assert settings.mode.value == "exactly-once" and settings.retention.value == "DELETE_ON_CANCELLATION"
