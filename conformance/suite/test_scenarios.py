"""Scenarios tier (`--tier scenarios`): the scenario library run against the backend under test, on the simulator
and on local PySpark (failures in every checkpoint phase, worker kills, storage outages, coordinator crashes,
savepoints, rescaling, migration to and from the reference backends, a golden savepoint, schema evolution)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statecert.conformance.plugin import CertificationSession
from statecert.scenarios.capabilities import required_capabilities
from statecert.scenarios.catalog import library_paths
from statecert.scenarios.loader import load_scenario

pytestmark = pytest.mark.tier("scenarios")

LIBRARY = library_paths()
# each library scenario, gated on the capabilities it uses (a backend declaring one False is not run against it)
SCENARIOS = [
    pytest.param(p, id=p.stem, marks=pytest.mark.capability(*required_capabilities(load_scenario(p)))) for p in LIBRARY
]


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    from statecert.scenarios.spark.session import spark_session as create

    session = create()
    yield session
    session.stop()


def _verdict(result: Any) -> str:
    return f"{result.scenario} on {result.runner} with {result.backend}: " + "; ".join(result.failures)


@pytest.mark.requirement("SCN-9", "SCN-3", "SCN-4")
@pytest.mark.parametrize("path", SCENARIOS)
def test_library_scenario_passes_on_the_simulator(
    certification: CertificationSession, tmp_path: Path, path: Path
) -> None:
    from statecert.scenarios.sim_runner import run_on_simulator

    scenario = load_scenario(path)
    if "sim" not in scenario.runners:
        pytest.skip(f"{scenario.name} is not written for the simulator")
    result = run_on_simulator(scenario, tmp_path, certification.settings.backend)
    assert result.passed, f"SCN-9: {_verdict(result)}"


@pytest.mark.requirement("SCN-9", "SCN-6", "SCN-7")
@pytest.mark.parametrize("path", SCENARIOS)
def test_library_scenario_passes_on_spark(
    certification: CertificationSession, tmp_path: Path, path: Path, spark_session: Any
) -> None:
    from statecert.scenarios.spark.runner import run_on_spark

    scenario = load_scenario(path)
    if "spark" not in scenario.runners:
        pytest.skip(f"{scenario.name} is not written for the Spark runner")
    result = run_on_spark(scenario, tmp_path, spark_session, certification.settings.backend)
    assert result.passed, f"SCN-9: {_verdict(result)}"
