"""What both runners derive from a scenario the same way: each run's backend, parallelism and serializer version,
where a resumed run restores from (moving a savepoint first when the scenario relocates it), and which documented
error the scenario expects for the backend under test."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec

from statecert.reference.loader import load_state_backend
from statecert.reference.storage.literal_paths import move_tree
from statecert.scenarios.model import Action, Event, Scenario
from statecert.spec.errors import ScenarioError

REFERENCE_BACKENDS = ("hashmap", "rocksdb")


@dataclass(frozen=True)
class RunSettings:
    backend: str
    parallelism: int
    serializer_version: int
    changelog: bool = False


def backend_config(
    name: str,
    workdir: Path,
    incremental: bool,
    changelog: bool = False,
    materialize_interval_ms: int = 600_000,
    extra: tuple[tuple[str, str], ...] = (),
) -> dict[str, str]:
    """The job configuration that selects a backend by name (built-in, entry point or `module:attr`), wrapped in
    the changelog backend when `changelog` (CL-1), with the scenario's other Flink keys (`extra`)."""
    return {
        **dict(extra),
        "state.backend.type": name,
        "state.backend.rocksdb.localdir": str(workdir / "rocksdb-local"),
        "execution.checkpointing.incremental": str(incremental).lower(),
        "state.changelog.enabled": str(changelog).lower(),
        "state.changelog.periodic-materialize.interval": f"{materialize_interval_ms}ms",
    }


def other_backend(name: str) -> str:
    """The reference backend a scenario's `backend = "other"` means: not the job's own."""
    return "hashmap" if name == "rocksdb" else "rocksdb"


def primary_backend(scenario: Scenario, override: str | None) -> str:
    return override or scenario.job.backend


def run_settings(scenario: Scenario, override: str | None) -> list[RunSettings]:
    primary = primary_backend(scenario, override)
    current = RunSettings(primary, scenario.job.parallelism, scenario.job.serializer_version, scenario.job.changelog)
    settings = [current]
    for run in scenario.runs[1:]:
        resume = run.resume
        assert resume is not None
        backend = current.backend
        if resume.backend == "other":
            backend = other_backend(primary)
        elif resume.backend is not None:
            backend = primary if resume.backend == scenario.job.backend else resume.backend
        current = RunSettings(
            backend,
            resume.parallelism or current.parallelism,
            resume.serializer_version or current.serializer_version,
            current.changelog if resume.changelog is None else resume.changelog,
        )
        settings.append(current)
    return settings


def native_format(backend: str) -> str | None:
    """The backend's native savepoint format; None when its native savepoints are canonical."""
    loaded: Any = load_state_backend(job_config={"state.backend.type": backend})
    return loaded.capabilities.native_savepoint_format  # type: ignore[no-any-return]


def expected_error(scenario: Scenario, settings: list[RunSettings]) -> str | None:
    """The scenario's expected error, if its condition holds for these backends (SCN-4)."""
    expect = scenario.expect
    if expect.error is None or expect.error_when == "always":
        return expect.error
    for i, run in enumerate(scenario.runs[:-1]):
        savepoints = [e for e in run.events if e.action in (Action.SAVEPOINT, Action.STOP_WITH_SAVEPOINT)]
        if not savepoints or savepoints[-1].format != "native":
            continue
        writer, reader = settings[i].backend, settings[i + 1].backend
        written = native_format(writer)
        if written is not None and native_format(reader) != written:
            return expect.error
    return None


def resume_pointer(
    resume: Event, savepoints: list[str], latest_checkpoint: str | None, workdir: Path | str
) -> str | None:
    """Where a resumed run restores from: the previous run's latest savepoint or retained checkpoint, moved into
    `workdir` first when the scenario relocates it."""
    pointer = (savepoints[-1] if savepoints else None) if resume.source == "savepoint" else latest_checkpoint
    if pointer is None:
        raise ScenarioError(
            f"resume from the previous run's {resume.source}: it left none"
            + (
                " (a cancelled, stopped or finished run keeps its checkpoints only with "
                "execution.checkpointing.externalized-checkpoint-retention: RETAIN_ON_CANCELLATION, COORD-11)"
                if resume.source == "checkpoint"
                else ""
            )
        )
    if resume.relocate and pointer is not None:
        pointer = relocate(pointer, workdir)
    return pointer


def relocate(pointer: str, target: Path | str) -> str:
    """Move a savepoint directory to `target` (a user moving it elsewhere; a local path or an fsspec URL on the
    savepoint's file system); returns the new pointer."""
    fs, source = fsspec.core.url_to_fs(pointer)
    if source.rstrip("/").endswith("/_metadata"):
        source = source.rstrip("/").rsplit("/", 1)[0]
    if isinstance(target, Path):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(source, str(target))
        return str(target)
    move_tree(fs, source, fsspec.core.url_to_fs(target)[1])
    return target
