"""Scenarios of the library on Flink itself (SCN-12): a task failure and its restart, stop-with-savepoint and resume
at other parallelisms, the changelog backend switched on and off through a savepoint and a retained checkpoint,
and another backend's native savepoint refused; each passes with the verdicts of the simulator's oracle."""

from __future__ import annotations

from pathlib import Path

import pytest

from statecert.scenarios.catalog import resolve
from statecert.scenarios.flink.runner import run_on_flink
from statecert.scenarios.loader import load_scenario
from statecert.spec.errors import ScenarioError


@pytest.mark.flink
@pytest.mark.requirement("SCN-12")
@pytest.mark.parametrize(
    "name", ["task-failure-processing", "stop-and-rescale", "changelog-switch", "native-savepoint-other-backend"]
)
def test_a_library_scenario_passes_on_flink(name: str, tmp_path: Path) -> None:
    try:
        result = run_on_flink(load_scenario(resolve(name)), tmp_path)
    except ScenarioError as exc:
        if "needs statecert[flink]" in str(exc):
            pytest.skip(str(exc))
        raise
    assert result.passed, f"SCN-12: run_on_flink({name}): expected the scenario's verdicts, got {result.failures}"
