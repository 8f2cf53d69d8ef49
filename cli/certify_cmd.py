"""`statecert certify BACKEND`: run the conformance suite against a backend, with a progress bar, and print the
verdict, the violated requirements and where the report is. Exit status 0 only when nothing failed."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from statecert.cli.arguments import factory_name, int_between
from statecert.cli.factories import reported_as_one_line
from statecert.conformance.report import DEFAULTS, QUICK_PASS, level_line, shortened, undeclared


def add_parser(sub: Any) -> None:
    p = sub.add_parser("certify", help="check a state backend against the spec and write a certification report")
    p.add_argument(
        "backend",
        nargs="?",
        type=factory_name,
        help="a name from the statecert.state_backends entry points, or module:attr "
        "(default: backend in [tool.statecert] of ./pyproject.toml)",
    )
    p.add_argument(
        "--storage",
        help="checkpoint storage: filesystem (default, a temporary directory), jobmanager, "
        "or an fsspec URL such as memory://certify",
    )
    p.add_argument(
        "--storage-under-test",
        metavar="NAME",
        type=factory_name,
        help="certify a checkpoint storage against the storage contract: an entry point in "
        "statecert.checkpoint_storages or module:attr (with or without a backend)",
    )
    p.add_argument("--tier", help="comma-separated tiers: contract, model, scenarios (default: contract,model)")
    p.add_argument("--max-examples", type=int, help="hypothesis examples per property (default 25)")
    p.add_argument(
        "--seed", type=int, help="seed of every hypothesis test: the same seed gives the same report (default 0)"
    )
    p.add_argument(
        "--shrink-seconds", type=int, help="time bound on shrinking a failing example (default 30; 0 skips shrinking)"
    )
    p.add_argument(
        "--test-timeout",
        type=int,
        metavar="SECONDS",
        help="seconds each phase of a test (setup, call, teardown) may take before it fails as hung: a backend that "
        "deadlocks fails that test and the run goes on (default 600; 0: no bound)",
    )
    p.add_argument(
        "--report",
        help="write the JSON report here, and a Markdown certificate beside it (default: "
        "./statecert-report/<backend>.json, replaced by the next run of the same backend)",
    )
    p.add_argument("--xfail", help="TOML file of expected failures (known bugs), keyed by test id")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="configuration for the backend factory")
    p.add_argument(
        "--changelog",
        action="store_true",
        help="wrap the backend in the changelog state backend (state.changelog.enabled=true, materializing at "
        "every checkpoint unless --config state.changelog.periodic-materialize.interval=... says otherwise) and "
        "certify the whole contract through it",
    )
    p.add_argument(
        "--level",
        choices=("contract", "hardened", "both"),
        default="both",
        help="which verdict decides the exit status: contract (what Flink's own backends do), hardened (the contract "
        "and the hardening against damaged and hostile checkpoints), or both (the default: the hardened verdict, "
        "with the contract's beside it); every level's verdict is in the certificate",
    )
    p.add_argument(
        "--workers",
        type=int_between(1, 64),
        default=None,
        help="test processes run side by side (pytest-xdist; default: one per core, at most 4; 1 when pytest "
        "arguments ask to stop at the first failure, so that it stops at the first test that fails)",
    )
    p.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="default",
        help="quick: the inner loop while fixing a bug (the contract tier, 5 examples per property, no shrinking, "
        "without the heavy tests of limits and concurrency; explicit options win); default: the certification",
    )
    p.add_argument("--verbose", "-v", action="store_true", help="show pytest's own output instead of a progress bar")
    p.set_defaults(pytest_args=[])
    p.epilog = (
        "Arguments after -- go to pytest, e.g. statecert certify hashmap -- -k ttl, or -- --exitfirst to stop at "
        "the first failure; a run that leaves selected tests out is reported INCOMPLETE and not certified (exit 1)"
    )


PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    "quick": {"tier": "contract", "max_examples": 5, "shrink_seconds": 0},
}
"""What each `--profile` sets where the command line leaves an option unset."""

_CHANGELOG = ["state.changelog.enabled=true", "state.changelog.periodic-materialize.interval=0"]
"""What --changelog adds, before the --config values, so an explicit --config of the same key wins."""


class _ProgressPlugin:
    """Advances a rich progress bar as tests finish."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task = progress.add_task("collecting", total=None)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.progress.update(self.task, total=len(session.items), description="certifying")

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.progress.update(self.task, total=len(ids), description="certifying")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.progress.advance(self.task)


class _ReportWritten:
    """Learns where the run wrote its report: `--report`, or where the plugin chose (`./statecert-report/`)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.timed_out: list[str] = []

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from statecert.conformance.plugin import report_paths, timed_out_tests

        paths = report_paths(session.config)
        self.path = None if paths is None else paths[0]
        self.timed_out = timed_out_tests(session.config)


def certify(args: argparse.Namespace, console: Console) -> int:
    sys.path.insert(0, os.getcwd())  # a `module:attr` next to the user's project imports like with `python -m`
    from statecert.conformance.plugin import CertificationSession
    from statecert.conformance.settings import SettingsError, resolve
    from statecert.conformance.time_bound import threads_holding_exit
    from statecert.spec.errors import StateCertError

    for option, value in PROFILES[args.profile].items():
        if getattr(args, option) is None:
            setattr(args, option, value)
    cli = {
        "backend": args.backend,
        "backend_config": [*(_CHANGELOG if args.changelog else []), *(args.config or [])],
        "storage": args.storage,
        "tiers": args.tier,
        "max_examples": args.max_examples,
        "seed": args.seed,
        "xfail_file": args.xfail,
        "shrink_seconds": args.shrink_seconds,
        "storage_under_test": args.storage_under_test,
        "report": args.report,
        "test_timeout": args.test_timeout,
    }
    try:  # fail fast, in one line, on settings or a backend that cannot be loaded
        settings = resolve(cli, Path.cwd())
        if settings.backend is None and settings.storage_under_test is None:
            raise SettingsError(
                "no backend to certify: name one (statecert certify NAME) or set backend in "
                "[tool.statecert] of ./pyproject.toml (or certify a storage with --storage-under-test NAME)"
            )
        named = [repr(name) for name in (settings.backend, settings.storage_under_test) if name]
        with reported_as_one_line(" and ".join(named)):
            CertificationSession(settings)
    except (SettingsError, StateCertError, ValueError) as exc:
        Console(stderr=True).print(f"statecert: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    # The suite runs under its own settings, not the invoking project's pytest configuration; the file holding
    # them lives in a private temporary directory for the run (a fixed name in the shared one could be anyone's).
    settings_dir = tempfile.TemporaryDirectory(prefix="statecert-certify-")
    ini = Path(settings_dir.name) / "pytest.ini"
    ini.write_text("[pytest]\nconsider_namespace_packages = true\n", encoding="utf-8")
    argv = ["--pyargs", "statecert.conformance.suite", "-c", str(ini), "--rootdir", os.getcwd(), *PLUGINS]
    # Plain asserts: every suite assertion carries its own message (requirement, calls, expected, got), so
    # pytest's rewriting would only add a second rendering of it, and costs each process seconds at collection.
    argv += ["-p", "no:cacheprovider", "--import-mode=importlib", "--assert=plain"]
    if settings.report:
        argv += ["--statecert-report", str(settings.report)]
    for flag, value in (
        ("--statecert-backend", args.backend),
        ("--statecert-storage", args.storage),
        ("--statecert-tier", args.tier),
        ("--statecert-max-examples", args.max_examples),
        ("--statecert-seed", args.seed),
        ("--statecert-xfail", args.xfail),
        ("--statecert-shrink-seconds", args.shrink_seconds),
        ("--statecert-storage-under-test", args.storage_under_test),
        ("--statecert-test-timeout", args.test_timeout),
    ):
        if value is not None:
            argv += [flag, str(value)]
    for item in cli["backend_config"]:
        argv += ["--statecert-config", item]
    if args.profile == "quick":
        argv.append("--statecert-quick")
    argv += list(args.pytest_args)
    workers = args.workers or default_workers(args.pytest_args)
    if workers > 1:
        argv += ["-n", str(workers)]
    scratch = None if any(a.startswith("--basetemp") for a in args.pytest_args) else memory_scratch()
    if scratch is not None:
        argv += ["--basetemp", str(Path(scratch.name) / "tests")]
    errors = io.StringIO()  # pytest's own stderr, held back so that a usage error can be said in one line
    written = _ReportWritten()
    with (
        settings_dir,
        scratch or contextlib.nullcontext(),
        contextlib.redirect_stderr(errors),
        mock.patch.dict(os.environ, {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}),  # the workers inherit it
    ):
        if args.verbose:
            code = pytest.main(argv, plugins=[written])
        else:
            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            with Progress(*columns, console=console, transient=True) as progress:
                code = pytest.main([*argv, "-p", "no:terminal"], plugins=[_ProgressPlugin(progress), written])
    if code == pytest.ExitCode.USAGE_ERROR:
        Console(stderr=True).print(
            f"statecert: error: {_usage_problem(errors.getvalue())}", markup=False, highlight=False, soft_wrap=True
        )
        return 2
    sys.stderr.write(errors.getvalue())
    report = written.path
    if code in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.INTERRUPTED) or report is None or not report.is_file():
        console.print(f"[red]certification did not run[/red] (pytest exit {int(code)}); re-run with --verbose")
        return 2
    data = json.loads(report.read_text(encoding="utf-8"))
    print_summary(data, str(report), console)
    level = "contract" if args.level == "contract" else "hardened"
    verdict = data["levels"][level]["verdict"]
    passing = verdict in ("certified", QUICK_PASS)
    tests_passed = code == pytest.ExitCode.OK or (level == "contract" and passing)
    status = 0 if tests_passed and passing else 1
    running = threads_holding_exit() if written.timed_out else []
    if running:
        # a thread a hung test left behind may never end, and the interpreter waits for it at exit: the report is
        # written, so the run ends here
        console.print(f"{len(written.timed_out)} test(s) ran past --test-timeout; ending beside threads {running}")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


PLUGINS = ("-p", "statecert.conformance.plugin", "-p", "_hypothesis_pytestplugin", "-p", "xdist.plugin")
"""The pytest plugins a certification loads, and only these (PYTEST_DISABLE_PLUGIN_AUTOLOAD): another plugin
installed beside statecert does not take part, and pytest does not rewrite the assertions of every module of every
plugin's distribution (hypothesis's whole package, about 3 s per process where bytecode is not cached)."""


STOPPING = ("-x", "--exitfirst", "--maxfail", "--sw", "--stepwise", "--pdb", "-n", "--numprocesses")
"""pytest arguments after which the run stays in one process: a stop at the first failure (one process reaches
the first failing test first), a debugger, or the caller's own choice of workers."""


def default_workers(pytest_args: list[str]) -> int:
    """One test process per core, at most 4 (the suite's slowest tests take seconds each, so more processes wait on
    them); 1 when the pytest arguments ask to stop at a failure or name their own workers."""
    if any(a == flag or a.startswith(f"{flag}=") or (flag == "-n" and a.startswith("-n")) for a in pytest_args
           for flag in STOPPING):  # fmt: skip
        return 1
    return max(1, min(4, os.cpu_count() or 1))


MEMORY_FILE_SYSTEM = Path("/dev/shm")
SCRATCH_ROOM = 2 * 1024**3  # bytes free on the memory file system for it to be used


def memory_scratch() -> tempfile.TemporaryDirectory[str] | None:
    """A directory on the machine's memory file system for the tests' scratch, local and checkpoint directories
    (pytest's `--basetemp`), where there is one with room: a test's files go at its end, and waiting for a disk to
    store them checks nothing (certifying a disk-backed store spent most of its wall time there). Removed at the end
    of the run. `-- --basetemp DIR` puts them elsewhere."""
    if not MEMORY_FILE_SYSTEM.is_dir() or not os.access(MEMORY_FILE_SYSTEM, os.W_OK):
        return None
    if shutil.disk_usage(MEMORY_FILE_SYSTEM).free < SCRATCH_ROOM:
        return None
    return tempfile.TemporaryDirectory(prefix="statecert-certify-", dir=MEMORY_FILE_SYSTEM)


def _usage_problem(stderr: str) -> str:
    """The problem in pytest's report of a usage error (`ERROR: ...`, or argparse's `...: error: ...` between its
    usage and ini lines), as one line naming the pytest arguments it concerns."""
    lines = [line.strip() for line in stderr.splitlines()]
    for line in lines:
        if ": error: " in line:
            return "pytest arguments after --: " + line.split(": error: ", 1)[1]
    for line in lines:
        if line.startswith("ERROR: "):
            return line.removeprefix("ERROR: ")
    return "pytest refused the arguments after --"


def _configuration_line(data: dict[str, Any]) -> str:
    """Which configuration was certified, and the optional capabilities it does not declare, with how to certify a
    configuration that does (a backend such as `rocksdb` has incremental checkpoints behind a setting)."""
    config = data["options"].get("backend_config") or {}
    settings = ", ".join(f"{k}={v}" for k, v in sorted(config.items())) or DEFAULTS
    off = undeclared(data["backend"]["capabilities"])
    line = f"configuration: {settings}"
    if off:
        line += f"; not declared, so not certified: {', '.join(off)}"
        if "incremental_checkpoints" in off:
            line += " (if a setting turns incremental checkpoints on, certify that configuration too, e.g. "
            line += "--config execution.checkpointing.incremental=true)"
    return line


def print_summary(data: dict[str, Any], report: str, console: Console) -> None:
    """The verdict in a screen: what was certified; a failing run leads with the likely root cause and lists the
    other violated requirements under it, one line each (the certificate has every message in full)."""
    backend, storage = data["backend"], data.get("storage_under_test")
    contracts = ", ".join(data["contracts"])
    console.print(f"certified contracts: {contracts}; spec {data['spec_version']}, seed {data['options']['seed']}")
    if backend["name"]:
        console.print(f"backend [bold]{backend['name']}[/bold] ({backend['factory']}, version {backend['version']})")
        console.print(_configuration_line(data), markup=False, highlight=False, soft_wrap=True)
    if storage:
        name, factory, version = storage["requested"], storage["factory"], storage["version"]
        console.print(f"checkpoint storage [bold]{name}[/bold] ({factory}, version {version})")
    incomplete = data.get("incomplete")
    outcomes = ["passed", "failed", "expected-failure", *(["not-run"] if incomplete else [])]
    outcomes += ["unsupported", "skipped", "not-applicable"]
    failed = {rid: info for rid, info in data["requirements"].items() if info["outcome"] == "failed"}
    if failed:  # the table per chapter is in the certificate; the screen goes to the failures
        totals = data["summary"]["requirements"]
        console.print("requirements: " + ", ".join(f"{totals.get(o, 0)} {o}" for o in outcomes if totals.get(o)))
    else:
        table = Table(title="requirements")
        for column in ("chapter", *outcomes):
            table.add_column(column)
        for chapter, counts in data["chapters"].items():
            table.add_row(chapter, *(str(counts.get(c, 0)) for c in outcomes))
        console.print(table)
    cause = data.get("likely_root_cause")
    if cause:
        console.print(f"[red]LIKELY ROOT CAUSE[/red] (the most basic failing test): {cause['test']}")
        console.print(f"    {shortened(cause['message'], 600)}", markup=False, highlight=False, soft_wrap=True)
        if len(failed) > 1:
            console.print(f"  {len(failed)} violated requirements, most likely its consequences:")
    for rid, info in failed.items():
        first = info["failing_tests"][0] if info["failing_tests"] else {"id": "?", "message": ""}
        more = len(info["failing_tests"]) - 1
        line = f"    VIOLATED {rid} {shortened(info.get('title', ''), 60)}: {first['id']}"
        line += f" (+{more} more)" if more > 0 else ""
        if not cause or first["id"] != cause["test"]:
            line += f": {shortened(first['message'], 140)}"
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for entry in data["stale_expected_failures"]:
        console.print(f"[red]STALE expected failure[/red] (matches no test): {entry}")
    if incomplete:
        console.print(
            f"[red]INCOMPLETE[/red]: {len(incomplete['tests_not_run'])} of the {incomplete['selected']} selected tests "
            f"did not run ({incomplete['cause']}); a part of the suite certifies nothing",
            highlight=False,
        )
    if data.get("levels"):
        console.print(level_line(data["levels"]), markup=False, highlight=False, soft_wrap=True)
    colour = "green" if data["verdict"] == "certified" else "yellow" if data["verdict"] == QUICK_PASS else "red"
    console.print(
        f"[{colour}]{data['verdict'].upper()}[/{colour}]; report {report}, certificate "
        f"{Path(report).with_suffix('.md')}"
    )
