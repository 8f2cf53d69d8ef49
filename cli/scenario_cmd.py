"""`statecert scenario list` and `statecert scenario run FILE|NAME... --runner spark|sim`: run scenarios on the
simulator or on PySpark, with a progress display; print each verdict and write a JSON report."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from statecert.cli.arguments import factory_name, output_file, spark_master, work_directory
from statecert.cli.factories import check_backend
from statecert.scenarios.results import run_summary


def add_parser(sub: Any) -> None:
    p = sub.add_parser("scenario", help="failure, recovery, savepoint and migration scenarios (simulator or Spark)")
    actions = p.add_subparsers(dest="scenario_command", required=True)
    actions.add_parser("list", help="list the scenario library")
    run = actions.add_parser("run", help="run scenario files or library scenarios by name")
    run.add_argument("scenarios", nargs="*", help="scenario files (TOML) or library names; none with --all")
    run.add_argument("--all", action="store_true", help="run the whole library")
    run.add_argument(
        "--runner",
        choices=("sim", "spark", "flink"),
        default="sim",
        help="where to run (default sim); flink: Apache Flink itself, on its local mini-cluster (statecert[flink] and "
        "a Java 17 JDK)",
    )
    run.add_argument(
        "--backend",
        type=factory_name,
        help="the backend under test, replacing the scenarios' own (name or module:attr)",
    )
    run.add_argument(
        "--master", type=spark_master, default=None, help="Spark master (default local[2,4]: 2 cores, task retries)"
    )
    run.add_argument("--report", type=output_file, help="write the JSON report here, and a PNG summary beside it")
    run.add_argument(
        "--workdir", type=work_directory, help="keep checkpoints and savepoints here (default: a temporary directory)"
    )
    run.add_argument(
        "--checkpoint-dir",
        metavar="URL",
        help="Spark runner: all checkpoints and savepoints under this fsspec URL, which every executor reaches "
        "(s3://, gs://, hdfs://, a shared file:// mount); default: --workdir on the driver's disk",
    )
    run.add_argument(
        "--mini-batch",
        action="store_true",
        help="the running-total job reads and writes each key's state once per epoch (Spark) or checkpoint "
        "(simulator), Flink's mini-batch aggregation, instead of once per record or network buffer",
    )

    compare = actions.add_parser(
        "compare", help="run scenarios on the simulator, Spark and Flink and print the verdicts side by side"
    )
    compare.add_argument("scenarios", nargs="*", help="scenario files (TOML) or library names; none: the library")
    compare.add_argument(
        "--runners", type=_runners, default=("sim", "spark", "flink"), help="comma-separated (default sim,spark,flink)"
    )
    compare.add_argument("--master", type=spark_master, default=None, help="Spark master (default local[2,4])")
    compare.add_argument("--report", type=output_file, help="write the JSON report here")
    compare.add_argument("--workdir", type=work_directory, help="keep checkpoints and savepoints here")


def _runners(value: str) -> tuple[str, ...]:
    runners = tuple(r.strip() for r in value.split(",") if r.strip())
    unknown = [r for r in runners if r not in ("sim", "spark", "flink")]
    if not runners or unknown:
        raise argparse.ArgumentTypeError(f"expected some of sim, spark, flink, got {value!r}")
    return runners


def cannot_run(scenario: Any, runner: str) -> str | None:
    """Why `scenario` does not run on `runner`, or None."""
    if runner == "flink":
        from statecert.scenarios.flink.runner import unsupported_on_flink

        return unsupported_on_flink(scenario)
    if runner not in scenario.runners:
        return f"written for {', '.join(scenario.runners)} only (scenario.runners)"
    return None


def list_scenarios(console: Console) -> int:
    from statecert.scenarios.catalog import library

    table = Table(show_lines=False)
    table.add_column("scenario", no_wrap=True)  # names are what a user types: never cut or wrapped
    table.add_column("runners", no_wrap=True)
    table.add_column("description")
    for scenario in library():
        table.add_row(scenario.name, ", ".join(scenario.runners), scenario.description)
    console.print(table)
    return 0


def run_scenarios(args: argparse.Namespace, console: Console) -> int:
    from statecert.scenarios.catalog import library_paths, resolve
    from statecert.scenarios.loader import load_scenario

    checkpoint_dir = _checkpoint_dir(args)
    paths = library_paths() if args.all else [resolve(a) for a in args.scenarios]
    if not paths:
        raise ValueError("name scenario files or library scenarios, or pass --all")
    scenarios = [load_scenario(p) for p in paths]  # every file is checked before anything runs
    sys.path.insert(0, os.getcwd())  # a `module:attr` next to the user's project, as with certify
    # An unknown backend, or one whose factory raises, is one line before anything runs.
    if args.backend:
        check_backend(args.backend, "--backend")
    else:
        for scenario in scenarios:
            events = [event for run in scenario.runs for event in (*run.events, run.resume) if event is not None]
            named = [scenario.job.backend, *(event.backend for event in events)]
            for name in dict.fromkeys(n for n in named if n and n != "other"):
                check_backend(name, str(scenario.path))
    reasons = {s.name: cannot_run(s, args.runner) for s in scenarios}
    runnable = [s for s in scenarios if reasons[s.name] is None]
    skipped = [s.name for s in scenarios if reasons[s.name] is not None]
    spark = _spark(args.master) if args.runner == "spark" and runnable else None
    results = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with tempfile.TemporaryDirectory(prefix="statecert-scenarios-") as scratch:
        root = Path(args.workdir) if args.workdir else Path(scratch)
        with Progress(*columns, console=console, transient=True) as progress:
            bar = progress.add_task("scenarios", total=len(runnable))
            for scenario in runnable:

                def show(message: str, name: str = scenario.name) -> None:
                    progress.update(bar, description=f"{name}: {message}")

                result = _run(scenario, root / scenario.name, args, spark, show, checkpoint_dir)
                results.append(result)
                progress.advance(bar)
                verdict = "[green]passed[/green]" if result.passed else "[red]FAILED[/red]"
                console.print(f"{verdict} {scenario.name} ({args.runner}, {result.backend}, {result.seconds:.1f} s)")
                for i, run in enumerate(result.runs):
                    console.print(f"    {run_summary(i, run)}", markup=False, highlight=False)
                for failure in result.failures:
                    console.print(f"    {failure}", markup=False, highlight=False)
    for name in skipped:
        console.print(f"[yellow]skipped[/yellow] {name}: {reasons[name]}", highlight=False)
    passed = sum(r.passed for r in results)
    console.print(
        f"{passed}/{len(results)} scenarios passed on {args.runner}" + (f", {len(skipped)} skipped" if skipped else "")
    )
    if args.report:
        report = {
            "statecert": version("statecert"),
            "runner": args.runner,
            "backend": args.backend,
            "master": args.master if args.runner == "spark" else None,
            "checkpoint_dir": checkpoint_dir,
            "mini_batch": args.mini_batch,
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "skipped": skipped,
            "results": [r.to_dict() for r in results],
        }
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        from statecert.scenarios.plot import plot_results

        title = f"{passed}/{len(results)} scenarios passed on {args.runner} ({args.backend or 'their own backends'})"
        plot_results(report["results"], title, Path(args.report).with_suffix(".png"))
    return 0 if passed == len(results) else 1


def _spark(master: str | None) -> Any:
    """The Spark session; a master that parses but where Spark cannot start (no such host, a JVM that exits) is one
    line naming `--master`, not Py4J's traceback."""
    from statecert.scenarios.spark.session import DEFAULT_MASTER, spark_session

    if master is not None and master.startswith("spark://"):
        _check_standalone_master(master)
    try:
        return spark_session(master or DEFAULT_MASTER)
    except Exception as exc:  # pyspark raises its own PySparkRuntimeError, Py4J's errors or RuntimeError
        java = getattr(exc, "java_exception", None)  # Py4J's error says only which call failed; Java says why
        lines = (str(java.toString()) if java is not None else str(exc)).strip().splitlines() or [type(exc).__name__]
        raise ValueError(f"--master {master or DEFAULT_MASTER!r}: Spark could not start: {lines[0]}") from None


MASTER_CONNECT_TIMEOUT_S = 10.0
"""How long `--master spark://...` waits for a master to accept a connection before the run starts."""


def _check_standalone_master(master: str) -> None:
    """A `spark://` master none of whose hosts accepts a connection is one line naming `--master` and why, before a
    JVM starts: Spark itself retries for a minute, logs a page of Java stack traces and then reports only that its
    context was stopped."""
    problems = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":") if ":" in address else (address, "", "7077")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=MASTER_CONNECT_TIMEOUT_S).close()
            return
        except OSError as exc:
            problems.append(f"{host}:{port}: {exc.strerror or exc}")
    raise ValueError(f"--master {master!r}: no Spark master accepts connections ({'; '.join(problems)})")


def _checkpoint_dir(args: argparse.Namespace) -> str | None:
    """`--checkpoint-dir`, checked before anything runs: a URL of a file system this machine can open."""
    url: str | None = args.checkpoint_dir
    if url is None:
        return None
    if args.runner != "spark":
        raise ValueError("--checkpoint-dir: only the Spark runner takes it; the simulator keeps its state in --workdir")
    import fsspec

    from statecert.reference.storage.faulty_fs import faulty_url

    try:
        faulty_url(url)
        fsspec.core.url_to_fs(url)
    except (ValueError, ImportError) as exc:
        raise ValueError(f"--checkpoint-dir {url!r}: {str(exc).splitlines()[0]}") from None
    return url.rstrip("/")


def _run(
    scenario: Any, workdir: Path, args: argparse.Namespace, spark: Any, show: Any, checkpoint_dir: str | None = None
) -> Any:
    workdir.mkdir(parents=True, exist_ok=True)
    if args.runner == "flink":
        from statecert.scenarios.flink.runner import run_on_flink

        return run_on_flink(scenario, workdir, args.backend, show)
    if args.runner == "spark":
        from statecert.scenarios.spark.runner import run_on_spark

        root = f"{checkpoint_dir}/{scenario.name}" if checkpoint_dir else None
        return run_on_spark(
            scenario, workdir, spark, args.backend, show, checkpoint_dir=root, mini_batch=args.mini_batch
        )
    from statecert.scenarios.sim_runner import run_on_simulator

    return run_on_simulator(scenario, workdir, args.backend, show, mini_batch=args.mini_batch)


def compare_runners(args: argparse.Namespace, console: Console) -> int:
    """Every scenario on every runner: a table of verdicts (passed, FAILED with the first failure, or why it cannot
    run there) and, with --report, the same as JSON."""
    from statecert.scenarios.catalog import library_paths, resolve
    from statecert.scenarios.loader import load_scenario

    paths = [resolve(a) for a in args.scenarios] if args.scenarios else library_paths()
    scenarios = [load_scenario(p) for p in paths]
    spark = _spark(args.master) if "spark" in args.runners else None
    verdicts: dict[str, dict[str, dict[str, Any]]] = {s.name: {} for s in scenarios}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with tempfile.TemporaryDirectory(prefix="statecert-compare-") as scratch:
        root = Path(args.workdir) if args.workdir else Path(scratch)
        with Progress(*columns, console=console, transient=True) as progress:
            bar = progress.add_task("scenarios", total=len(scenarios) * len(args.runners))
            for runner in args.runners:
                settings = argparse.Namespace(runner=runner, backend=None, mini_batch=False)
                for scenario in scenarios:
                    why = cannot_run(scenario, runner)
                    if why is not None:
                        verdicts[scenario.name][runner] = {"verdict": "cannot run", "detail": why}
                    else:

                        def show(message: str, name: str = scenario.name, where: str = runner) -> None:
                            progress.update(bar, description=f"{name} on {where}: {message}")

                        result = _run(scenario, root / runner / scenario.name, settings, spark, show)
                        verdicts[scenario.name][runner] = {
                            "verdict": "passed" if result.passed else "FAILED",
                            "detail": "; ".join(result.failures[:1]),
                            "seconds": round(result.seconds, 1),
                            "error": result.error,
                        }
                    progress.advance(bar)
    table = Table("scenario", *args.runners, show_lines=True)
    for name, row in verdicts.items():
        cells = []
        for runner in args.runners:
            v = row[runner]
            if v["verdict"] == "passed":
                cells.append(f"[green]passed[/green] ({v['seconds']} s)")
            elif v["verdict"] == "FAILED":
                cells.append(f"[red]FAILED[/red]: {v['detail']}")
            else:
                cells.append(f"[dim]cannot run: {v['detail']}[/dim]")
        table.add_row(name, *cells)
    console.print(table)
    failed = [f"{n} on {r}" for n, row in verdicts.items() for r, v in row.items() if v["verdict"] == "FAILED"]
    console.print(f"{len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    if args.report:
        report = {
            "statecert": version("statecert"),
            "runners": list(args.runners),
            "master": args.master,
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "verdicts": verdicts,
        }
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 1 if failed else 0


def scenario(args: argparse.Namespace, console: Console) -> int:
    if args.scenario_command == "list":
        return list_scenarios(console)
    if args.scenario_command == "compare":
        return compare_runners(args, console)
    return run_scenarios(args, console)
