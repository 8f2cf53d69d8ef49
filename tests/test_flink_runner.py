"""The Flink scenario runner's surface that needs no Flink (SCN-12): which library scenarios it runs and why the
others cannot run, and one line when Flink's jars are missing (`tox -e flink` runs scenarios on Flink itself)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from statecert.cli.main import main
from statecert.scenarios.catalog import library
from statecert.scenarios.flink.runner import unsupported_on_flink

RUNS_ON_FLINK = {
    "changelog-switch",
    "incremental-chain",
    "int-keys-rescale",
    "native-savepoint-other-backend",
    "relocated-savepoint",
    "savepoint-and-resume",
    "stop-and-rescale",
    "sum-by-split",
    "switch-backend-canonical",
    "task-failure-processing",
    "task-failure-snapshot",
}


@pytest.mark.requirement("SCN-12")
def test_every_library_scenario_runs_on_flink_or_says_why_not() -> None:
    reasons = {s.name: unsupported_on_flink(s) for s in library()}
    runs = {name for name, why in reasons.items() if why is None}
    assert runs == RUNS_ON_FLINK, f"SCN-12: unsupported_on_flink over the library: expected {RUNS_ON_FLINK}, got {runs}"
    assert all(why and len(why) > 20 for name, why in reasons.items() if name not in runs), (
        f"SCN-12: a scenario that cannot run on Flink says why: {reasons}"
    )


@pytest.mark.requirement("SCN-12")
def test_without_flinks_jars_the_flink_runner_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyflink" else real(name, *a))
    status = main(["scenario", "run", "task-failure-processing", "--runner", "flink", "--workdir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "statecert[flink]" in err[0], (
        f"SCN-12: scenario run --runner flink without Flink's jars: expected exit 2 and one line, got {status}, {err}"
    )
