"""`statecert simulate FILE`: run the barrier simulator on a job file, with a progress bar; print the checks and
write the JSON report (and a timeline PNG)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from statecert.cli.arguments import output_file
from statecert.cli.factories import check_backend


def add_parser(sub: Any) -> None:
    p = sub.add_parser("simulate", help="simulate the barrier protocol with faults on real backends (TOML job file)")
    p.add_argument("file", help="a scenario file (its first run) or a low-level simulator job file (TOML)")
    p.add_argument("--seed", type=int, default=0, help="the seed of every random choice (default 0)")
    p.add_argument("--report", type=output_file, help="write the JSON report here")
    p.add_argument("--plot", type=output_file, help="write a timeline PNG here")


def _is_scenario(path: Path) -> bool:
    """A file with a [scenario] table; anything unreadable is left to the job-file loader to report."""
    try:
        return "scenario" in tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False


def _job(file: str) -> tuple[Any, str | None]:
    """A simulator job file, or a scenario file (its first run: the scenario format is the simulator's input)."""
    from statecert.reference.simulator.job_spec import load_job_spec

    if _is_scenario(Path(file)):
        from statecert.scenarios.loader import load_scenario
        from statecert.scenarios.plan import run_settings
        from statecert.scenarios.sim_runner import job_spec

        scenario = load_scenario(file)
        start = str(scenario.job.start_from) if scenario.job.start_from else None
        return job_spec(scenario, 0, run_settings(scenario, None)[0]), start
    return load_job_spec(file), None


def simulate(args: argparse.Namespace, console: Console) -> int:
    from rich.markup import escape

    from statecert.reference.coordinator.settings import CheckpointingMode
    from statecert.reference.simulator.checkers import output_problems, report_violations
    from statecert.reference.simulator.plot import plot_timeline
    from statecert.reference.simulator.runtime import Simulation

    spec, restore_from = _job(args.file)
    check_backend(spec.backend, args.file)  # one whose factory raises is one line before anything runs
    with tempfile.TemporaryDirectory(prefix="statecert-sim-") as workdir:
        columns = (TextColumn("simulating"), BarColumn(), TextColumn("{task.completed:.0f} ms"), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            bar = progress.add_task("sim", total=spec.max_time_ms)
            simulation = Simulation(spec, args.seed, Path(workdir), restore_from)
            report = simulation.run(lambda now: progress.update(bar, completed=now))
    text = json.dumps(report, indent=2, sort_keys=True) + "\n"
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(text, encoding="utf-8")
    if args.plot:
        plot_timeline(report, Path(args.plot))
    checks, metrics = report["checks"], report["metrics"]
    console.print(
        f"{report['mode']}, seed {report['seed']}: {len(report['completed_checkpoints'])} checkpoints "
        f"completed, {len(report['failovers'])} failover(s), {report['sim_time_ms']} ms simulated, "
        f"terminated={report['terminated']}"
    )
    console.print(
        f"checkpoint duration p50/p90/p99: {metrics['checkpoint_duration_ms']['p50']}/"
        f"{metrics['checkpoint_duration_ms']['p90']}/{metrics['checkpoint_duration_ms']['p99']} ms"
    )
    if report["savepoints"]:
        stopped = ", the last one stopped the job" if report["stopped_with_savepoint"] else ""
        console.print(f"savepoints: {[s['id'] for s in report['savepoints']]}{stopped}")
    colour = "green" if checks["exactly_once"] else "yellow"
    if "wrong_sums" in checks:  # a window job: window results, not records
        outcome = (
            f"windows lost {checks['lost']}, duplicated {checks['duplicated']}, wrong sums {checks['wrong_sums']}, "
            f"not in the input {checks['unexpected']}"
        )
    else:
        outcome = (
            f"lost {checks['lost']}, duplicated {checks['duplicated']}, not of the run's range {checks['unexpected']}, "
            f"out of order {checks['out_of_order']}, wrong running totals {checks['wrong_counts']}"
        )
    console.print(f"[{colour}]{outcome}[/{colour}]")
    problems = output_problems(checks, report["mode"] == CheckpointingMode.AT_LEAST_ONCE.value)
    problems += report_violations(checks)
    for problem in problems:
        console.print(f"[red]{escape(problem)}[/red]")
    return 0 if report["terminated"] and not problems else 1
