"""Mutation testing of the reference backends, of the example written from the spec alone and of the reference
checkpoint storages: how many mutants of their code the conformance suite kills; and of the reference's readers and
writers of checkpoint files, how many the repository's format tests kill.

Each mutant (see `operators.py`) replaces one module of the installed package through an import hook, and the
conformance suite's contract and model tiers run against the backend in a fresh process, stopping at the first
failure (for `format`, the repository's tests of `_metadata`, state files and hostile input run, from a checkout,
and then the storage contract certifying the reference file-system storage). A mutant is killed when the tests fail
(or the run times out); it survives when they pass.
Prints the kill rate per module and overall and every survivor; writes a JSON report and a PNG beside it.

    python mutation/run.py --backend hashmap [--jobs 2] [--report PATH]
    python mutation/run.py --backend rocksdb
    python mutation/run.py --backend operator    # the operator state backend and its stream, through the heap backend
    python mutation/run.py --backend timers      # the timer service every reference backend shares
    python mutation/run.py --backend changelog   # the changelog backend, wrapping the heap backend (its segments and
                                                 # writer first by their repository tests)
    python mutation/run.py --backend spec-only   # examples/spec-only-backend, imported from its directory
    python mutation/run.py --backend object      # tests/object_backends.py, which keeps state as objects (from a
                                                 # checkout)
    python mutation/run.py --backend sqlite      # tests/sqlite_backends.py, which keeps state in SQLite (from a
                                                 # checkout)
    python mutation/run.py --backend incremental # tests/incremental_backends.py, checkpoints incremental by key
                                                 # group (from a checkout)
    python mutation/run.py --backend storage     # the reference storages, by their repository tests and the storage
                                                 # contract
    python mutation/run.py --backend config      # the configuration layer and the loader, by their repository tests
    python mutation/run.py --backend rocksdb-settings  # RocksDB's settings from configuration, by their tests
    python mutation/run.py --backend format      # reference/format/ and the changelog segment codec, by the
                                                 # repository's format and fuzz tests and the storage contract
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from operators import Mutant, mutants_of

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {
    "hashmap": [
        "reference/heap/backend.py",
        "reference/heap/keyed_backend.py",
        "reference/heap/state_table.py",
        "reference/heap/ttl.py",
        "reference/keyed_states.py",
        "reference/keyed_backend_base.py",
        "reference/migration.py",
        "reference/snapshot_task.py",
        "reference/storage/written_streams.py",
        "reference/format/canonical.py",
    ],
    "rocksdb": [
        "reference/rocksdb/backend.py",
        "reference/rocksdb/keyed_backend.py",
        "reference/rocksdb/column_family_store.py",
        "reference/rocksdb/key_layout.py",
        "reference/rocksdb/files.py",
    ],
    # a backend written outside the reference, from the spec alone: what the suite catches in code it never saw
    "spec-only": [
        "examples/spec-only-backend/spec_only_backend.py",
        "examples/spec-only-backend/spec_only_operator_backend.py",
        "examples/spec-only-backend/spec_only_timers.py",
        "examples/spec-only-backend/spec_only_ttl.py",
        "examples/spec-only-backend/spec_only_serializers.py",
        "examples/spec-only-backend/spec_only_snapshots.py",
    ],
    # a backend keeping state as objects, serialized only by its snapshots: what the suite catches of copy-on-read and
    # deferred serialization, which no backend of the reference has
    "object": ["tests/object_backends.py"],
    # a backend keeping state in SQLite, isolating snapshots by a read transaction: what the suite catches in a
    # design none of the reference backends has
    "sqlite": ["tests/sqlite_backends.py"],
    # a heap backend whose checkpoints are incremental by key group: what the suite catches of a second incremental
    # design beside RocksDB's (the base, tracking of changes, scopes, native savepoints)
    "incremental": ["tests/incremental_backends.py"],
    # the reference checkpoint storages, certified as a storage under test by the storage contract; `_metadata`'s
    # codec is the format target's (the storages only call it)
    "storage": [
        "reference/storage/streams.py",
        "reference/storage/location.py",
        "reference/storage/filesystem.py",
        "reference/storage/jobmanager.py",
        "reference/storage/discard.py",
        "reference/storage/literal_paths.py",
    ],
    # the operator state backend and its stream, the timer service and the changelog backend, which every reference
    # backend shares: certified through the heap backend (the changelog backend wrapping it)
    "operator": ["reference/operator_state.py", "reference/format/operator_stream.py"],
    "timers": ["reference/timers/timer_queue.py", "reference/timers/timer_service.py"],
    # serializer snapshots, their compatibility and state migration (SER): certified through the heap backend, after
    # the repository's tests of the serializers (their bytes and Java hash codes are the suite's own, never a backend's)
    "migration": ["reference/migration.py", "reference/serializers.py"],
    "changelog": sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "reference" / "changelog").glob("*.py") if p.name != "__init__.py"
    ),
    # what reads and writes checkpoint files and refuses damaged or hostile ones (FMT, IF): the conformance suite
    # certifies backends and storages, so these are measured by the repository's own tests of them
    "format": [
        *sorted(
            str(p.relative_to(ROOT)) for p in (ROOT / "reference" / "format").glob("*.py") if p.name != "__init__.py"
        ),
        "reference/changelog/records.py",  # the changelog segment codec: a checkpoint file's reader too
    ],
    # the checkpoint coordinator, the completed checkpoint store and the shared state registry (COORD, CKP): no
    # backend runs them, so they are measured by the repository's tests of them
    "coordinator": [
        *sorted(
            str(p.relative_to(ROOT))
            for p in (ROOT / "reference" / "coordinator").glob("*.py")
            if p.name != "__init__.py"
        ),
        "reference/completed_checkpoint_store.py",
        "reference/shared_state_registry.py",
    ],
    # the configuration layer and the loader (CFG, LOAD): a key read with the wrong default, fallback or parser
    # configures every job wrong, so they are measured by the repository's tests of them
    "config": [
        *sorted(
            str(p.relative_to(ROOT)) for p in (ROOT / "reference" / "config").glob("*.py") if p.name != "__init__.py"
        ),
        "reference/loader.py",
    ],
    # the RocksDB backend's settings from configuration (RDB-6, RDB-8 to RDB-11): predefined options, options
    # factories, shared memory, native metrics; measured by the repository's tests of them
    "rocksdb-settings": [
        "reference/rocksdb/settings.py",
        "reference/rocksdb/predefined_options.py",
        "reference/rocksdb/options_factory.py",
        "reference/rocksdb/shared_memory.py",
        "reference/rocksdb/native_metrics.py",
    ],
    # the simulator's and the scenarios' verdicts (SIM-2, SIM-3, SIM-12, SCN): a checker that passes a wrong output
    # certifies a backend that loses or doubles records, so they are measured by the repository's tests of them
    "checkers": [
        "reference/simulator/checkers.py",
        "reference/simulator/cuts.py",
        "reference/tumbling_windows.py",
        "scenarios/results.py",
    ],
}
# Repository tests (run from this checkout) of a target: instead of the conformance suite, or before it where CONFIGS
# lists both.
REPOSITORY_TESTS = {
    # the storages' own tests first: the literal path helpers they share with the coordinator and the scenario planner
    # (which alone moves a directory), and what the contract leaves to the loader (each reference storage's defaults,
    # its settings' bounds, explicit settings over configuration); then the storage contract
    "storage": ["tests/test_literal_paths.py", "tests/test_storage.py"],
    "migration": ["tests/test_serializers.py", "tests/test_keygroups.py", "tests/test_serializer_registry.py"],
    # the changelog backend's configuration, its segments' codec, the writer's uploads and aborts, its count of
    # failed materializations, and `inspect --verify` of changelog checkpoints
    "changelog": [
        "tests/test_changelog_config.py",
        "tests/test_changelog_segments.py",
        "tests/test_changelog_writes.py",
        "tests/test_changelog_abort.py",
        "tests/test_changelog_materialization_failures.py",
        "tests/test_verify_changelog.py",
    ],
    "format": [
        "tests/test_format.py",
        "tests/test_fuzz_metadata.py",
        "tests/test_fuzz_state_files.py",
        "tests/test_hostile_corpus.py",
        "tests/test_interchange_spec.py",
        "tests/test_storage.py",
        "tests/test_changelog_segments.py",
        "tests/test_crash_consistency.py",
        "tests/test_retention_and_recovery.py",
        "tests/test_verify_changelog.py",
    ],
    "coordinator": [
        "tests/test_coordinator.py",
        "tests/test_coordinator_model.py",
        "tests/test_retention_and_recovery.py",
        "tests/test_crash_consistency.py",
        "tests/test_config.py",
        "tests/test_simulator.py",
        "tests/test_scenarios.py",
    ],
    "config": [
        "tests/test_config.py",
        "tests/test_loader.py",
        "tests/test_changelog_config.py",
        "tests/test_flink_config_table.py",
        "tests/test_flink_options.py",
    ],
    "rocksdb-settings": [
        "tests/test_rocksdb_tuning.py",
        "tests/test_config.py",
        "tests/test_loader.py",
        "tests/test_rocksdb.py",
    ],
    "checkers": [
        "tests/test_checkers.py",
        "tests/test_simulator_columns.py",
        "tests/test_tumbling_windows.py",
        "tests/test_scenarios.py",
        "tests/test_simulator.py",
    ],
}
# How the suite names each backend, and where its modules are imported from when they are not in the package.
BACKEND_ARGUMENT: dict[str, str | None] = {
    "hashmap": "hashmap",
    "rocksdb": "rocksdb",
    "spec-only": "spec_only_backend:factory",
    "object": "tests.object_backends:keeping_objects",
    "sqlite": "tests.sqlite_backends:in_sqlite",
    "incremental": "tests.incremental_backends:by_key_group",
    "operator": "hashmap",
    "timers": "hashmap",
    "migration": "hashmap",
    "changelog": "hashmap",
    "storage": None,  # certified with --statecert-storage-under-test (CONFIGS)
    "format": None,  # REPOSITORY_TESTS
    "coordinator": None,  # REPOSITORY_TESTS
    "checkers": None,  # REPOSITORY_TESTS
    "config": None,  # REPOSITORY_TESTS
    "rocksdb-settings": None,  # REPOSITORY_TESTS
}
IMPORT_PATH = {
    "spec-only": [ROOT / "examples" / "spec-only-backend"],
    "object": [ROOT],
    "sqlite": [ROOT],
    "incremental": [ROOT],
}
# Configurations each mutant is certified under; it is killed when any of them fails.
# The heap backend is also certified wrapped in the changelog backend, the only caller of its CL-9 accessors.
CONFIGS = {
    "hashmap": [[], ["--statecert-config", "state.changelog.enabled=true"]],
    "rocksdb": [[], ["--statecert-config", "execution.checkpointing.incremental=true"]],
    "spec-only": [[], ["--statecert-config", "state.changelog.enabled=true"]],
    "object": [[], ["--statecert-config", "state.changelog.enabled=true"]],
    "sqlite": [[]],
    "incremental": [[]],
    "operator": [[]],
    "timers": [[]],
    "migration": [["repository tests"], []],
    "changelog": [["repository tests"], ["--statecert-config", "state.changelog.enabled=true"]],
    # the file-system storage on the local disk and on `memory://`, where fsspec expands glob characters (CS-1)
    "storage": [
        ["repository tests"],
        ["--statecert-storage-under-test", "filesystem"],
        ["--statecert-storage-under-test", "jobmanager"],
        ["--statecert-storage-under-test", "filesystem", "--statecert-storage", "memory://statecert-mutation"],
    ],
    # the repository's tests of checkpoint files, then the storage contract certifying the reference file-system
    # storage, which exercises the same readers' path confinement (FMT-10) on its own files
    "format": [["repository tests"], ["--statecert-storage-under-test", "filesystem"]],
    "coordinator": [["repository tests"]],
    "checkers": [["repository tests"]],
    "config": [["repository tests"]],
    "rocksdb-settings": [["repository tests"]],
}

SITECUSTOMIZE = """
import importlib.machinery, os, sys

_MODULE = os.environ.get("STATECERT_MUTANT_MODULE")
_SOURCE = os.environ.get("STATECERT_MUTANT_SOURCE")


class _MutantLoader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname):
        with open(_SOURCE, encoding="utf-8") as f:
            return compile(f.read(), self.path, "exec")


class _MutantFinder:
    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.origin:
            spec.loader = _MutantLoader(name, spec.origin)
        return spec


if _MODULE and _SOURCE:
    sys.meta_path.insert(0, _MutantFinder())
"""


def module_name(path: str) -> str:
    if path.startswith("examples/"):
        return Path(path).stem  # an example's top-level module
    parts = Path(path).with_suffix("").parts
    if path.startswith("tests/"):
        return ".".join(parts)  # the checkout's test package
    return "statecert." + ".".join(parts)


def suite_command(backend: str, config: list[str], report: Path, max_examples: int) -> list[str]:
    if config == ["repository tests"]:  # one seed, so that a mutant's outcome does not depend on the run
        tests = [str(ROOT / t) for t in REPOSITORY_TESTS[backend]]
        return [sys.executable, "-m", "pytest", *tests, "--hypothesis-seed", "0", "-x", "-q", "-p", "no:cacheprovider"]
    argument = BACKEND_ARGUMENT[backend]
    return [
        sys.executable, "-m", "pytest", "--pyargs", "statecert.conformance.suite",
        *(["--statecert-backend", argument] if argument else []), *config,
        "--statecert-tier", "contract,model", "--statecert-max-examples", str(max_examples),
        "--statecert-shrink-seconds", "0", "--statecert-report", str(report),
        "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
    ]  # fmt: skip


def measured_by(backend: str) -> list[str]:
    """What each mutant of `backend` is certified by, in order: the repository's tests or the conformance suite."""
    argument = BACKEND_ARGUMENT[backend]
    return [
        "repository tests: " + ", ".join(REPOSITORY_TESTS[backend])
        if config == ["repository tests"]
        else " ".join(["conformance suite", *(["--statecert-backend", argument] if argument else []), *config])
        for config in CONFIGS[backend]
    ]


def run_suite(backend: str, workdir: Path, mutant: Mutant | None, timeout: float, max_examples: int) -> dict[str, Any]:
    """Certify under every configuration until one fails; returns the outcome and the first failing test."""
    path = [str(workdir), *map(str, IMPORT_PATH.get(backend, [])), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    # what a mutant leaves in the temporary directory (it may skip cleaning up, or be killed at its timeout) goes
    # into this run's own, removed at its end
    env["TMPDIR"] = str(workdir)
    if mutant is not None:
        fd, name = tempfile.mkstemp(prefix="mutant-", suffix=".py", dir=workdir)
        os.close(fd)
        source = Path(name)
        source.write_text(mutant.source, encoding="utf-8")
        env |= {"STATECERT_MUTANT_MODULE": module_name(mutant.module), "STATECERT_MUTANT_SOURCE": str(source)}
    started = time.monotonic()
    try:
        for config in CONFIGS[backend]:
            fd, name = tempfile.mkstemp(prefix="report-", suffix=".json", dir=workdir)
            os.close(fd)
            report = Path(name)
            # each run in a directory of its own: hypothesis keeps its example database in the working directory,
            # and one mutant's failing examples replayed for the next would make an outcome depend on the order
            try:
                with tempfile.TemporaryDirectory(dir=workdir) as cwd:
                    done = subprocess.run(
                        suite_command(backend, config, report, max_examples),
                        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                    )  # fmt: skip
            except subprocess.TimeoutExpired:
                return {"outcome": "killed", "by": f"timeout after {timeout:.0f} s", "seconds": timeout}
            if done.returncode != 0:
                by = f"pytest exit {done.returncode}"
                if report.stat().st_size:
                    failing = [t["id"] for t in json.loads(report.read_text())["tests"] if t["outcome"] == "failed"]
                    by = failing[0] if failing else by
                else:  # repository tests: pytest's summary line of the first failure
                    failed = [line for line in done.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
                    node = failed[0].split(" - ")[0].split(" ", 1)[1] if failed else ""
                    by = node[node.find("tests/") :] if "tests/" in node else by
                return {"outcome": "killed", "by": by, "seconds": time.monotonic() - started}
        return {"outcome": "survived", "by": "", "seconds": time.monotonic() - started}
    finally:
        if mutant is not None:
            source.unlink(missing_ok=True)


def plot(results: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modules = sorted({r["module"] for r in results})
    killed = [sum(1 for r in results if r["module"] == m and r["outcome"] == "killed") for m in modules]
    survived = [sum(1 for r in results if r["module"] == m and r["outcome"] == "survived") for m in modules]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(modules) + 1.5))
    names = [m.removeprefix("reference/") for m in modules]
    ax.barh(names, killed, color="#3a7d44", label="killed")
    ax.barh(names, survived, left=killed, color="#c0392b", label="survived")
    ax.set_xlabel("mutants")
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=sorted(TARGETS), required=True)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--max-examples", type=int, default=5)
    parser.add_argument("--report", help="JSON report path (PNG beside it)")
    parser.add_argument("--only", help="mutate only modules whose path contains this")
    parser.add_argument("--sample", type=int, help="run a seeded random sample of this many mutants")
    parser.add_argument("--seed", type=int, default=0, help="seed of --sample")
    parser.add_argument(
        "--rerun",
        help="a previous report of this script: run its survivors again (those --only selects) and carry every "
        "other result over (valid when the suite has only grown since)",
    )
    parser.add_argument(
        "--complete",
        help="a previous report of a sample: run every mutant it does not cover and carry its results over, so that "
        "the report becomes a full run (valid when the code and suite are unchanged since, or have only grown)",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.max_examples < 1:
        parser.error("--jobs and --max-examples must be at least 1")
    if args.complete and (args.rerun or args.sample is not None):
        parser.error("--complete runs what a report left out: it takes neither --rerun nor --sample")
    console = Console()
    every_mutant = [
        m for path in TARGETS[args.backend] for m in mutants_of(path, (ROOT / path).read_text(encoding="utf-8"))
    ]
    mutants = [m for m in every_mutant if not args.only or args.only in m.module]
    previous: list[dict[str, Any]] = []
    complete_modules: list[str] = []
    sampled, seed = args.sample, args.seed
    if args.rerun:
        source = json.loads(Path(args.rerun).read_text(encoding="utf-8"))
        previous = source["results"]
        if sampled is None:  # the report covers the mutants of the run it reruns: a sample stays a sample
            sampled, seed = source.get("sampled"), source.get("seed", args.seed)
            complete_modules = list(source.get("complete_modules", []))
        survivors = {(r["module"], r["line"], r["mutation"]) for r in previous if r["outcome"] == "survived"}
        mutants = [m for m in mutants if (m.module, m.line, m.description) in survivors]
    if args.complete:
        source = json.loads(Path(args.complete).read_text(encoding="utf-8"))
        previous = source["results"]
        covered = {(r["module"], r["line"], r["mutation"]) for r in previous}
        mutants = [m for m in mutants if (m.module, m.line, m.description) not in covered]
        if args.only:  # only the modules --only selects are completed: the others stay the report's sample
            sampled, seed = source.get("sampled"), source.get("seed", args.seed)
            complete_modules = sorted(
                set(source.get("complete_modules", [])) | {m.module for m in every_mutant if args.only in m.module}
            )
    if args.sample is not None and args.sample < len(mutants):
        mutants = random.Random(args.seed).sample(mutants, args.sample)
    # A rerun carries over every result it does not run again: the killed mutants, and the survivors that --only
    # or --sample leave out, so that its totals are those of the whole previous report.
    running = {(m.module, m.line, m.description) for m in mutants}
    # ... but not the results of mutants the code no longer has (a line changed since): they measured other code
    existing = {(m.module, m.line, m.description) for m in every_mutant}
    carried = [r for r in previous if (k := (r["module"], r["line"], r["mutation"])) not in running and k in existing]
    report = Path(args.report or ROOT / ".tox" / "reports" / f"mutation-{args.backend}.json")
    report.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="statecert-mutation-") as tmp:
        workdir = Path(tmp)
        (workdir / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        baseline = run_suite(args.backend, workdir, None, 1800, args.max_examples)
        if baseline["outcome"] != "survived":
            console.print(f"[red]the suite fails without any mutant ({baseline['by']}): nothing to measure[/red]")
            return 2
        timeout = max(60.0, 5 * baseline["seconds"])
        console.print(
            f"{args.backend}: {len(mutants)} mutants of {len(TARGETS[args.backend])} modules; an unmutated run "
            f"takes {baseline['seconds']:.1f} s (timeout {timeout:.0f} s per mutant)"
        )
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        results: list[dict[str, Any]] = []
        with Progress(*columns, console=console) as progress, ThreadPoolExecutor(args.jobs) as pool:
            task = progress.add_task("mutants", total=len(mutants))

            def one(mutant: Mutant) -> dict[str, Any]:
                outcome = run_suite(args.backend, workdir, mutant, timeout, args.max_examples)
                progress.advance(task)
                return {"module": mutant.module, "line": mutant.line, "mutation": mutant.description, **outcome}

            results = carried + list(pool.map(one, mutants))
    counts = Counter(r["outcome"] for r in results)
    rate = counts["killed"] / len(results) if results else 0.0
    by_module = {
        m: {o: sum(1 for r in results if r["module"] == m and r["outcome"] == o) for o in ("killed", "survived")}
        for m in sorted({r["module"] for r in results})
    }
    for module, c in by_module.items():
        console.print(f"  {module}: {c['killed']}/{c['killed'] + c['survived']} killed")
    console.print(f"[bold]{args.backend}: {counts['killed']} of {len(results)} mutants killed ({rate:.1%})[/bold]")
    for r in results:
        if r["outcome"] == "survived":
            console.print(f"  SURVIVED {r['module']}:{r['line']} {r['mutation']}", markup=False, highlight=False)
    data = {
        "backend": args.backend,
        "mutants": len(results),
        "killed": counts["killed"],
        "survived": counts["survived"],
        "kill_rate": round(rate, 4),
        "sampled": sampled,
        "seed": seed,
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "carried_over_from": args.rerun or args.complete,
        "completed": bool(args.complete),
        "only": args.only,
        "complete_modules": complete_modules,
        "baseline_seconds": round(baseline["seconds"], 1),
        "measured_by": measured_by(args.backend),
        "by_module": by_module,
        "results": results,
    }
    report.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    plot(results, report.with_suffix(".png"), f"{args.backend}: {rate:.1%} of {len(results)} mutants killed")
    console.print(f"report {report} (plot {report.with_suffix('.png')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
