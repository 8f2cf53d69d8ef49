"""Entry point of the `statecert` command: `demo` (the main job), `certify`, `simulate`, `scenario` and `inspect`."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from importlib.metadata import version

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from statecert.cli.arguments import (
    OneLineArgumentParser,
    factory_name,
    fsspec_directory,
    fsspec_location,
    int_between,
)
from statecert.cli.factories import reported_as_one_line
from statecert.spec.errors import StateCertError

MAX_PARALLELISM = 32768  # Flink's upper bound on max parallelism (KG-3)
MAX_DEMO_RECORDS = 100_000_000


def _parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="statecert", description="Contracts and checks for state backends.")
    parser.add_argument("--version", action="version", version=f"statecert {version('statecert')}")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo",
        help="run the main job: a keyed word count that checkpoints, savepoints and "
        "restores at another parallelism, checked against a recount",
    )
    demo.add_argument(
        "--backend",
        default=None,
        type=factory_name,
        help="state backend name or module:attr (default: the loader's, hashmap)",
    )
    demo.add_argument(
        "--checkpoint-dir", default=None, type=fsspec_directory, help="fsspec URL (default: a temporary directory)"
    )
    demo.add_argument("--records", type=int_between(1, MAX_DEMO_RECORDS), default=100_000)
    demo.add_argument("--parallelism", type=int_between(1, MAX_PARALLELISM), default=4)
    demo.add_argument("--rescale-to", type=int_between(1, MAX_PARALLELISM), default=2)
    demo.add_argument("--max-parallelism", type=int_between(1, MAX_PARALLELISM), default=128)
    demo.add_argument("--seed", type=int_between(0, 2**63 - 1), default=1)

    from statecert.cli.certify_cmd import add_parser as add_certify

    add_certify(sub)

    from statecert.cli.simulate_cmd import add_parser as add_simulate

    add_simulate(sub)

    from statecert.cli.scenario_cmd import add_parser as add_scenario

    add_scenario(sub)

    from statecert.cli.config_cmd import add_parser as add_config

    add_config(sub)

    insp = sub.add_parser("inspect", help="print a checkpoint's or savepoint's metadata")
    insp.add_argument(
        "path", type=fsspec_location, help="checkpoint/savepoint directory or its _metadata file (any fsspec URL)"
    )
    insp.add_argument("--json", action="store_true", help="machine-readable output")
    insp.add_argument(
        "--verify",
        action="store_true",
        help="also read every referenced file (existence, size, checksum, content); exit status 2 on any problem",
    )
    return parser


def _inspect(args: argparse.Namespace, console: Console, err: Console) -> int:
    """Describe the checkpoint; without --verify also check that every file exists with its recorded size (cheap),
    with --verify read every file's content too (FMT-14). Exit status 2 on any problem."""
    from statecert.cli.inspect_cmd import describe_checkpoint, print_description, print_flink_description
    from statecert.reference.flink.snapshot import describe_flink_checkpoint, is_flink_snapshot
    from statecert.reference.format.verify import verify_checkpoint

    if is_flink_snapshot(args.path):  # written by Apache Flink: its own reader (a problem raises: exit status 2)
        print_flink_description(describe_flink_checkpoint(args.path, args.verify), args.json, console)
        return 0
    info = describe_checkpoint(args.path)
    with Progress(
        TextColumn("verifying" if args.verify else "checking files"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err,
        transient=True,
    ) as progress:
        bar = progress.add_task("streams", total=None)
        report = verify_checkpoint(
            args.path, lambda done, total: progress.update(bar, completed=done, total=total), args.verify
        )
    info["verified" if args.verify else "files_checked"] = {
        "streams": report.streams_checked,
        "problems": list(report.problems),
    }
    print_description(info, args.json, console)
    for problem in report.problems:
        err.print(f"statecert: error: {problem}", markup=False, highlight=False, soft_wrap=True)
    if report.ok and args.verify and not args.json:
        console.print(f"[green]verified[/green]: {report.streams_checked} state streams read, no problem")
    return 0 if report.ok else 2


def _demo(args: argparse.Namespace, console: Console) -> int:
    from statecert.reference.loader import load_checkpoint_storage, load_state_backend
    from statecert.reference.wordcount_job import run_word_count

    base = args.checkpoint_dir or tempfile.mkdtemp(prefix="statecert-demo-")
    job_config = {
        "execution.checkpointing.dir": f"{base}/checkpoints",
        "execution.checkpointing.savepoint-dir": f"{base}/savepoints",
    }
    if args.backend:
        job_config["state.backend.type"] = args.backend
    try:
        with reported_as_one_line(repr(args.backend or "hashmap"), "--backend"):
            backend = load_state_backend(job_config=job_config)
            storage = load_checkpoint_storage(job_config=job_config)
    except BaseException:  # nothing left behind: the directory made for this run goes with the error
        if not args.checkpoint_dir:
            shutil.rmtree(base, ignore_errors=True)
        raise
    console.print(f"backend [bold]{backend.name}[/bold], storage {storage.name} at {base}")
    with Progress(
        TextColumn("processing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        bar = progress.add_task("records", total=args.records)
        report = run_word_count(
            backend,
            storage,
            savepoint_dir=job_config["execution.checkpointing.savepoint-dir"],
            records=args.records,
            parallelism=args.parallelism,
            restored_parallelism=args.rescale_to,
            max_parallelism=args.max_parallelism,
            seed=args.seed,
            advance=lambda n: progress.advance(bar, n),
        )
    console.print(f"checkpoint 1: {report.checkpoint_pointer}")
    console.print(f"savepoint:    {report.savepoint_pointer} ({report.savepoint_bytes} bytes of state)")
    if args.checkpoint_dir is None:  # the temporary directory is kept, so the pointers above stay inspectable
        console.print(
            f"kept in {base}: see `statecert inspect {report.savepoint_pointer}`; delete the directory when done",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    if report.ok:
        console.print(
            f"[green]OK[/green]: {report.records} records, {report.distinct_keys} keys counted at "
            f"parallelism {report.parallelism}, restored at {report.restored_parallelism} with every "
            "count equal to a recount of the input"
        )
        return 0
    sample = dict(list(report.mismatches.items())[:5])
    console.print(f"[red]FAILED[/red]: {len(report.mismatches)} keys differ (expected, restored): {sample}")
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:  # what follows -- goes to pytest (certify)
        extra = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    parser = _parser()
    args = parser.parse_args(argv)
    args.pytest_args = extra
    if args.command == "demo":
        for option in ("parallelism", "rescale_to"):
            if getattr(args, option) > args.max_parallelism:
                parser.error(
                    f"argument --{option.replace('_', '-')}: {getattr(args, option)} exceeds --max-parallelism "
                    f"{args.max_parallelism}"
                )
    console = Console(soft_wrap=True)
    err = Console(stderr=True)
    try:
        if args.command == "demo":
            return _demo(args, console)
        if args.command == "simulate":
            from statecert.cli.simulate_cmd import simulate

            return simulate(args, console)
        if args.command == "scenario":
            from statecert.cli.scenario_cmd import scenario

            return scenario(args, console)
        if args.command == "certify":
            from statecert.cli.certify_cmd import certify

            return certify(args, console)
        if args.command == "config":
            from statecert.cli.config_cmd import config

            return config(args, console)
        return _inspect(args, console, err)
    except (StateCertError, OSError, ValueError) as exc:
        said = " ".join(str(exc).split())  # one line, whatever a library's message holds (RocksDB's run over lines)
        err.print(f"statecert: error: {said}", markup=False, highlight=False, soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
