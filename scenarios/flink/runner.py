"""Running a scenario on Apache Flink itself (2.x, its local mini-cluster): each run is one Flink job
(`FlinkScenarioJob.java`, compiled against the Flink distribution that `statecert[flink]` installs), with Flink's
own `hashmap` or `rocksdb` backend, incremental checkpoints and the changelog backend as the scenario's `[config]`
asks, its restart strategy, savepoints, stop-with-savepoint, cancel, and resume at another parallelism or on another
backend. Epoch N is the input between the run's checkpoints N-1 and N (each source split pauses at an epoch's end
until a completed checkpoint holds it). The verdicts come from the same oracle as the other runners: the sink's
committed output (a two-phase commit per checkpoint) and the final state, read from the run's last savepoint or
retained checkpoint with statecert's reader of Flink snapshots (IF-9)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statecert.reference.flink.metadata import load_flink_checkpoint
from statecert.reference.flink.snapshot import choose_operator, entries_of, keyed_handles
from statecert.scenarios.flink.distribution import compile_job
from statecert.scenarios.model import Action, Phase, Scenario
from statecert.scenarios.plan import RunSettings, expected_error, resume_pointer, run_settings
from statecert.scenarios.results import RunResult, ScenarioResult, aggregate_of, evaluate, inputs_of
from statecert.spec.errors import ScenarioError, StateCertError, UnsupportedSnapshotError

SOURCE = Path(__file__).with_name("FlinkScenarioJob.java")
# the scenario keys the runner sets itself (the run's backend, restore path and checkpoint locations)
OWN_KEYS = (
    "state.backend.type",
    "state.backend",
    "execution.state-recovery.path",
    "execution.savepoint.path",
    "execution.checkpointing.dir",
    "state.checkpoints.dir",
    "execution.checkpointing.savepoint-dir",
    "state.savepoints.dir",
)
JOB_TIMEOUT_S = 300
# Flink's own log (warnings and errors) goes to the run's flink.log
LOG4J = """rootLogger.level = WARN
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss,SSS} %-5p %c{1} - %m%n
"""
# Flink's words when a backend is handed another backend's snapshot format (KB-RESTORE-5)
FOREIGN_SNAPSHOT = "Unexpected state handle type"


def unsupported_on_flink(scenario: Scenario) -> str | None:
    """Why the scenario cannot run on Flink through this runner, or None."""
    job = scenario.job
    if "spark" not in scenario.runners and "flink" not in scenario.runners:
        return f"written for {', '.join(scenario.runners)} only (scenario.runners)"
    if job.stages != 2:
        return "a job of more than one keyed stage runs on the simulator only"
    if job.window_ms:
        return "event-time windows are not in the Flink runner's job (a running aggregate)"
    if job.union_state:
        return "the keyed subtasks' union list state is not in the Flink runner's job"
    if job.start_from is not None:
        return "the job starts from a statecert savepoint, which Flink does not read"
    if job.serializer_version != 1 or any(r.resume and r.resume.serializer_version for r in scenario.runs):
        return "schema evolution uses statecert's record serializer, which Flink's job does not have"
    if scenario.job.backend not in ("hashmap", "rocksdb"):
        return f"backend {scenario.job.backend!r} is not one of Flink's"
    for run in scenario.runs:
        for event in run.events:
            if event.action in (Action.WORKER_KILL, Action.STORAGE_WRITE_FAILURE, Action.COORDINATOR_CRASH):
                return f"{event.action.value}: a fault inside Flink's runtime, which the runner cannot inject"
            if event.action is Action.TASK_FAILURE and event.phase is Phase.UPLOAD:
                return "a task failure in the upload phase is inside Flink's state backend"
    return None


def _flink_config(scenario: Scenario, plan: RunSettings, run_dir: Path, restore: str | None) -> dict[str, str]:
    c = scenario.checkpointing
    config = {
        "state.backend.type": plan.backend,
        "execution.checkpointing.dir": (run_dir / "checkpoints").resolve().as_uri(),
        "execution.checkpointing.savepoint-dir": (run_dir / "savepoints").resolve().as_uri(),
        "execution.checkpointing.interval": "50 ms",
        "execution.checkpointing.incremental": str(c.incremental).lower(),
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "execution.checkpointing.num-retained": str(c.retained),
        "execution.checkpointing.tolerable-failed-checkpoints": str(c.tolerable_failures),
        "execution.checkpointing.max-concurrent-checkpoints": str(c.max_concurrent),
        "state.changelog.enabled": str(plan.changelog).lower(),
        "state.changelog.periodic-materialize.interval": f"{c.materialize_interval_ms} ms",
        "dstl.dfs.base-path": (run_dir / "changelog").resolve().as_uri(),
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": str(scenario.restart_attempts),
        "restart-strategy.fixed-delay.delay": "10 ms",
        "state.backend.rocksdb.localdir": str((run_dir / "rocksdb-local").resolve()),
    }
    config.update((k, v) for k, v in scenario.config if k not in OWN_KEYS)
    if restore is not None:
        config["execution.state-recovery.path"] = restore
    return config


def _latest_checkpoint(run_dir: Path) -> str | None:
    done = [p.parent for p in (run_dir / "checkpoints").glob("*/chk-*/_metadata")]
    return str(max(done, key=lambda p: int(p.name[4:]))) if done else None


def _final_state(pointer: str) -> dict[str, int]:
    checkpoint = load_flink_checkpoint(pointer)
    operator = choose_operator(checkpoint, "aggregate")
    return {
        e.key: e.value
        for h in keyed_handles(operator)
        for e in entries_of(h, checkpoint.path, operator.max_parallelism, {"total"})
    }


def run_on_flink(
    scenario: Scenario,
    workdir: Path,
    backend: str | None = None,
    progress: Callable[[str], None] = lambda message: None,
) -> ScenarioResult:
    """Run every run of `scenario` as a Flink job; a scenario Flink cannot run raises ScenarioError saying why."""
    why = unsupported_on_flink(scenario)
    if why is not None:
        raise ScenarioError(f"{scenario.name}: cannot run on Flink: {why}")
    started = time.perf_counter()
    plans = run_settings(scenario, backend)
    for plan in plans:
        if plan.backend not in ("hashmap", "rocksdb"):
            raise ScenarioError(f"{scenario.name}: cannot run on Flink: backend {plan.backend!r} is not one of Flink's")
    result = ScenarioResult(
        scenario.name, "flink", plans[0].backend, [], expected_error=expected_error(scenario, plans)
    )
    aggregate = aggregate_of(scenario)
    inputs = inputs_of(scenario)
    names = {
        aggregate.render(aggregate.key(r.key, r.source)): aggregate.key(r.key, r.source) for s in inputs for r in s
    }
    workdir.mkdir(parents=True, exist_ok=True)
    input_file = workdir / "input.tsv"
    with input_file.open("w", encoding="utf-8") as f:
        for split, records in enumerate(inputs):
            for r in records:
                key = aggregate.render(aggregate.key(r.key, r.source))
                f.write(f"{split}\t{r.offset}\t{key}\t{aggregate.weight(r.offset)}\n")
    output_dir = workdir / "output"
    output_dir.mkdir(exist_ok=True)
    savepoints: list[str] = []
    latest: str | None = None
    restore: str | None = None
    start_offsets: dict[int, int] = {}
    previous_offsets: dict[int, dict[int, int]] = {}  # per checkpoint id of the previous run: its source offsets
    with tempfile.TemporaryDirectory(prefix="statecert-flink-job-") as classes:
        java, classpath = compile_job(SOURCE, Path(classes))
        try:
            for i, plan in enumerate(plans):
                progress(f"run {i + 1}/{len(plans)} on Flink's {plan.backend}, parallelism {plan.parallelism}")
                resume = scenario.runs[i].resume
                if resume is not None:
                    restore = resume_pointer(resume, savepoints, latest, workdir / f"moved-{i + 1}")
                    if restore is None:
                        raise ScenarioError(f"{scenario.name}: run {i + 1} has no snapshot to resume from")
                    start_offsets = _offsets_of(restore, previous_offsets)
                events = scenario.runs[i].events
                ending = [e for e in events if e.action in (Action.STOP_WITH_SAVEPOINT, Action.CANCEL)]
                run_dir = workdir / f"run-{i + 1}"
                spec = {
                    "run": str(i + 1),
                    "input": str(input_file),
                    "output_dir": str(output_dir),
                    "splits": len(inputs),
                    "lengths": [len(s) for s in inputs],
                    "parallelism": plan.parallelism,
                    "max_parallelism": scenario.job.max_parallelism,
                    "records_per_epoch": scenario.checkpointing.records_per_epoch,
                    "start_offsets": {str(s): o for s, o in start_offsets.items()},
                    "events": [
                        {
                            "action": e.action.value,
                            "epoch": e.epoch,
                            "phase": e.phase.value,
                            "task": e.task,
                            "format": e.format,
                        }
                        for e in events
                    ],
                    "savepoint_dir": (run_dir / "savepoints").resolve().as_uri(),
                    "timeout_ms": JOB_TIMEOUT_S * 1000,
                    "config": _flink_config(scenario, plan, run_dir, restore),
                }
                spec_file = run_dir / "job.json"
                run_dir.mkdir(parents=True, exist_ok=True)
                spec_file.write_text(json.dumps(spec), encoding="utf-8")
                answer = _run_job(java, classpath, spec_file, run_dir)
                if answer.get("error"):
                    raise ScenarioError(f"{scenario.name}: run {i + 1} on Flink: {answer['error']}")
                failure = str(answer.get("failure", ""))
                if answer.get("job_failed") and FOREIGN_SNAPSHOT in failure:
                    # Flink restarts the job until its attempts run out; statecert's backends refuse at once
                    raise UnsupportedSnapshotError(f"run {i + 1} on Flink's {plan.backend}: {failure}")
                offsets = {int(c): {int(s): o for s, o in by.items()} for c, by in answer["offsets"].items()}
                previous_offsets = offsets
                run_savepoints = [_pointer(p) for p in answer["savepoints"]]
                savepoints += run_savepoints
                latest = _latest_checkpoint(run_dir)
                stopped = bool(ending) and ending[0].action is Action.STOP_WITH_SAVEPOINT and bool(run_savepoints)
                if answer.get("final_savepoint"):  # the input ran out, then the job stopped with a savepoint
                    final: str | None = _pointer(answer["final_savepoint"])
                    ends = {s: len(r) for s, r in enumerate(inputs)}
                else:  # stopped with a savepoint, cancelled, or failed: its output ends at that savepoint or checkpoint
                    final = run_savepoints[-1] if stopped else latest
                    ends = _offsets_of(final, offsets) if final else dict(start_offsets)
                result.runs.append(
                    RunResult(
                        backend=plan.backend,
                        parallelism=plan.parallelism,
                        serializer_version=plan.serializer_version,
                        start_offsets=dict(start_offsets),
                        end_offsets=ends,
                        committed=_committed(output_dir, i + 1, names),
                        completed_checkpoints=int(answer["completed_checkpoints"]) + len(run_savepoints),
                        failovers=int(answer["failovers"]),
                        job_failed=bool(answer.get("job_failed")),
                        # the verdict reads the last run's (a changelog run's checkpoint is not readable: IF-9)
                        final_state=(
                            {names[k]: v for k, v in _final_state(final).items()}
                            if final is not None and i == len(plans) - 1
                            else None
                        ),
                    )
                )
                if answer.get("job_failed"):
                    break
        except StateCertError as exc:
            result.error, result.error_message = type(exc).__name__, str(exc)
    result.seconds = time.perf_counter() - started
    result.failures = evaluate(scenario, result)
    return result


def _pointer(flink_path: str) -> str:
    """A path Flink printed (`file:/tmp/...`) as a URL fsspec reads."""
    return "file://" + flink_path.removeprefix("file:") if flink_path.startswith("file:/") else flink_path


def _offsets_of(pointer: str, by_checkpoint: dict[int, dict[int, int]]) -> dict[int, int]:
    """The source offsets a Flink checkpoint or savepoint holds (its checkpoint id's, as the sources recorded them)."""
    checkpoint_id = load_flink_checkpoint(pointer).checkpoint_id
    if checkpoint_id not in by_checkpoint:
        raise ScenarioError(f"{pointer}: no source offsets recorded for checkpoint {checkpoint_id}")
    return dict(by_checkpoint[checkpoint_id])


def _committed(output_dir: Path, run: int, names: dict[str, Any]) -> list[tuple[Any, int, int]]:
    path = output_dir / f"output-{run}.tsv"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        key, _split, offset, total = line.split("\t")
        rows.append((names[key], int(offset), int(total)))
    return rows


def _run_job(java: str, classpath: str, spec_file: Path, run_dir: Path) -> dict[str, Any]:
    log = run_dir / "flink.log"
    (run_dir / "config.yaml").write_text("# the job's configuration is in job.json\n", encoding="utf-8")
    (run_dir / "log4j2.properties").write_text(LOG4J, encoding="utf-8")
    with log.open("w", encoding="utf-8") as out:
        done = subprocess.run(
            [
                java,
                f"-Dlog4j.configurationFile={run_dir / 'log4j2.properties'}",
                "-cp",
                classpath,
                "FlinkScenarioJob",
                str(spec_file),
            ],
            stdout=subprocess.PIPE,
            stderr=out,
            text=True,
            timeout=JOB_TIMEOUT_S,
            env={**os.environ, "FLINK_CONF_DIR": str(run_dir)},
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith("result ")]
    if done.returncode != 0 or not lines:
        text = log.read_text(encoding="utf-8", errors="replace").splitlines()
        cause = next((line for line in text if "Exception" in line and not line.startswith("\t")), "no output")
        raise ScenarioError(f"the Flink job of {spec_file} ended with status {done.returncode}: {cause[:300]}")
    answer: dict[str, Any] = json.loads(lines[-1].removeprefix("result "))
    return answer
