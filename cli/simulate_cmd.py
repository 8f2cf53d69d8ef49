"""`statecert simulate FILE`: run the barrier simulator on a job file, with a progress bar; print the checks and
write the JSON report (and a timeline PNG)."""

from __future__ import annotations

import argparse
import dataclasses
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
    p.add_argument("file", help="a scenario file (every run of it) or a low-level simulator job file (TOML)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the seed of every random choice (default: a scenario file's input seed, 0 for a job file)",
    )
    p.add_argument("--report", type=output_file, help="write the JSON report here")
    p.add_argument("--plot", type=output_file, help="write a timeline PNG here")


def _is_scenario(path: Path) -> bool:
    """A file with a [scenario] table; anything unreadable is left to the job-file loader to report."""
    try:
        return "scenario" in tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False


def simulate(args: argparse.Namespace, console: Console) -> int:
    from statecert.reference.simulator.job_spec import load_job_spec
    from statecert.reference.simulator.plot import plot_runs
    from statecert.reference.simulator.runtime import Simulation

    with tempfile.TemporaryDirectory(prefix="statecert-sim-") as workdir:
        if _is_scenario(Path(args.file)):
            reports, failures = _simulate_scenario(args, Path(workdir), console)
            data: dict[str, Any] = {"runs": reports, "passed": not failures, "failures": failures}
        else:
            spec = load_job_spec(args.file)
            check_backend(spec.backend, args.file)  # one whose factory raises is one line before anything runs
            columns = (
                TextColumn("simulating"),
                BarColumn(),
                TextColumn("{task.completed:.0f} ms"),
                TimeElapsedColumn(),
            )
            with Progress(*columns, console=console, transient=True) as progress:
                bar = progress.add_task("sim", total=spec.max_time_ms)
                simulation = Simulation(spec, 0 if args.seed is None else args.seed, Path(workdir), None)
                report = simulation.run(lambda now: progress.update(bar, completed=now))
            reports, data = [report], report
            failures = _print_run(report, console)
            failures += [] if report["terminated"] else ["the run did not terminate"]
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if args.plot:
        plot_runs(reports, Path(args.plot))
    return 0 if not failures else 1


def _simulate_scenario(args: argparse.Namespace, workdir: Path, console: Console) -> tuple[list[Any], list[str]]:
    """Every run of a scenario file (a resumed run starts from the previous one's savepoint or checkpoint): each
    run's report, and every expectation or check that failed."""
    from rich.markup import escape

    from statecert.scenarios.loader import load_scenario
    from statecert.scenarios.results import run_summary
    from statecert.scenarios.sim_runner import run_on_simulator

    scenario = load_scenario(args.file)
    if args.seed is not None:  # the input and the oracle's recount are drawn from the same seed
        scenario = dataclasses.replace(scenario, input=dataclasses.replace(scenario.input, seed=args.seed))
    check_backend(scenario.job.backend, args.file)
    reports: list[Any] = []
    with Progress(TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("simulating")
        result = run_on_simulator(
            scenario, workdir, progress=lambda m: progress.update(task, description=m), reports=reports
        )
    for i, (run, report) in enumerate(zip(result.runs, reports, strict=False)):
        console.print(run_summary(i, run), markup=False, highlight=False)
        _print_run(report, console)
    for failure in result.failures:
        console.print(f"[red]{escape(failure)}[/red]")
    return reports, result.failures


def _print_run(report: dict[str, Any], console: Console) -> list[str]:
    """One run's checkpoints, durations, savepoints and exactly-once checks; the problems found."""
    from rich.markup import escape

    from statecert.reference.coordinator.settings import CheckpointingMode
    from statecert.reference.simulator.checkers import output_problems, report_violations

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
    return problems
