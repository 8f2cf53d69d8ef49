"""The measured figures pages: benchmarks (`benchmarks/results/figures.json`, written by `tox -e bench`), reliability
(`docs/data/fuzz.json` and `docs/data/crash.*.json`, written by `tox -e fuzz` and `tox -e crash`) and mutation scores
(`docs/data/mutation-*.json`, written by `tox -e mutation`). Each page says which run its figures come from; a
figure no committed run measured is shown as not measured, never filled in by hand."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks" / "results" / "figures.json"
DATA = ROOT / "docs" / "data"


def _summary() -> Any:
    """`benchmarks/summary.py`, whose targets the benchmark page lists (it imports its sibling `figures`)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("benchmark_summary", ROOT / "benchmarks" / "summary.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"`{json.dumps(value)[:80]}`"
    return f"{value:,.4g}" if isinstance(value, float) else f"{value:,}"


def benchmarks_page() -> str:
    lines = ["# Benchmarks", ""]
    if not BENCHMARKS.exists():
        return "\n".join([*lines, "No benchmark run is committed: `tox -e bench` writes one.", ""])
    data = json.loads(BENCHMARKS.read_text())
    machine = data.get("machine", {})
    lines += [
        f"From the `tox -e bench` run started {data.get('started', '(unknown)')} on {machine.get('cpus', '?')} "
        f"cores, Python {machine.get('python', '?')} (`benchmarks/results/figures.json`, generated into this page "
        "when the documentation is built). Ratios are measured in that one run against the raw engine or the peer "
        "a user would pick instead.",
        "",
        "![targets against the measured figures](figures.png)",
        "",
        "| target | wanted | measured | verdict |",
        "| --- | --- | --- | --- |",
    ]
    for target, value in _summary().rows(data):
        wanted = f"{target.relation} {target.threshold:,.6g}"
        if value is None:
            lines.append(f"| {target.title} | {wanted} | not measured | |")
            continue
        verdict = "met" if target.met(value) else f"not met: {target.explanation(data) or 'see the figures below'}"
        lines.append(f"| {target.title} | {wanted} | {value:,.4g} | {verdict} |")
    for benchmark, figures in sorted(data.items()):
        if isinstance(figures, dict) and benchmark != "machine":
            when = f"Measured {figures['measured_at']}." if "measured_at" in figures else "Measured in that run."
            lines += ["", f"## {benchmark}", "", when, "", "| figure | value |", "| --- | --- |"]
            lines += [
                f"| {name} | {_number(value)} |" for name, value in sorted(figures.items()) if name != "measured_at"
            ]
    return "\n".join([*lines, ""])


def _tally_table(
    what: str, tallies: dict[str, dict[str, int]], first: str | None = None, always: tuple[str, ...] = ()
) -> list[str]:
    """A table of per-row tallies (a fuzzed reader's or a crashed backend's outcomes), `first` as the first column
    and the outcomes in `always` shown even where no row has one (the zeros a run must show)."""
    outcomes = sorted({o for counts in tallies.values() for o in counts if o != first} | set(always))
    columns = ([first] if first else []) + outcomes
    rows = [f"| {what} | " + " | ".join(columns) + " |", "| --- | " + " | ".join("---" for _ in columns) + " |"]
    rows += [
        f"| {name} | " + " | ".join(f"{counts.get(c, 0):,}" for c in columns) + " |"
        for name, counts in sorted(tallies.items())
    ]
    return rows


def reliability_page() -> str:
    lines = [
        "# Reliability: fuzzing and crash consistency",
        "",
        "Damaged and hostile checkpoints must give a documented error or exactly the state written (never a smaller "
        "one), and a process killed at any file operation must leave only checkpoints that restore. Figures from "
        "the runs committed under `docs/data/`, generated into this page when the documentation is built.",
        "",
        "## Fuzzing (`tox -e fuzz`)",
        "",
    ]
    fuzz = DATA / "fuzz.json"
    if fuzz.exists():
        tallies = json.loads(fuzz.read_text())
        run = tallies.pop("_run", None)
        if run is not None:
            lines += [
                f"Run of {run['measured_at']}: `tox -e fuzz`, {run['examples_per_test']:,} examples per test "
                "(forged cases are counted under their reader; silent means restored state that the spec-only "
                "decoder does not read from the same bytes).",
                *([run["note"]] if run.get("note") else []),
                "",
            ]
        lines += _tally_table("reader", tallies, "cases", always=("UNDOCUMENTED", "SILENT STATE CHANGE"))
    else:
        lines.append("No fuzz run is committed (`docs/data/fuzz.json`): `tox -e fuzz` writes one.")
    lines += ["", "## Crash consistency (`tox -e crash`)", ""]
    crashes = sorted(DATA.glob("crash.*.json"))
    if crashes:
        lines += _tally_table("backend", {k: v for p in crashes for k, v in json.loads(p.read_text()).items()})
    else:
        lines.append("No crash run is committed (`docs/data/crash.*.json`): `tox -e crash` writes them.")
    lines += ["", "## Real process deaths (`tox -e chaos`)", ""]
    chaos = [json.loads(p.read_text()) for p in sorted(DATA.glob("chaos.*.json"))]
    if chaos:
        lines += [
            "SIGKILL from outside, on the Spark runner's `local-cluster` master, while the fault scenarios "
            f"({', '.join(chaos[0]['scenarios'])}) run; one row per run of `chaos/run.py` (for the driver, each driver "
            "run is a killed run and its resumed run). Workers and executors are "
            "killed 2-8 s apart (seeded) once the first checkpoint completed, each while it runs a task (a worker "
            "that used CPU in the last 50 ms, an executor above one); the driver once its 1st to 3rd checkpoint has "
            "`_metadata`, then the scenario resumes in a new driver. The failovers and task retries include those "
            "the scenarios inject themselves (a worker run's count was 6 when the kills fell on idle workers). A "
            "violation is a run that ended otherwise than exactly-once or with a documented error. The executor "
            "row killing any process of the kind, running a task or not (`--any-moment`), also kills executors "
            "under the driver's own queries (the oracle's, the state read-back): its first run, before version "
            "0.3.2, ended one driver with Spark's uncaught job failure (a Java stack trace, no report); the row "
            "is the run after the fix.",
            "",
            "| process killed | run | master | kill points | driver runs | failovers and task retries | scenario runs "
            "exactly-once | documented errors | violations | checkpoints verified | not restorable |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {c['kind']}: {c.get('targets', 'any process of the kind')} "
            f"| {c['measured_at']}, seed {c['seed']} | `{c['master']}` | {c['kill_points']} "
            f"| {c['runs']} | {c.get('failovers', '-')} | {c['scenario_runs_exactly_once']} "
            f"| {c['documented_errors']} | {c['violations']} "
            f"| {c['checkpoints_verified']} | {c['checkpoints_not_restorable']} |"
            for c in chaos
        ]
    else:
        lines.append("No chaos run is committed (`docs/data/chaos.*.json`): `tox -e chaos` writes them.")
    return "\n".join([*lines, ""])


def _equivalent_mutants() -> dict[tuple[str, str, int, str], str]:
    """The survivors argued equivalent (`mutation/equivalent.toml`), by target, module, line and mutation."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    path = ROOT / "mutation" / "equivalent.toml"
    entries = tomllib.loads(path.read_text(encoding="utf-8")).get("equivalent", []) if path.exists() else []
    return {(e["target"], e["module"], e["line"], e["mutation"]): e["reason"] for e in entries}


def mutation_page() -> str:
    lines = [
        "# Mutation scores",
        "",
        "How many mutants of each module the conformance suite (or, for the modules no backend runs, the repository's "
        "tests of them) kills: `tox -e mutation`, one report per target under `docs/data/`, generated into this page "
        "when the documentation is built. A survivor argued equivalent (no test can tell it from the original: "
        "`mutation/equivalent.toml`, with its reason below) is left out of the kill rate; every other survivor counts "
        "against it.",
        "",
    ]
    reports = sorted(DATA.glob("mutation-*.json"))
    if not reports:
        return "\n".join([*lines, "No mutation run is committed: `tox -e mutation` writes the reports.", ""])
    equivalent = _equivalent_mutants()

    def argued(target: str, result: dict[str, Any]) -> str | None:
        """Why a survivor is equivalent, if it was argued to be; None for a killed or unexplained mutant."""
        key = (target, result["module"], result["line"], result["mutation"])
        return equivalent.get(key) if result["outcome"] == "survived" else None

    runs = [json.loads(p.read_text()) for p in reports]
    lines += [
        "| target | module | mutants | killed | equivalent | not killed | kill rate (of the non-equivalent) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for report in runs:
        target = report["backend"]
        for module in sorted({r["module"] for r in report["results"]}):
            results = [r for r in report["results"] if r["module"] == module]
            killed = sum(r["outcome"] == "killed" for r in results)
            same = sum(argued(target, r) is not None for r in results)
            missed = len(results) - killed - same
            rate = f"{killed / (killed + missed):.1%}" if killed + missed else "-"
            lines.append(f"| {target} | `{module}` | {len(results)} | {killed} | {same} | {missed} | {rate} |")
    lines += ["", "The runs:", ""]
    for r in runs:
        flag = "--complete" if r.get("completed") else "--rerun"
        rerun = f" {flag} {r['carried_over_from']}" if r.get("carried_over_from") else ""
        rerun += f" --only {r['only']}" if r.get("only") else ""
        sample = f" --sample {r['sampled']} --seed {r.get('seed', 0)}" if r.get("sampled") and not rerun else ""
        when = r.get("measured_at", "date not recorded")
        same = sum(argued(r["backend"], s) is not None for s in r["results"])
        rate = r["killed"] / (r["mutants"] - same) if r["mutants"] > same else 0.0
        of = (
            f"a seeded sample of {r['sampled']} of the target's mutants, seed {r.get('seed', 0)}"
            + (
                f", then every mutant of {', '.join(f'`{m}`' for m in r['complete_modules'])}"
                if r.get("complete_modules")
                else ""
            )
            if r.get("sampled")
            else "every mutant of the target"
        )
        by_repository = sum(s["outcome"] == "killed" and s["by"].startswith("tests/") for s in r["results"])
        split = (
            f" ({r['killed'] - by_repository} by the conformance suite, {by_repository} by the repository's tests)"
            if by_repository and by_repository < r["killed"]
            else ""
        )
        lines.append(
            f"- `{r['backend']}`: `python mutation/run.py --backend {r['backend']}{sample}{rerun}`, finished {when} "
            f"({of}): {r['killed']} of {r['mutants']} mutants killed{split}, {same} equivalent: {rate:.1%} of the "
            "non-equivalent."
            + (f" Measured by, in order: {'; '.join(r['measured_by'])}." if r.get("measured_by") else "")
        )
    survivors = [(r["backend"], s) for r in runs for s in r.get("results", []) if s["outcome"] == "survived"]
    if survivors:
        lines += ["", "## Survivors", "", "| target | where | mutation | equivalent? |", "| --- | --- | --- | --- |"]
        for b, s in survivors:
            reason = argued(b, s)
            why = f"equivalent: {reason}" if reason else "**not killed**"
            lines.append(f"| {b} | `{s['module']}:{s['line']}` | {s['mutation']} | {why} |")
    return "\n".join([*lines, ""])
