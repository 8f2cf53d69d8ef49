"""Real process deaths on a cluster-shaped Spark master (`tox -e chaos`, not in CI): the scenario library's fault
scenarios run on `local-cluster[2,1,1024]` while this harness SIGKILLs, from outside, a Python worker or an executor
JVM of the running application at seeded moments during epochs. Each kill is a kill point; a driver run absorbs
several, and runs are repeated until the points are spent.

Verdict per run: every scenario ends exactly-once with the oracle's final state (the runner's oracle and checkers
find nothing), or it ends with a documented error; counts a scenario expects of a quiet cluster (failovers,
completed checkpoints) are not held against a run that was killed into. After every run, each checkpoint left in
the checkpoint directory (a completed one has `_metadata`) still verifies (`inspect --verify`'s checks).

    python chaos/run.py --kind worker --points 20 --report docs/data/chaos.worker.json

`--kind driver` kills the driver instead, between two epochs (once its Nth checkpoint has `_metadata`), and resumes
the scenario from the newest completed checkpoint in a new driver: one driver run and one resumed run per point.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

import psutil
from rich.console import Console
from rich.progress import Progress

from statecert.reference.format.verify import verify_checkpoint

FAULT_SCENARIOS = (
    "worker-killed",
    "repeated-failures",
    "task-failure-processing",
    "task-failure-snapshot",
    "task-failure-upload",
    "storage-outage",
)
EXPECTED_COUNTS = ("completed checkpoints, got", "failovers, got")
"""Failures that only say a count differs from what a quiet cluster gives: not violations under chaos."""


@dataclass
class Kill:
    kind: str
    pid: int
    seconds_into_run: float
    checkpoints_present: int
    """Completed checkpoints (`_metadata` written) in the checkpoint directory when the kill came."""
    kept: str | None = None
    """The copy of the newest completed checkpoint taken at the kill, verified after the run."""


@dataclass
class RunOutcome:
    run: int
    exit_status: int
    seconds: float
    kills: list[Kill] = field(default_factory=list)
    scenarios_passed: int = 0
    failovers: int = 0
    """Failovers and task retries the runs counted: the kills' effect on the job."""
    documented_errors: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    checkpoints_verified: int = 0
    checkpoints_not_restorable: list[str] = field(default_factory=list)
    failure_output: str = ""
    """Where a run with a violation failed: the driver's Python traceback in short, or its last lines."""


def targets(driver: psutil.Process, kind: str, any_moment: bool = False) -> list[psutil.Process]:
    """The application's processes of `kind` that are running a task now (mid-epoch): Python workers (forked by
    PySpark's daemon) that used CPU in the last 50 ms, or executor JVMs (`CoarseGrainedExecutorBackend`) with such
    a worker below them. An idle worker waits for its next task: killing it fails nothing. `any_moment`: every
    process of the kind, running a task or not (an executor then also dies under the driver's own queries)."""
    executors, workers = [], []
    for process in driver.children(recursive=True):
        try:
            line = " ".join(process.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "CoarseGrainedExecutorBackend" in line:
            executors.append(process)
        elif "pyspark.daemon" in line and _forked_by_the_daemon(process):
            workers.append(process)
    if any_moment:
        return workers if kind == "worker" else executors
    busy = _busy(workers)
    if kind == "worker":
        return busy
    return [e for e in executors if any(_below(w, e) for w in busy)]


def _busy(processes: list[psutil.Process]) -> list[psutil.Process]:
    def cpu(process: psutil.Process) -> float:
        try:
            times = process.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return -1.0
        return float(times.user + times.system)

    before = {p.pid: cpu(p) for p in processes}
    time.sleep(0.05)
    return [p for p in processes if before[p.pid] >= 0 and cpu(p) > before[p.pid]]


def _below(process: psutil.Process, ancestor: psutil.Process) -> bool:
    try:
        return any(parent.pid == ancestor.pid for parent in process.parents())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _forked_by_the_daemon(process: psutil.Process) -> bool:
    """A Python worker is forked by PySpark's daemon; the daemon itself is not a target."""
    try:
        parent = process.parent()
        return parent is not None and "pyspark.daemon" in " ".join(parent.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def completed_checkpoints(shared: Path) -> list[Path]:
    return sorted(p.parent for p in shared.rglob("_metadata"))


def checkpoint_number(directory: Path) -> int:
    suffix = directory.name.rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else -1


def newest_completed(shared: Path) -> Path | None:
    """The completed checkpoint (`chk-N` with `_metadata`) of the highest N, or None."""
    found = [c for c in completed_checkpoints(shared) if c.name.startswith("chk-")]
    return max(found, key=checkpoint_number, default=None)


def _newest_number(shared: Path) -> int:
    newest = newest_completed(shared)
    return -1 if newest is None else checkpoint_number(newest)


def keep_newest(shared: Path, target: Path) -> Path | None:
    """A copy of the job directory of the newest completed checkpoint (its shared files with it), taken at once so
    that the job's later retention cannot delete it before it is verified; the copied checkpoint, or None."""
    newest = newest_completed(shared)
    if newest is None:
        return None
    shutil.copytree(newest.parent, target / newest.parent.name, ignore_dangling_symlinks=True, dirs_exist_ok=True)
    return target / newest.parent.name / newest.name


def killer(
    driver: subprocess.Popen[str],
    kind: str,
    shared: Path,
    points: int,
    rng: random.Random,
    kills: list[Kill],
    kept: Path,
    any_moment: bool = False,
) -> None:
    """After the first completed checkpoint, SIGKILL one process of `kind` running a task every 2-8 s (seeded),
    `points` times or until the driver ends; a kill waits up to 20 s for a task to run (tasks run only in epochs)."""
    started = time.monotonic()
    process = psutil.Process(driver.pid)
    while driver.poll() is None and not completed_checkpoints(shared):
        time.sleep(0.2)
    while driver.poll() is None and len(kills) < points:
        time.sleep(rng.uniform(2.0, 8.0))
        deadline = time.monotonic() + 20
        while driver.poll() is None and time.monotonic() < deadline:
            found = targets(process, kind, any_moment)
            if found:
                victim = rng.choice(found)
                try:
                    victim.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    continue
                done = len(completed_checkpoints(shared))
                kill = Kill(kind, victim.pid, round(time.monotonic() - started, 1), done)
                with contextlib.suppress(OSError):  # a checkpoint subsumed while it was copied: none kept
                    copy = keep_newest(shared, kept / f"kill-{len(kills) + 1}")
                    kill.kept = str(copy) if copy else None
                kills.append(kill)
                break
            time.sleep(0.01)


def judge(report: Path, outcome: RunOutcome) -> None:
    data = json.loads(report.read_text()) if report.exists() else {"results": []}
    for result in data["results"]:
        outcome.failovers += sum(run["failovers"] for run in result["runs"])
        failures = [f for f in result["failures"] if not any(count in f for count in EXPECTED_COUNTS)]
        if result.get("error"):
            outcome.documented_errors.append(f"{result['scenario']}: {result['error']}: {result['error_message']}")
            failures = [f for f in failures if not f.startswith(("expected no error", "expected job_failed"))]
        if failures:
            outcome.violations += [f"{result['scenario']}: {f}" for f in failures]
        else:
            outcome.scenarios_passed += 1
    if not data["results"]:
        outcome.violations.append(f"no report: the driver exited with status {outcome.exit_status}")


def run_once(
    index: int, kind: str, points: int, master: str, rng: random.Random, scratch: Path, any_moment: bool = False
) -> RunOutcome:
    shared, report = scratch / f"run{index}" / "shared", scratch / f"run{index}" / "report.json"
    shared.mkdir(parents=True)
    command = scenario_command(list(FAULT_SCENARIOS), master, shared, report, scratch / f"run{index}" / "driver")
    started = time.monotonic()
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    kills: list[Kill] = []
    kept = scratch / f"run{index}" / "kept"
    thread = threading.Thread(
        target=killer, args=(driver, kind, shared, points, rng, kills, kept, any_moment), daemon=True
    )
    thread.start()
    output, _ = driver.communicate(timeout=3600)
    thread.join(timeout=30)
    outcome = RunOutcome(index, driver.returncode, round(time.monotonic() - started, 1), kills)
    judge(report, outcome)
    if outcome.violations:
        outcome.failure_output = python_failure(output)
    verify_all([*completed_checkpoints(shared), *(Path(k.kept) for k in kills if k.kept)], outcome)
    return outcome


def python_failure(output: str) -> str:
    """The driver's Python traceback in short (its frames and the exception line), else its last lines: where a run
    that ended without a report failed."""
    lines = output.strip().splitlines()
    if "Traceback (most recent call last):" in lines:
        start = len(lines) - 1 - lines[::-1].index("Traceback (most recent call last):")
        frames = [line.strip() for line in lines[start:] if line.startswith('  File "')]
        ending = next((line for line in lines[start:] if not line.startswith((" ", "\t", "Traceback"))), "")
        return " | ".join([*frames[-6:], ending[:400]])
    return " | ".join(lines[-5:])


def verify_all(checkpoints: list[Path], outcome: RunOutcome) -> None:
    for checkpoint in checkpoints:
        verdict = verify_checkpoint(str(checkpoint))
        outcome.checkpoints_verified += 1
        if not verdict.ok:
            outcome.checkpoints_not_restorable.append(f"{checkpoint}: {verdict.problems[:1]}")


def scenario_command(scenarios: list[str], master: str, shared: Path, report: Path, workdir: Path) -> list[str]:
    command = [sys.executable, "-m", "statecert.cli.main", "scenario", "run", *scenarios, "--runner", "spark"]
    command += ["--master", master, "--checkpoint-dir", f"file://{shared}", "--report", str(report)]
    return [*command, "--workdir", str(workdir)]


def resumed_scenario(name: str, pointer: Path, target: Path) -> Path:
    """The library scenario `name` as a file that starts from `pointer` (`[job] start_from`): what a new driver
    runs after the old one died."""
    text = (resources.files("statecert.scenarios") / "library" / f"{name}.toml").read_text(encoding="utf-8")
    if "\n[job]\n" not in text:
        raise SystemExit(f"chaos: scenario {name} has no [job] table to add start_from to")
    target.write_text(text.replace("\n[job]\n", f'\n[job]\nstart_from = "{pointer}"\n', 1), encoding="utf-8")
    return target


def driver_point(index: int, name: str, kill_after: int, master: str, scratch: Path) -> RunOutcome:
    """One driver kill point: scenario `name` runs until its `kill_after`-th checkpoint has its `_metadata`, then
    the driver (its Python process and the JVM it started, executors with it, as a lost driver host) gets SIGKILL;
    the newest completed checkpoint must verify, and a new driver resumes the scenario from it and must end
    exactly-once with the oracle's final state (over all the input, what the dead driver checkpointed included)."""
    base = scratch / f"driver{index}"
    shared = base / "shared"
    shared.mkdir(parents=True)
    started = time.monotonic()
    command = scenario_command([name], master, shared, base / "killed.json", base / "driver")
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while first.poll() is None and _newest_number(shared) < kill_after:  # older checkpoints are subsumed: the newest
        time.sleep(0.01)
    outcome = RunOutcome(index, -9, 0.0)
    if first.poll() is not None:
        outcome.exit_status = first.returncode
        outcome.documented_errors.append(f"{name}: ended before its checkpoint {kill_after}: no kill")
        return outcome
    done = len(completed_checkpoints(shared))
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    outcome.kills.append(Kill("driver", first.pid, round(time.monotonic() - started, 1), done))
    newest = newest_completed(shared)
    if newest is None:
        outcome.violations.append(f"{name}: no completed checkpoint left after the driver died")
        return outcome
    verify_all([newest], outcome)
    report = base / "resumed.json"
    scenario = resumed_scenario(name, newest, base / f"{name}-resumed.toml")
    second = subprocess.run(
        scenario_command([str(scenario)], master, base / "shared-resumed", report, base / "driver-resumed"),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    outcome.exit_status, outcome.seconds = second.returncode, round(time.monotonic() - started, 1)
    judge(report, outcome)
    if outcome.violations:
        outcome.failure_output = python_failure(second.stdout + second.stderr)
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kind",
        choices=("worker", "executor", "driver", "none"),
        required=True,
        help="which process to SIGKILL; none: one run of the fault scenarios without kills (the baseline)",
    )
    parser.add_argument("--points", type=int, default=20, help="kill points in all (default 20)")
    parser.add_argument(
        "--any-moment",
        action="store_true",
        help="worker, executor: kill any process of the kind, running a task or not (default: only those running one)",
    )
    parser.add_argument("--master", default="local-cluster[2,1,1024]", help="the Spark master (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the kill moments and victims")
    parser.add_argument("--max-runs", type=int, default=6, help="driver runs at most (default 6)")
    parser.add_argument("--report", type=Path, required=True, help="the JSON report")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    outcomes: list[RunOutcome] = []
    with tempfile.TemporaryDirectory(prefix="statecert-chaos-") as scratch, Progress() as progress:
        task = progress.add_task(f"SIGKILL {args.kind}", total=args.points)
        if args.kind == "driver":  # one driver run and one resumed run per kill point
            for point in range(args.points):
                name, kill_after = FAULT_SCENARIOS[point % len(FAULT_SCENARIOS)], rng.randint(1, 3)
                outcomes.append(driver_point(point + 1, name, kill_after, args.master, Path(scratch)))
                progress.update(task, completed=sum(len(o.kills) for o in outcomes))
        if args.kind == "none":
            outcomes.append(run_once(1, args.kind, 0, args.master, rng, Path(scratch)))
        while args.kind not in ("driver", "none") and sum(len(o.kills) for o in outcomes) < args.points:
            if len(outcomes) == args.max_runs:
                break
            left = args.points - sum(len(o.kills) for o in outcomes)
            outcomes.append(
                run_once(len(outcomes) + 1, args.kind, left, args.master, rng, Path(scratch), args.any_moment)
            )
            progress.update(task, completed=sum(len(o.kills) for o in outcomes))
    kills = sum(len(o.kills) for o in outcomes)
    summary = {
        "kind": args.kind,
        "targets": "the driver between two epochs"
        if args.kind == "driver"
        else "any process of the kind, running a task or not"
        if args.any_moment
        else "processes running a task",
        "master": args.master,
        "seed": args.seed,
        "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "scenarios": list(FAULT_SCENARIOS),
        "kill_points": kills,
        "runs": len(outcomes),
        "scenario_runs_exactly_once": sum(o.scenarios_passed for o in outcomes),
        "failovers": sum(o.failovers for o in outcomes),
        "documented_errors": sum(len(o.documented_errors) for o in outcomes),
        "violations": sum(len(o.violations) for o in outcomes),
        "checkpoints_verified": sum(o.checkpoints_verified for o in outcomes),
        "checkpoints_not_restorable": sum(len(o.checkpoints_not_restorable) for o in outcomes),
        "details": [asdict(o) for o in outcomes],
    }
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(summary, indent=2) + "\n")
    Console().print(
        f"{args.kind}: {kills} kill points over {len(outcomes)} runs; scenario runs exactly-once "
        f"{summary['scenario_runs_exactly_once']}, documented errors {summary['documented_errors']}, violations "
        f"{summary['violations']}; checkpoints verified {summary['checkpoints_verified']}, not restorable "
        f"{summary['checkpoints_not_restorable']}"
    )
    wanted = 0 if args.kind == "none" else args.points
    ok = kills >= wanted and not summary["violations"] and not summary["checkpoints_not_restorable"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
