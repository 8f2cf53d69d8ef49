"""The scenario format, its loader's errors, the library on the simulator, and the `statecert scenario` command
(chapter SCN). The Spark runner's tests are in test_spark_runner.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.reference.simulator.checkers import check_outputs
from statecert.reference.union_markers import UnionRestore, marker, union_problems
from statecert.scenarios.catalog import library, library_paths, resolve
from statecert.scenarios.loader import load_scenario
from statecert.scenarios.model import Action, Phase
from statecert.scenarios.sim_runner import run_on_simulator
from statecert.spec.errors import ScenarioError

LIBRARY = library_paths()
MINIMAL = '[scenario]\ndescription = "x"\n'


def test_the_library_has_at_least_twelve_scenarios_and_every_one_loads() -> None:
    assert len(LIBRARY) >= 12, [p.name for p in LIBRARY]
    names = {load_scenario(p).name for p in LIBRARY}
    for wanted in (
        "task-failure-processing",
        "task-failure-snapshot",
        "task-failure-upload",
        "repeated-failures",
        "storage-outage",
        "coordinator-crash",
        "savepoint-and-resume",
        "stop-and-rescale",
        "switch-backend-canonical",
        "native-savepoint-other-backend",
        "golden-v1-savepoint",
        "schema-evolution",
        "relocated-savepoint",
        "incremental-chain",
        "worker-killed",
        "union-state-restart",
    ):
        assert wanted in names, f"library scenario {wanted} missing"


@pytest.mark.requirement("SCN-1")
@pytest.mark.parametrize(
    "content,problem",
    [
        ("[scenario]\n", "scenario.description: missing"),
        (MINIMAL + "[jobs]\n", "unknown section(s) ['jobs']"),
        (MINIMAL + "[job]\nparallelism = 0\n", "job.parallelism: expected a number in 1..256"),
        (MINIMAL + "[job]\nparallelism = 100000\n", "job.parallelism: expected a number in 1..256"),
        (MINIMAL + "[input]\nrecords_per_source = 100000000000000000000\n", "input.records_per_source: expected a"),
        (MINIMAL + "[input]\nrecords_per_source = 1000000000\n", "input.records_per_source: expected a number in"),
        (MINIMAL + '[job]\nbackend = "no-such-backend"\n', "job.backend: unknown state backend 'no-such-backend'"),
        (MINIMAL + '[job]\nbackend = "no_module:attr"\n', "job.backend: state backend factory 'no_module:attr'"),
        (MINIMAL + 'backends = ["nope"]\n', "scenario.backends: unknown state backend 'nope'"),
        (MINIMAL + "[expect]\ncompleted_checkpoints = { min = 3, max = 1 }\n", "min (3) exceeds max (1)"),
        (
            MINIMAL + '[[timeline]]\naction = "savepoint"\n[[timeline]]\naction = "resume"\nparallelism = 200\n',
            "timeline[1].parallelism: expected a number in 1..128 (at most job.max_parallelism",
        ),
        (
            MINIMAL + '[[timeline]]\naction = "savepoint"\n[[timeline]]\naction = "resume"\nbackend = "nope"\n',
            "timeline[1].backend: unknown state backend 'nope'",
        ),
        (MINIMAL + '[job]\nparallelism = "2"\n', "job.parallelism: expected an integer, got '2'"),
        (MINIMAL + '[job]\noperator = "max"\n', "job.operator: expected one of ['count', 'sum'], got 'max'"),
        (MINIMAL + "[job]\nparalelism = 2\n", "job: unknown key(s) ['paralelism']"),
        (MINIMAL + '[checkpointing]\nmode = "sometimes"\n', "checkpointing.mode: expected one of"),
        (MINIMAL + '[[timeline]]\naction = "explode"\n', "timeline[0].action: expected one of"),
        (MINIMAL + '[[timeline]]\naction = "cancel"\nphase = "upload"\n', "timeline[0].phase: not a setting of cancel"),
        (MINIMAL + '[[timeline]]\naction = "task-failure"\ntask = 5\n', "timeline[0].task: expected a subtask index"),
        (MINIMAL + '[[timeline]]\naction = "resume"\n', "this run takes none; add a savepoint"),
        (
            MINIMAL + '[[timeline]]\naction = "cancel"\nepoch = 2\n[[timeline]]\naction = "savepoint"\nepoch = 3\n',
            "timeline[1]: the run already ended at an earlier cancel",
        ),
        (MINIMAL + '[expect]\nerror = "Oops"\n', "expect.error: expected a documented error"),
        (MINIMAL + "[expect]\nfailovers = { least = 1 }\n", "expect.failovers: expected a count >= 0 or a table"),
        (MINIMAL + '[job]\nstart_from = "nowhere"\n', "job.start_from: expected an existing savepoint directory"),
        (MINIMAL + "[job]\nstages = 3\n", "job.stages: the Spark runner runs 2 stages"),
        (
            MINIMAL + '[checkpointing]\nmode = "unaligned"\n',
            "checkpointing.mode: the Spark runner's epochs are aligned",
        ),
        ("[scenario\n", "invalid TOML"),
    ],
)
def test_an_invalid_scenario_file_gets_one_error_naming_file_key_and_expectation(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ScenarioError) as raised:
        load_scenario(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: "), f"expected the file first, got {message!r}"
    assert problem in message, f"expected {problem!r} in {message!r}"


@pytest.mark.requirement("SCN-1")
def test_a_missing_scenario_file_or_name_is_named() -> None:
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario("does-not-exist.toml")
    with pytest.raises(ScenarioError, match="no such scenario file or library scenario"):
        resolve("no-such-scenario")


@pytest.mark.requirement("SCN-2")
def test_resume_splits_the_timeline_into_runs() -> None:
    scenario = load_scenario(resolve("stop-and-rescale"))
    assert len(scenario.runs) == 3
    assert [e.action for e in scenario.runs[0].events] == [Action.STOP_WITH_SAVEPOINT]
    assert scenario.runs[1].resume is not None and scenario.runs[1].resume.parallelism == 4
    assert scenario.runs[2].resume is not None and scenario.runs[2].resume.parallelism == 1
    failure = load_scenario(resolve("task-failure-upload")).runs[0].events[0]
    assert (failure.action, failure.phase, failure.epoch, failure.task) == (Action.TASK_FAILURE, Phase.UPLOAD, 3, 2)


@pytest.mark.requirement("SCN-2", "SCN-3", "SCN-4", "SCN-5", "SCN-9")
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
@pytest.mark.parametrize("path", LIBRARY, ids=[p.stem for p in LIBRARY])
def test_every_library_scenario_passes_on_the_simulator(tmp_path: Path, path: Path, backend: str) -> None:
    scenario = load_scenario(path)
    result = run_on_simulator(scenario, tmp_path, backend)
    assert result.passed, f"{scenario.name} on sim/{backend}: {result.failures}"


@pytest.mark.requirement("SCN-2", "SCN-3", "SIM-15")
@pytest.mark.parametrize("path", LIBRARY, ids=[p.stem for p in LIBRARY])
def test_every_library_scenario_passes_on_the_simulator_with_mini_batch(tmp_path: Path, path: Path) -> None:
    """`--mini-batch` on the simulator: state applied once per key per checkpoint keeps every expectation."""
    scenario = load_scenario(path)
    result = run_on_simulator(scenario, tmp_path, "hashmap", mini_batch=True)
    assert result.passed, f"{scenario.name} on sim/hashmap with mini-batch: {result.failures}"


@pytest.mark.requirement("OS-2")
@given(st.integers(1, 6), st.integers(1, 50), st.data())
def test_the_union_state_check_fails_on_any_restore_missing_or_doubling_a_marker(
    parallelism: int, checkpoint_id: int, data: st.DataObject
) -> None:
    """The scenarios' union list check (`job.union_state`) passes every old subtask's marker once, in any order,
    and fails a restore that lost one (an assignment keeping each subtask's own) or read one twice."""
    expected = [marker(j, checkpoint_id) for j in range(parallelism)]
    shuffled = data.draw(st.permutations(expected), label="read in any order")
    assert union_problems([UnionRestore(checkpoint_id, parallelism, 0, tuple(shuffled))]) == []
    wrong = data.draw(
        st.sampled_from([shuffled[:i] + shuffled[i + 1 :] for i in range(parallelism)] + [[*shuffled, shuffled[0]]]),
        label="one marker lost or doubled",
    )
    problems = union_problems([UnionRestore(checkpoint_id, parallelism, 0, tuple(wrong))])
    assert len(problems) == 1 and problems[0].startswith("OS-2"), (
        f"OS-2: union_problems of a restore reading {wrong} (expected {expected}): expected one problem, got {problems}"
    )


@pytest.mark.requirement("SCN-3")
def test_the_exactly_once_check_can_fail() -> None:
    """The checker the scenarios use flags a lost, a duplicated and a reordered record, and a wrong total."""
    expected = {"a": [0, 1, 2]}
    assert check_outputs(expected, [("a", 0, 1), ("a", 1, 2), ("a", 2, 3)]).exactly_once
    lost = check_outputs(expected, [("a", 0, 1), ("a", 2, 2)])
    duplicated = check_outputs(expected, [("a", 0, 1), ("a", 1, 2), ("a", 1, 3), ("a", 2, 4)])
    reordered = check_outputs(expected, [("a", 1, 1), ("a", 0, 2), ("a", 2, 3)])
    assert (lost.lost, duplicated.duplicated, reordered.out_of_order) == (1, 1, 1)


@pytest.mark.requirement("SCN-9")
def test_a_backend_keeping_stale_state_after_restore_fails_a_scenario_on_the_simulator(tmp_path: Path) -> None:
    scenario = load_scenario(resolve("coordinator-crash"))
    result = run_on_simulator(scenario, tmp_path, "tests.broken_backends:stale_restore")
    assert not result.passed, "a backend that keeps stale state after restore passed"
    assert any("wrong running totals" in f for f in result.failures), result.failures


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", *args], capture_output=True, text=True, timeout=600
    )


def test_cli_lists_the_library() -> None:
    done = _cli("scenario", "list")
    assert done.returncode == 0, done.stderr
    for path in LIBRARY:
        assert path.stem in done.stdout


def test_cli_runs_a_scenario_by_name_and_writes_a_report(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    done = _cli(
        "scenario", "run", "coordinator-crash", "--runner", "sim", "--backend", "rocksdb", "--report", str(report)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "passed coordinator-crash" in done.stdout
    data = json.loads(report.read_text())
    assert data["runner"] == "sim" and data["backend"] == "rocksdb"
    assert [r["scenario"] for r in data["results"]] == ["coordinator-crash"] and data["results"][0]["passed"]


@pytest.mark.requirement("SCN-1")
def test_cli_rejects_an_invalid_scenario_file_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(MINIMAL + "[job]\nparallelism = -1\n", encoding="utf-8")
    done = _cli("scenario", "run", str(bad))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"statecert: error: {bad}: job.parallelism: expected a number in 1..256 (scenario sizes are capped so that a "
        "run ends in minutes), got -1"
    )


def test_simulate_reads_a_scenario_file_as_its_job(tmp_path: Path) -> None:
    """The scenario format is the simulator's input: `statecert simulate` runs every run of a scenario, prints a line
    per run and plots them all, savepoints and stops marked, on one time axis."""
    report, plot = tmp_path / "sim.json", tmp_path / "sim.png"
    scenario = tmp_path / "commented.toml"  # a comment first: recognised by its [scenario] table
    scenario.write_text("# my copy\n" + resolve("coordinator-crash").read_text(), encoding="utf-8")
    done = _cli("simulate", str(scenario), "--seed", "11", "--report", str(report))
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = json.loads(report.read_text())["runs"]
    assert len(run["failovers"]) == 2 and run["checks"]["exactly_once"], run["checks"]
    done = _cli("simulate", str(resolve("stop-and-rescale")), "--report", str(report), "--plot", str(plot))
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(report.read_text())
    parallelisms = [r["parallelism"] for r in data["runs"]]
    assert data["passed"] and parallelisms == [2, 4, 1], f"simulate stop-and-rescale: runs at {parallelisms}"
    assert [line.split(":")[0] for line in done.stdout.splitlines() if line.startswith("run ")] == [
        "run 1",
        "run 2",
        "run 3",
    ], done.stdout
    assert plot.stat().st_size > 0, "simulate --plot wrote no PNG"


def test_cli_rejects_an_unknown_backend_before_running() -> None:
    done = _cli("scenario", "run", "storage-outage", "--backend", "no-such-backend")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "no-such-backend" in done.stderr and "passed" not in done.stdout


@pytest.mark.requirement("SCN-1")
@pytest.mark.parametrize(
    "args,problem",
    [
        (["--runner", "sim", "--checkpoint-dir", "/tmp/x"], "--checkpoint-dir: only the Spark runner takes it"),
        (["--runner", "spark", "--checkpoint-dir", "ftp://host/x"], "no fault-injecting wrapper for ftp://"),
        (["--runner", "spark", "--master", "bogus://x"], "argument --master: not a Spark master URL: 'bogus://x'"),
        (["--runner", "spark", "--master", "local[0]"], "argument --master: not a Spark master URL: 'local[0]'"),
        (["--workdir", ""], "argument --workdir: expected a directory, got ''"),
        (["--workdir", "{tmp}/file"], "argument --workdir: {tmp}/file is not a directory"),
        (["--workdir", "{tmp}/file/w"], "argument --workdir: {tmp}/file is not a directory, so {tmp}/file/w cannot"),
        (["--report", "{tmp}/file/r.json"], "argument --report: {tmp}/file is not a directory, so"),
        (["--report", "{tmp}"], "argument --report: {tmp} is a directory; name the file in it"),
    ],
)
def test_cli_rejects_a_bad_option_value_before_running(tmp_path: Path, args: list[str], problem: str) -> None:
    """ERR-2: one line naming the option, status 2, before anything runs (a report path that cannot be written
    failed only after every scenario had run; a master Spark cannot parse ended in Py4J's traceback, status 1; an
    empty --workdir, an unset shell variable, was taken for none)."""
    (tmp_path / "file").write_text("a file, not a directory")
    before = sorted(tmp_path.rglob("*"))
    done = _cli("scenario", "run", "storage-outage", *(a.format(tmp=tmp_path) for a in args))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert problem.format(tmp=tmp_path) in done.stderr and "passed" not in done.stdout, done.stderr
    assert sorted(tmp_path.rglob("*")) == before, "a refused command left files behind"


@pytest.mark.requirement("SCN-9", "SB-3")
def test_library_scenarios_are_gated_on_the_capabilities_they_use() -> None:
    """The scenarios tier runs a scenario only against backends declaring what it uses (windows need timers, a
    rescaled resume rescaling, a canonical savepoint canonical savepoints; every job operator state)."""
    from statecert.scenarios.capabilities import required_capabilities

    needs = {s.name: set(required_capabilities(s)) for s in library()}
    assert all("operator_state" in n for n in needs.values()), needs
    assert {"timers", "rescaling", "canonical_savepoints"} <= needs["event-time-windows"], needs["event-time-windows"]
    assert "timers" not in needs["task-failure-processing"], needs["task-failure-processing"]
    assert "schema_evolution" in needs["schema-evolution"] and "rescaling" in needs["stop-and-rescale"]
    assert "incremental_checkpoints" in needs["incremental-chain"]
