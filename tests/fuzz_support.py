"""Shared machinery of the reader fuzz tests (`test_fuzz_*.py`): example counts, outcome tallies, and the two
verdicts every fuzz case must reach.

Each case ends in one of: a documented error (a `StateCertError`), or success. Success on *damaged* input (bits
flipped or bytes cut, nothing re-recorded) must give back exactly the undamaged state: anything else is a silent
state change. Any other exception is an undocumented exception. `STATECERT_FUZZ_EXAMPLES` sets the examples per
reader (default 40 in the self-tests; `tox -e fuzz` runs 10,000) and `STATECERT_FUZZ_REPORT` names a JSON file
that receives the tallies.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings

from statecert.spec.errors import StateCertError

EXAMPLES = int(os.environ.get("STATECERT_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
TALLIES: defaultdict[str, Counter[str]] = defaultdict(Counter)
T = TypeVar("T")
RUN_KEY = "_run"
"""The merged report's entry that says when the run was made and with how many examples per test."""


class SilentStateChange(AssertionError):
    """Damaged input restored without an error to a state other than the one written."""


def outcome(reader: str, run: Callable[[], T]) -> T | None:
    """Run one fuzz case of `reader`: a documented error is tallied and swallowed (None); anything else that is
    raised propagates (the test fails: an undocumented exception); success returns the result."""
    try:
        result = run()
    except StateCertError as exc:
        TALLIES[reader][f"documented: {type(exc).__name__}"] += 1
        return None
    except Exception:
        TALLIES[reader]["UNDOCUMENTED"] += 1
        raise
    TALLIES[reader]["accepted"] += 1
    return result


def same_or_error(reader: str, run: Callable[[], Any], expected: Any) -> None:
    """Damaged input: a documented error, or exactly `expected`."""
    result = outcome(reader, run)
    if result is not None and result != expected:
        TALLIES[reader]["SILENT STATE CHANGE"] += 1
        raise SilentStateChange(f"{reader}: damaged input restored to a different state without an error")


def assert_verify_agrees(
    directory: Path, what: str, restore: Callable[[], object], restore_name: str = "a restore"
) -> None:
    """FMT-14: `inspect --verify` reports a problem with the checkpoint at `directory` exactly when `restore()`
    (which restores it) raises a documented error."""
    from statecert.reference.format.verify import verify_checkpoint

    report = verify_checkpoint(str(directory))
    refused = None
    try:
        restore()
    except StateCertError as exc:
        refused = f"{type(exc).__name__}: {exc}"
    assert report.ok == (refused is None), (
        f"FMT-14: {what}: inspect --verify "
        f"{'passed' if report.ok else 'reported ' + repr(report.problems[:2])}, {restore_name} "
        f"{'succeeded' if refused is None else 'refused: ' + refused}"
    )


def write_report() -> None:
    """This process's tallies to `STATECERT_FUZZ_REPORT` (one file per pytest-xdist worker: `<name>.<worker>.json`;
    `python -m tests.fuzz_support REPORT` merges them and prints the table)."""
    target = os.environ.get("STATECERT_FUZZ_REPORT")
    if not target or not TALLIES:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    path = Path(target).with_suffix(f".{worker}.json") if worker else Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    report = {reader: {"cases": sum(c.values()), **dict(sorted(c.items()))} for reader, c in TALLIES.items()}
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")


def merge_reports(target: Path) -> dict[str, dict[str, int]]:
    """Merge the per-worker tallies next to `target` into `target`; returns the merged tallies."""
    merged: defaultdict[str, Counter[str]] = defaultdict(Counter)
    parts = sorted(target.parent.glob(f"{target.stem}.*.json"))
    for part in parts or [target]:
        for reader, counts in json.loads(part.read_text()).items():
            merged[reader].update(counts)
    report = {reader: dict(sorted(c.items())) for reader, c in sorted(merged.items())}
    run = {"measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "examples_per_test": EXAMPLES}
    target.write_text(json.dumps({RUN_KEY: run, **report}, indent=2, sort_keys=True) + "\n")
    for part in parts:
        part.unlink()
    return report


if __name__ == "__main__":
    import sys

    from rich.console import Console
    from rich.table import Table

    merged_report = merge_reports(Path(sys.argv[1]))
    table = Table(title=f"reader fuzzing ({sys.argv[1]})")
    for column in ("reader and input", "cases", "documented errors", "accepted", "undocumented", "silent changes"):
        table.add_column(column)
    for reader, counts in merged_report.items():
        documented = sum(v for k, v in counts.items() if k.startswith("documented"))
        table.add_row(
            reader,
            str(counts.get("cases", 0)),
            str(documented),
            str(counts.get("accepted", 0)),
            str(counts.get("UNDOCUMENTED", 0)),
            str(counts.get("SILENT STATE CHANGE", 0)),
        )
    Console().print(table)
