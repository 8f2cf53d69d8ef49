"""A failure names its cause: simple bugs planted in copies of `examples/dict-backend`, each certified twice (the
whole contract tier, and with `-- --exitfirst`), as a new user fixing a backend would. For every bug the likely
root cause names a requirement of the bug's chapter; for all but at most one, fail-fast's first failure does too;
and the terminal output stays within 40 lines (tox -e catalog: two certifications per bug)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "dict-backend" / "dict_backend.py"

# name -> (the line of DictStore changed, the bug, the chapter prefix its requirements start with)
BUGS: dict[str, tuple[str, str, str]] = {
    "put_all keeps one entry": (
        "        self._entries(key_group).setdefault(key, {}).update(entries)",
        "        self._entries(key_group).setdefault(key, {}).update(dict(list(entries.items())[:1]))",
        "KS",
    ),
    "list elements read back reversed": (
        "        return None if found is None else list(found)",
        "        return None if found is None else list(reversed(found))",
        "KS",
    ),
    "a map remove that does nothing": (
        "            entries.pop(user_key, None)",
        "            pass",
        "KS",
    ),
    "clear leaves the entry": (
        "        self.groups.get(key_group, {}).pop(key, None)",
        "        pass",
        "KS",
    ),
    "a restore that drops a key group": (
        "    def put_payload(self, key_group: int, key: EntryKey, value: Any) -> None:\n",
        "    def put_payload(self, key_group: int, key: EntryKey, value: Any) -> None:\n"
        "        if key_group == 40:\n            return\n",
        "KB",
    ),
    "the snapshot shares the live entries": (
        "        frozen = [copy.deepcopy(s.groups) for s in stores]",
        "        frozen = [s.groups for s in stores]",
        "KB",
    ),
}


def planted(tmp_path: Path, bug: str) -> Path:
    original, replacement, _ = BUGS[bug]
    source = EXAMPLE.read_text(encoding="utf-8")
    assert source.count(original) == 1, f"the line to change for {bug!r} is not once in {EXAMPLE}"
    directory = tmp_path / "backend"
    directory.mkdir(parents=True)
    (directory / "dict_backend.py").write_text(source.replace(original, replacement), encoding="utf-8")
    return directory


def certify(directory: Path, *pytest_args: str) -> tuple[dict[str, object], list[str]]:
    report = directory / "r.json"
    command = [sys.executable, "-m", "statecert.cli.main", "certify", "dict_backend:factory", "--profile", "quick"]
    done = subprocess.run(
        [*command, "--report", str(report), *(["--", *pytest_args] if pytest_args else [])],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(directory), "COLUMNS": "200"},
    )
    assert done.returncode == 1, f"a planted bug certified: exit {done.returncode}\n{done.stdout}{done.stderr}"
    return json.loads(report.read_text(encoding="utf-8")), done.stdout.splitlines()


def chapter_of(requirements: list[str]) -> set[str]:
    return {rid.split("-")[0] for rid in requirements}


@pytest.mark.catalog
def test_the_likely_root_cause_and_the_first_failure_name_the_planted_bugs_chapter(tmp_path: Path) -> None:
    misses, first_misses, long_outputs = [], [], []
    for i, (bug, (_, _, chapter)) in enumerate(BUGS.items()):
        directory = planted(tmp_path / str(i), bug)
        report, output = certify(directory)
        cause = report["likely_root_cause"]
        assert isinstance(cause, dict)
        if chapter not in chapter_of(cause["requirements"]):
            misses.append((bug, cause["test"], cause["requirements"]))
        if len(output) > 40:
            long_outputs.append((bug, len(output)))
        stopped, _ = certify(directory, "--exitfirst")
        failed = [t for t in stopped["tests"] if t["outcome"] == "failed"]  # type: ignore[union-attr]
        if not failed or chapter not in chapter_of(failed[0]["violated"]):
            first_misses.append((bug, failed[0]["id"] if failed else None))
    assert not misses, f"likely root cause: expected the planted bug's chapter for every bug, got {misses}"
    assert len(first_misses) <= 1, f"--exitfirst: expected the bug's chapter first for 5 of 6, got {first_misses}"
    assert not long_outputs, f"terminal output: expected at most 40 lines per planted bug, got {long_outputs}"
