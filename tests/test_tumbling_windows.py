"""Event-time tumbling windows on the keyed backends' timers (SCN-10, TM): the window operator against the direct
aggregation through snapshots, restores and rescaling; the window scenario catching backends that lose or misfire
timers; the job-file checks."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecert.conformance.helpers import keyed_backend, location_for
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.loader import load_state_backend
from statecert.reference.rocksdb.backend import EmbeddedRocksDBStateBackend
from statecert.reference.simulator.job_spec import SimulationSpecError, load_job_spec, to_toml
from statecert.reference.simulator.runtime import Simulation
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.tumbling_windows import (
    TumblingWindowOperator,
    check_windows,
    emits_watermark,
    expected_windows,
    split_watermark,
)
from statecert.scenarios.catalog import resolve
from statecert.scenarios.loader import ScenarioError, load_scenario
from statecert.scenarios.sim_runner import run_on_simulator
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.timers import MAX_TIMESTAMP, MIN_TIMESTAMP
from tests import broken_backends

ROOT = Path(__file__).resolve().parent.parent
KEYS = [f"k{i}" for i in range(12)]


def weight(offset: int) -> int:
    return offset % 5 + 1


# a stream: (key index, event time) pairs in time order; watermarks between them; checkpoints at some positions
STREAMS = st.lists(st.tuples(st.integers(0, 11), st.integers(0, 3)), min_size=1, max_size=60)


@pytest.mark.requirement("SCN-10", "TM-2", "TM-6", "TM-7")
@settings(max_examples=40, deadline=None)
@given(
    steps=STREAMS,
    size=st.integers(1, 20),
    cut=st.integers(0, 60),
    new_parallelism=st.integers(1, 3),
    backend=st.sampled_from(["hashmap", "rocksdb"]),
)
def test_windows_fire_once_with_their_sums_across_a_rescaled_restore(
    tmp_path_factory: Any, steps: list[tuple[int, int]], size: int, cut: int, new_parallelism: int, backend: str
) -> None:
    """Records arrive in event-time order (gaps 0..3 ms); the watermark follows the last record; a checkpoint at
    `cut` is restored at another parallelism, which finishes the stream and ends event time."""
    state_backend = HashMapStateBackend() if backend == "hashmap" else EmbeddedRocksDBStateBackend()
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    records, time = [], 0
    for key, gap in steps:
        time += gap
        records.append((KEYS[key], time))
    cut = min(cut, len(records))
    fired: list[tuple[str, int, int]] = []
    with keyed_backend(state_backend, key_group_range=KeyGroupRange(0, 127)) as keyed:
        windows = TumblingWindowOperator(keyed, size)
        for key, ts in records[:cut]:
            windows.process(key, ts, weight(ts))
            fired += windows.advance_watermark(ts - 1)  # every later record has event time >= ts
        handle = keyed.snapshot(1, 0, location_for(storage, 1)).run()
    for index in range(new_parallelism):
        with keyed_backend(
            state_backend, parallelism=new_parallelism, index=index, restore=[handle] if handle else []
        ) as keyed:
            windows = TumblingWindowOperator(keyed, size)
            for key, ts in records[cut:]:
                try:
                    keyed.set_current_key(key)
                except Exception:
                    continue  # another subtask's key
                windows.process(key, ts, weight(ts))
            fired += windows.advance_watermark(MAX_TIMESTAMP)
    expected = expected_windows([(k, ts) for k, ts in records], size, weight)
    check = check_windows(expected, fired)
    assert check.exactly_once, f"windows of size {size} over {records} (checkpoint after {cut}): {check}"


@pytest.mark.requirement("SCN-10", "TM-2")
@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40)), max_size=30),
    size=st.integers(1, 10),
    marks=st.lists(st.integers(-1, 50), max_size=5),
)
def test_a_window_fires_once_its_last_millisecond_is_reached_and_then_holds_no_state(
    records: list[tuple[int, int]], size: int, marks: list[int]
) -> None:
    """After its records, watermarks advance: each fires exactly the windows whose last millisecond (start + size -
    1) it reached and that had not fired, with their sums, and a fired window's state is cleared."""
    expected = expected_windows([(KEYS[k], ts) for k, ts in records], size, weight)
    fired: dict[tuple[str, int], int] = {}
    with keyed_backend(HashMapStateBackend(), key_group_range=KeyGroupRange(0, 127)) as keyed:
        windows = TumblingWindowOperator(keyed, size)
        for k, ts in records:
            windows.process(KEYS[k], ts, weight(ts))
        for watermark in [*sorted(marks), MAX_TIMESTAMP]:
            got = {(key, start): total for key, start, total in windows.advance_watermark(watermark)}
            due = {w: t for w, t in expected.items() if w[1] + size - 1 <= watermark and w not in fired}
            assert got == due, f"advance_watermark({watermark}) with windows of {size} ms fired {got}, expected {due}"
            fired |= got
            for key, start in fired:
                keyed.set_current_key(key)
                windows.state.set_current_namespace(start)
                left = windows.state.get()
                assert left is None, f"window {start} of {key} fired, its state holds {left}"


@pytest.mark.requirement("SCN-10")
@given(length=st.integers(1, 200), size=st.integers(1, 50))
def test_a_splits_watermarks_end_each_window_and_then_event_time(length: int, size: int) -> None:
    """What the simulator's sources send matches what the Spark runner derives from an epoch's end offset."""
    sent = MIN_TIMESTAMP
    for offset in range(length):
        mark = emits_watermark(offset, length, size)
        if mark is not None:
            assert mark >= sent, f"watermarks go back: {mark} after {sent}"
            sent = mark
        assert split_watermark(offset + 1, length, size) == sent, (
            f"after {offset + 1} of {length} records (windows of {size}): the source sent {sent}, "
            f"split_watermark gives {split_watermark(offset + 1, length, size)}"
        )
    assert sent == MAX_TIMESTAMP


@pytest.mark.requirement("SCN-10", "SCN-1")
def test_the_window_scenario_passes_on_the_simulator_for_both_reference_backends(tmp_path: Path) -> None:
    scenario = load_scenario(resolve("event-time-windows"))
    for backend in ("hashmap", "rocksdb"):
        result = run_on_simulator(scenario, tmp_path / backend, backend)
        assert result.passed, (backend, result.failures)
        committed = [out for run in result.runs for out in run.committed]
        assert len(committed) > 100 and len(result.runs) == 2, (backend, len(committed), len(result.runs))


@pytest.mark.requirement("SCN-10", "TM-6", "TM-2")
@pytest.mark.parametrize("broken", ["timers_forget_restored", "timers_fire_with_stale_key"])
def test_the_window_scenario_fails_a_backend_that_loses_or_misfires_timers(tmp_path: Path, broken: str) -> None:
    scenario = load_scenario(resolve("event-time-windows"))
    result = run_on_simulator(scenario, tmp_path, f"tests.broken_backends:{broken}")
    assert not result.passed, f"{broken} ({broken_backends.CAUGHT_BY[broken]}) passed the window scenario"
    assert any("window" in failure for failure in result.failures), result.failures


@pytest.mark.requirement("SIM-6", "SIM-11")
def test_window_jobs_round_trip_and_need_two_stages(tmp_path: Path) -> None:
    base = dataclasses.replace(load_job_spec(ROOT / "scenarios" / "simulator" / "crash-aligned.toml"), window_ms=25)
    path = tmp_path / "job.toml"
    path.write_text(to_toml(base), encoding="utf-8")
    assert load_job_spec(path) == base
    report = Simulation(base, 1, tmp_path / "run").run()
    assert report["checks"]["exactly_once"] and report["terminated"], report["checks"]
    path.write_text(to_toml(dataclasses.replace(base, stages=3)), encoding="utf-8")
    with pytest.raises(SimulationSpecError, match=r"job\.window_ms.*stages = 3"):
        load_job_spec(path)


@pytest.mark.requirement("SCN-1", "SCN-10")
def test_a_window_scenario_with_three_stages_is_invalid(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        '[scenario]\ndescription = "x"\nrunners = ["sim"]\n[job]\nstages = 3\nwindow_ms = 10\n', encoding="utf-8"
    )
    with pytest.raises(ScenarioError, match=r"bad\.toml: job\.window_ms: windows run in 2-stage jobs"):
        load_scenario(path)


@pytest.mark.requirement("CL-1", "SCN-10")
def test_the_changelog_backend_runs_windows(tmp_path: Path) -> None:
    """Timers are logged keyed state under changelog (CL-1): the window job survives its failover with it."""
    backend = load_state_backend(job_config={"state.changelog.enabled": "true"})
    assert backend.capabilities.timers
    base = dataclasses.replace(
        load_job_spec(ROOT / "scenarios" / "simulator" / "crash-aligned.toml"),
        window_ms=30,
        changelog=True,
        materialize_interval_ms=120,
    )
    report = Simulation(base, 2, tmp_path).run()
    assert report["checks"]["exactly_once"] and report["failovers"], report["checks"]


@pytest.mark.requirement("SCN-10", "SIM-1", "SIM-2", "SIM-5")
@pytest.mark.parametrize("mode", ["exactly-once", "unaligned"])
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_window_jobs_are_exactly_once_after_crashes_and_deterministic(tmp_path: Path, mode: str, backend: str) -> None:
    """Aligned and unaligned checkpoints (watermarks a barrier overtook are not channel state: sources send them
    again after a restore) keep every window once; the same seed gives the same report."""
    from statecert.reference.coordinator.settings import CheckpointingMode

    base = load_job_spec(ROOT / "scenarios" / "simulator" / "crash-aligned.toml")
    spec = dataclasses.replace(
        base,
        window_ms=20,
        backend=backend,
        checkpointing=dataclasses.replace(base.checkpointing, mode=CheckpointingMode(mode)),
    )
    reports = [Simulation(spec, seed, tmp_path / f"{seed}-{i}").run() for i, seed in enumerate((4, 4))]
    checks = reports[0]["checks"]
    assert reports[0]["failovers"] and checks["exactly_once"], (mode, backend, checks)
    assert reports[0] == reports[1], "the same job and seed must give the same report"
