"""The conformance suite checks itself: the reference backends certify, every deliberately broken backend is
rejected naming the requirement it violates, and settings, expected failures and capabilities behave."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from statecert.conformance.report import BASIS
from statecert.spec.requirements import load_requirements
from tests.broken_backends import CAUGHT_BY
from tests.broken_storages import CAUGHT_BY as STORAGE_CAUGHT_BY
from tests.restricted_backends import KEYED_WITHOUT
from tests.test_traceability import citing_tests

ROOT = Path(__file__).resolve().parent.parent
OUTCOMES = {"passed", "failed", "expected-failure", "not-run", "unsupported", "skipped", "not-applicable"}
CATALOG = pytest.mark.catalog
"""The rest of the catalogue of broken backends and storages and of the certification matrix: each case is a whole
`statecert certify` run, and together they took nine tenths of the self-tests' time (3,267 of 3,754 s on two
workers of the 2-core machine). `tox` runs one case of each kind, `tox -e catalog` all of them."""


def first_of_each_chapter(caught_by: Mapping[str, str]) -> list[Any]:
    """The names of `caught_by` in sorted order, all but the first (in catalogue order) caught by each spec chapter
    marked `catalog`: `tox` checks that every chapter's rejection is named, `tox -e catalog` every bug."""
    first: dict[str, str] = {}
    for name, requirement in caught_by.items():
        first.setdefault(requirement.split("-")[0], name)
    sample = set(first.values())
    return [name if name in sample else pytest.param(name, marks=CATALOG) for name in sorted(caught_by)]


def certify(
    *args: str, cwd: Path = ROOT, report: str | None = None, tmpdir: Path | None = None
) -> tuple[int, dict[str, Any], str]:
    """Run `statecert certify` as a user would (with this project's `tests` importable from any directory, and
    `tmpdir` as its temporary directory when given); returns exit status, the JSON report (read from `--report`, or
    from `report` when the settings name it) and the output."""
    workers = [] if "--workers" in args else ["--workers", "1"]  # the self-tests already run on every core
    argv = [sys.executable, "-m", "statecert.cli.main", "certify", *workers, *args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=900, env=env)
    path = Path(cwd, report or (args[args.index("--report") + 1] if "--report" in args else "missing.json"))
    data = json.loads(path.read_text()) if path.is_file() else {}
    return done.returncode, data, done.stdout + done.stderr


def certified(tmp_path: Path, *args: str) -> dict[str, Any]:
    """`statecert certify ARGS --report tmp_path/r.json`, which must exit 0 with the verdict certified; the report."""
    code, report, output = certify(*args, "--report", str(tmp_path / "r.json"))
    assert code == 0, output
    assert report["verdict"] == "certified", output
    return report


def failed_requirements(report: dict[str, Any]) -> set[str]:
    return {rid for rid, info in report["requirements"].items() if info["outcome"] == "failed"}


@pytest.mark.parametrize(
    ("backend", "extra"),
    [
        ("hashmap", []),
        # RocksDB with full checkpoints and with heap timers: `tox -e conformance-rocksdb` (99 and 73 s here).
        ("rocksdb", ["--config", "execution.checkpointing.incremental=true"]),
        pytest.param("hashmap", ["--storage", "memory://certify", "--tier", "contract"], marks=CATALOG),
        pytest.param("hashmap", ["--storage", "jobmanager", "--tier", "contract"], marks=CATALOG),
        # the changelog backend: in CI through the examples (`tox -e example` certifies both wrapped in it)
        pytest.param("hashmap", ["--changelog"], marks=CATALOG),
        # Flink's default materialization interval: checkpoints live on log segments across aborts (KB-SNAP-9)
        pytest.param(
            "hashmap", ["--changelog", "--config", "state.changelog.periodic-materialize.interval=10min"], marks=CATALOG
        ),
    ],
)
def test_reference_backends_certify(tmp_path: Path, backend: str, extra: list[str]) -> None:
    report = certified(tmp_path, backend, "--max-examples", "10", *extra)
    assert report["incomplete"] is None, report["incomplete"]
    assert set(report["requirements"]) == set(load_requirements()), "the report must list every requirement"
    assert {info["outcome"] for info in report["requirements"].values()} <= OUTCOMES
    title = (tmp_path / "r.md").read_text().splitlines()[0]
    name = f"changelog({backend})" if "--changelog" in extra else backend
    assert title == f"# statecert certificate: {name}", f"expected the certificate to name {name}, got {title!r}"


@pytest.mark.parametrize(
    "selection",
    ["test_keys_and_loader.py", "test_keys_and_loader.py::test_current_key_group_is_flinks"],
    ids=["one file", "one test"],
)
def test_a_run_of_part_of_the_suite_certifies_nothing(tmp_path: Path, selection: str) -> None:
    """pytest with the plugin on one of the suite's files (a tox.ini naming a path, say) wrote CERTIFIED, with every
    requirement of the files it did not name "not a backend obligation": the run lists the suite tests it did not
    collect as not run, names them as the cause, and certifies nothing."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "conformance" / "suite" / selection),
            "--statecert-backend",
            "hashmap",
            "--statecert-report",
            str(tmp_path / "r.json"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr  # what ran passed; the report says what it proves
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"] == "not certified", report["verdict"]
    incomplete = report["incomplete"]
    assert incomplete is not None and incomplete["cause"].startswith("not collected: the run named only part"), (
        incomplete
    )
    not_run = {tid.split("::")[0] for tid in incomplete["tests_not_run"]}
    assert {"test_ttl", "test_rescale", "test_model"} <= not_run, sorted(not_run)
    assert "test_changelog" not in not_run and "test_scenarios" not in not_run, "excluded by options, not missing"
    assert report["requirements"]["KB-SNAP-3"]["outcome"] == "not-run", report["requirements"]["KB-SNAP-3"]
    if "::" in selection:
        assert any(t.startswith("test_keys_and_loader::") for t in incomplete["tests_not_run"]), incomplete


def citing_tests_expression(requirement: str) -> str:
    """A `-k` expression selecting the suite tests that cite `requirement`: a failure is attributed only to
    requirements its test cites, so only they can name it violated, and certifying a broken backend against the rest
    of the contract (or the rest of the modules citing it) took most of this file's time."""
    names = citing_tests().get(requirement)
    assert names, f"no suite test cites {requirement}"
    return " or ".join(sorted(names))


@pytest.mark.parametrize("name", first_of_each_chapter(CAUGHT_BY))
def test_broken_backend_is_rejected_naming_the_requirement(tmp_path: Path, name: str) -> None:
    system_temp, working_directory = tmp_path / "tmp", tmp_path / "cwd"
    system_temp.mkdir()
    working_directory.mkdir()
    code, report, output = certify(
        f"tests.broken_backends:{name}",
        "--tier",
        "contract",
        "--max-examples",
        "5",
        "--shrink-seconds",
        "0",  # the rejection is what is checked, not the smallest example (shrinking took most of CI's time)
        "--report",
        str(tmp_path / "r.json"),
        "--",
        "-k",
        citing_tests_expression(CAUGHT_BY[name]),
        tmpdir=system_temp,  # what a broken backend leaves in the system temp dir goes with this test's directory
        cwd=working_directory,  # and what it leaves in its working directory too
    )
    assert code == 1, output
    assert report["verdict"] == "not certified"
    assert CAUGHT_BY[name] in failed_requirements(report), (
        f"{name}: expected {CAUGHT_BY[name]} to be violated, the report names {sorted(failed_requirements(report))}"
    )
    assert f"VIOLATED {CAUGHT_BY[name]}" in output
    noted = [t["id"] for t in report["tests"] if "explicit example:" in t["message"]]
    assert not noted, f"hypothesis's note of an explicit example (fixture reprs, addresses) left in messages: {noted}"


BROKEN_OUTSIDE = '''
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.heap.keyed_backend import HeapKeyedStateBackend


class ForgetfulBackend(HeapKeyedStateBackend):
    """Restores nothing at all."""

    def restore_handles(self, handles):
        return None


class Backend(HashMapStateBackend):
    name = "forgetful"

    def create_keyed_state_backend(self, params):
        return ForgetfulBackend(params)


def factory(config):
    return Backend()
'''


def test_backend_outside_the_project_by_module_attr(tmp_path: Path) -> None:
    (tmp_path / "forgetful_backend.py").write_text(BROKEN_OUTSIDE)
    code, report, output = certify(
        "forgetful_backend:factory",
        "--tier",
        "contract",
        "--max-examples",
        "5",
        "--shrink-seconds",
        "0",
        "--report",
        "out/report.json",
        "--",
        "-k",
        citing_tests_expression("KB-RESTORE-1"),  # what it violates; the whole suite took a minute of CI
        cwd=tmp_path,
    )
    assert code == 1, output
    assert report["backend"]["name"] == "forgetful"
    assert "KB-RESTORE-1" in failed_requirements(report)
    assert "KB-RESTORE-1" in (tmp_path / "out" / "report.md").read_text()


def test_settings_from_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent("""
        [tool.statecert]
        backend = "hashmap"
        tiers = ["contract"]
        max-examples = 3
        seed = 42
        report = "cert/hashmap.json"
    """)
    )
    code, report, output = certify(cwd=tmp_path, report="cert/hashmap.json")
    assert code == 0, output
    assert report["options"]["seed"] == 42 and report["options"]["tiers"] == ["contract"]
    assert report["options"]["max_examples"] == 3 and (tmp_path / "cert" / "hashmap.md").is_file()


def test_expected_failures_are_strict_and_stale_entries_reported(tmp_path: Path) -> None:
    xfail = tmp_path / "known.toml"
    xfail.write_text(
        textwrap.dedent("""
        [expected-failures]
        "test_keyed_state::test_default_is_a_fresh_copy" = "issue 7: default shared"
        "test_keyed_state_properties::test_nested_default_is_a_fresh_copy" = "issue 7: default shared"
    """)
    )
    args = (
        "tests.broken_backends:default_by_reference",
        "--tier",
        "contract",
        "--max-examples",
        "3",
        "--xfail",
        str(xfail),
    )
    code, report, output = certify(*args, "--report", str(tmp_path / "a.json"))
    assert code == 0, output
    assert report["requirements"]["KS-VALUE-2"]["outcome"] == "expected-failure"
    assert "issue 7" in report["requirements"]["KS-VALUE-2"]["reason"]

    xfail.write_text(
        xfail.read_text() + '"test_keyed_state::test_no_such_test" = "gone"\n'
        '"test_keyed_state::test_reducing_state" = "fixed long ago"\n'
    )
    code, report, output = certify(*args, "--report", str(tmp_path / "b.json"))
    assert code == 1, output
    assert report["stale_expected_failures"] == ["test_keyed_state::test_no_such_test"]
    assert report["requirements"]["KS-RED-1"]["outcome"] == "failed", "a listed test that passes fails (strict)"


CAPABILITIES = "[tool.statecert.capabilities]\n"


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ("tiers = 3", "[tool.statecert] tiers: expected tier names, got 3"),
        ("storage = 5", "[tool.statecert] storage: expected a storage name or URL, got 5"),
        ("xfail = 5", "[tool.statecert] xfail: expected a TOML file, got 5"),
        ('config = "x"', "[tool.statecert] config: expected a table of keys and plain values, got 'x'"),
        ('seed = "1"', "[tool.statecert] seed: expected an integer, got '1'"),
        ("seed = 1.5", "[tool.statecert] seed: expected an integer, got 1.5"),
        ("max-examples = true", "[tool.statecert] max-examples: expected an integer, got True"),
        ("shrink-seconds = -1", "[tool.statecert] shrink-seconds: must be at least 0, got -1"),
        ('test-timeout = "10m"', "[tool.statecert] test-timeout: expected an integer, got '10m'"),
        ("test-timeout = 1e9", "[tool.statecert] test-timeout: expected an integer, got 1000000000.0"),
        ("test-timeout = 604801", "[tool.statecert] test-timeout: must lie in 0..604800 seconds"),
        (CAPABILITIES + "teleportation = false", "[tool.statecert.capabilities]: unknown capability 'teleportation'"),
        (CAPABILITIES + 'ttl = "false"', "[tool.statecert.capabilities]: ttl must be true or false, got 'false'"),
        (CAPABILITIES + "timers = 0", "[tool.statecert.capabilities]: timers must be true or false, got 0"),
        (
            CAPABILITIES + "native_savepoint_format = 3",
            "[tool.statecert.capabilities]: native_savepoint_format must be the format's name or false (none), got 3",
        ),
    ],
)
def test_a_bad_pyproject_setting_is_one_line_naming_the_file_and_key(
    tmp_path: Path, setting: str, problem: str
) -> None:
    """A setting of the wrong type in [tool.statecert] ended in a traceback (tiers = 3, config = "x"), was blamed on
    the backend (xfail = 5: "creating 'hashmap' failed"), or was coerced unseen (seed = 1.5 ran with seed 1,
    max-examples = true with 1 example); a value out of range named the command-line option it did not come from;
    and a capability override that is not a boolean (the string "false" is true in Python) left the tests it meant
    to switch off running while the certificate showed the override. Each, and an unknown capability, is one line
    naming the file and the key, status 2, before anything runs."""
    (tmp_path / "pyproject.toml").write_text(f'[tool.statecert]\nbackend = "hashmap"\n{setting}\n')
    code, _, output = certify(cwd=tmp_path)
    lines = output.strip().splitlines()
    assert code == 2 and len(lines) == 1, output
    assert f"pyproject.toml {problem}" in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pyproject.toml"], "a refused run left files behind"


HANG_TIMEOUT = "5"
"""`--test-timeout` of the runs certifying a backend that hangs: each hang costs that much."""


def test_a_test_the_backend_hangs_in_fails_and_the_run_goes_on(tmp_path: Path) -> None:
    """A timer service holding a `threading.Lock` while its callbacks run deadlocks when a callback registers or
    deletes a timer. `statecert certify` hung on it for ever, with no report. Now each test it hangs in fails past
    `--test-timeout`, naming where the test's thread waits, and the next test runs; in a hypothesis property too,
    whose failing example is not shrunk (shrinking would run the hanging example again, with no bound left)."""
    hanging = [
        "test_timers_registered_by_callbacks_fire_in_the_same_advance",
        "test_a_timer_deleted_by_a_callback_never_fires",
    ]
    passing = "test_due_timers_fire_once_in_timestamp_order_with_their_key_current"
    code, report, output = certify(
        "tests.hanging_backends:timer_callbacks_deadlock",
        *("--tier", "contract", "--max-examples", "5", "--test-timeout", HANG_TIMEOUT),
        *("--report", str(tmp_path / "r.json"), "--", "-k", " or ".join([*hanging, passing])),
        tmpdir=tmp_path,
    )
    assert code == 1, output
    outcomes = {t["id"]: (t["outcome"], t["message"]) for t in report["tests"]}
    for tid, (outcome, message) in outcomes.items():
        if tid.split("::")[1].split("[")[0] == passing:
            assert outcome == "passed", f"{tid}: a test after a hang must run as usual, got {outcome}: {message}"
            continue
        assert outcome == "failed", f"{tid}: expected a failure past --test-timeout, got {outcome}"
        assert f"call did not end within {HANG_TIMEOUT} s (--test-timeout)" in message, message
        assert "hanging_backends.py" in message, f"{tid}: the message must say where the test waited: {message}"
    assert {tid.split("::")[1].split("[")[0] for tid in outcomes} == {*hanging, passing}, sorted(outcomes)
    assert {"TM-4", "TM-5"} <= failed_requirements(report), sorted(failed_requirements(report))


def test_a_hang_in_a_thread_of_the_backend_ends_the_run_once_the_report_is_written(tmp_path: Path) -> None:
    """A backend whose asynchronous parts wait on its own uploader threads for the snapshot taken before, which
    KB-SNAP-5 lets run later, leaves an uploader thread waiting for ever: the interpreter would wait for it at exit.
    The test fails past `--test-timeout`, naming the uploader's wait, and the run ends with the report written."""
    code, report, output = certify(
        "tests.hanging_backends:uploads_wait_for_earlier_snapshots",
        *("--tier", "contract", "--max-examples", "5", "--test-timeout", HANG_TIMEOUT),
        *("--report", str(tmp_path / "r.json"), "--", "-k", "test_concurrent_snapshots_each_reflect_their_own_point"),
        tmpdir=tmp_path,
    )
    assert code == 1, output
    assert "KB-SNAP-5" in failed_requirements(report), sorted(failed_requirements(report))
    (test,) = report["tests"]
    assert "thread 'uploader_0' in upload (hanging_backends.py:" in test["message"], test["message"]
    assert "ran past --test-timeout; ending beside threads ['uploader_0']" in output, output


def test_declared_unsupported_capability_is_checked_not_skipped(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.statecert]\nbackend = "hashmap"\nreport = "r.json"\n[tool.statecert.capabilities]\nttl = false\n'
    )
    code, report, output = certify("--tier", "contract", "--max-examples", "3", cwd=tmp_path, report="r.json")
    # the heap backend does support TTL, so it does not raise the documented error when told it should
    assert code == 1, output
    assert "SB-3" in failed_requirements(report)
    assert report["requirements"]["TTL-1"]["outcome"] == "unsupported"


def test_a_run_that_leaves_selected_tests_out_is_incomplete_and_not_certified(tmp_path: Path) -> None:
    """`-- -k ttl` runs the TTL tests only. This once printed CERTIFIED, with 201 requirements "not a backend
    obligation". The report must say which selected tests did not run and why, give their requirements `not-run`,
    and not certify; requirements that the run's options leave out name the option."""
    code, report, output = certify(
        "hashmap", "--tier", "contract", "--max-examples", "3", "--report", str(tmp_path / "r.json"), "--", "-k", "ttl"
    )
    assert code == 1, output
    assert report["verdict"] == "not certified", report["verdict"]
    incomplete = report["incomplete"]
    assert incomplete is not None and "-k 'ttl'" in incomplete["cause"], incomplete
    ran = {t["id"] for t in report["tests"]}
    not_run = set(incomplete["tests_not_run"])
    assert ran and not_run and ran.isdisjoint(not_run), "the tests that ran and those that did not must be told apart"
    assert len(ran) + len(not_run) == incomplete["selected"], (len(ran), len(not_run), incomplete["selected"])
    requirements = report["requirements"]
    assert requirements["TTL-1"]["outcome"] == "passed", requirements["TTL-1"]
    for rid, info in requirements.items():
        if not_run & set(info["tests"]):
            assert info["outcome"] == "not-run", f"{rid}: expected not-run, got {info['outcome']}: {info['reason']}"
    assert requirements["KB-SNAP-3"]["outcome"] == "not-run", requirements["KB-SNAP-3"]
    changelog = requirements["CL-2"]
    assert changelog["outcome"] == "not-applicable" and "--changelog" in changelog["reason"], changelog
    tiers = [info for info in requirements.values() if "scenarios tier" in info["reason"]]
    assert tiers and all(info["outcome"] == "skipped" for info in tiers), tiers
    assert "INCOMPLETE" in output and "NOT CERTIFIED" in output, output
    assert "## Incomplete run" in (tmp_path / "r.md").read_text()


def test_a_run_stopped_at_its_first_failure_says_so(tmp_path: Path) -> None:
    code, report, output = certify(
        "tests.broken_backends:stale_restore",
        "--tier",
        "contract",
        "--max-examples",
        "3",
        "--shrink-seconds",
        "0",
        "--report",
        str(tmp_path / "r.json"),
        "--",
        "--exitfirst",
    )
    assert code == 1, output
    failed = [t for t in report["tests"] if t["outcome"] == "failed"]
    assert len(failed) == 1, [t["id"] for t in failed]
    assert report["incomplete"] is not None and "stopped early" in report["incomplete"]["cause"], report["incomplete"]


@pytest.mark.requirement("ERR-2", "LD-4", "LD-5")
@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["nonesuch"], "unknown state backend 'nonesuch'"),
        (["no_such_module_xyz:factory"], "module 'no_such_module_xyz' cannot be imported"),
        ([], "no backend to certify"),
        (["hashmap", "--tier", "bogus"], "--tier: unknown tier(s) ['bogus']"),
        (["hashmap", "--xfail", "missing.toml"], "missing.toml: expected-failures file not found"),
        (["hashmap", "--xfail", "."], ".: cannot read the expected-failures file: "),
        (["hashmap", "--report", ""], "--report: expected a file for the JSON report, got ''"),
        (["hashmap", "--report", "."], "--report: . is a directory; name the report file in it"),
        (["hashmap", "--report", "/dev/null/r.json"], "--report: /dev/null is not a directory, so /dev/null/r.json"),
        (["hashmap", "--tier", ","], "--tier: no tier given"),
        (["hashmap", "--storage", ""], "--storage: storage must be filesystem, jobmanager or an fsspec URL"),
        (
            ["hashmap", "--config", "state.backend.type=rocksdb"],
            "configuration state.backend.type=rocksdb: conflicts with the backend certified, 'hashmap'",
        ),
        (
            ["--storage-under-test", "filesystem", "--config", "execution.checkpointing.storage=jobmanager"],
            "conflicts with --storage-under-test, 'filesystem'",
        ),
        (
            ["hashmap", "--config", "execution.checkpointing.dir=memory://elsewhere"],
            "certification gives every test a directory of its own; choose where with --storage URL",
        ),
        (["--storage-under-test", "bogus"], "unknown checkpoint storage 'bogus'"),
        (["hashmap", "--shrink-seconds", "-1"], "--shrink-seconds: must be at least 0"),
        (["hashmap", "--test-timeout", "-5"], "--test-timeout: must lie in 0..604800 seconds (0: no bound), got -5"),
        (["hashmap", "--test-timeout", "10e20"], "argument --test-timeout: invalid int value: '10e20'"),
        (["hashmap", "--storage", "bogus"], "--storage: storage must be filesystem, jobmanager or an fsspec URL"),
        (["hashmap", "--storage", "nosuchproto://x"], "--storage: no file system for nosuchproto://"),
        (["hashmap", "--storage", "ftp://host.invalid/x"], "--storage: cannot reach ftp://host.invalid/x: "),
        (["hashmap", "--max-examples", "many"], "argument --max-examples: invalid int value: 'many'"),
        (["hashmap", "--workers", "0"], "argument --workers: "),
        (["hashmap", "--", "--bogus"], "pytest arguments after --: unrecognized arguments: --bogus"),
        (["hashmap", "--", "--maxfail=x"], "pytest arguments after --: argument --maxfail: invalid int value: 'x'"),
    ],
)
def test_bad_certify_input_is_one_line(tmp_path: Path, args: list[str], problem: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", "certify", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stdout + done.stderr
    assert lines[0].startswith("statecert: error: ") and problem in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == [], "a rejected command must leave nothing behind"


def test_the_report_of_several_workers_is_the_report_of_one(tmp_path: Path) -> None:
    """Under pytest-xdist each worker runs a share of the tests and hands its results to the controller, which writes
    the one report: the same tests, outcomes, messages and requirement outcomes as one process gives for one seed."""
    reports = []
    for workers in ("1", "2"):
        _, report, output = certify(
            "tests.broken_backends:map_remove_leaves_entry",
            "--workers",
            workers,
            "--max-examples",
            "5",
            "--report",
            str(tmp_path / f"w{workers}.json"),
            "--",
            "-k",
            "test_keyed_state or test_operator_state",
        )
        assert report, output
        reports.append(report)
    one, two = ({t["id"]: (t["outcome"], t["message"]) for t in r["tests"]} for r in reports)
    assert one == two, "statecert certify --workers 1 and 2: expected the same test results, differing: " + str(
        {tid: (one.get(tid), two.get(tid)) for tid in set(one) | set(two) if one.get(tid) != two.get(tid)}
    )
    outcomes = [{rid: info["outcome"] for rid, info in r["requirements"].items()} for r in reports]
    assert outcomes[0] == outcomes[1], "statecert certify --workers 1 and 2: requirement outcomes differ"
    assert reports[0]["incomplete"]["tests_not_run"] == reports[1]["incomplete"]["tests_not_run"]
    assert "KS-MAP-4" in failed_requirements(reports[1]), failed_requirements(reports[1])


def test_backend_declaring_every_optional_capability_false_is_certified(tmp_path: Path) -> None:
    report = certified(tmp_path, "tests.restricted_backends:nothing_optional", "--max-examples", "5")
    for rid in ("TTL-1", "TTL-2", "OS-1"):
        assert report["requirements"][rid]["outcome"] == "unsupported", (rid, report["requirements"][rid])
    assert report["requirements"]["SB-3"]["outcome"] == "passed"


@CATALOG
@pytest.mark.parametrize("changelog", [[], ["--changelog"]], ids=["plain", "changelog"])
@pytest.mark.parametrize("capability", sorted(KEYED_WITHOUT))
def test_backend_declaring_one_capability_false_is_certified(
    tmp_path: Path, capability: str, changelog: list[str]
) -> None:
    """Each optional capability off alone, the others on, as it is and wrapped in the changelog backend: the tests
    of the others must not lean on it. Each of these was once rejected: a backend without rescaling by the model
    tier's round trip and, under changelog, by an ungated rescaling test; one without canonical savepoints under
    changelog, whose replay handed the restored state over as a canonical savepoint."""
    report = certified(tmp_path, f"tests.restricted_backends:without_{capability}", *changelog, "--max-examples", "5")
    if not changelog:  # the changelog backend keeps timers itself and declares incremental checkpoints
        assert report["requirements"]["SB-3"]["outcome"] == "passed", report["requirements"]["SB-3"]


@pytest.mark.parametrize("changelog", [[], pytest.param(["--changelog"], marks=CATALOG)], ids=["plain", "changelog"])
def test_backend_taking_every_choice_the_spec_leaves_open_is_certified(tmp_path: Path, changelog: list[str]) -> None:
    """The other side of each open choice (tests/lenient_backends.py), as it is and wrapped in the changelog
    backend. Five of them were rejected: `add(None)` ignored by reducing state, by the test that wanted an error
    and, under changelog, by the changelog logging the unchanged value again (refreshing its TTL at replay, or
    failing to serialize None); map `is_empty()` answering from stored entries, by TTL tests that wanted expired
    ones ignored; a snapshot of registered states without entries, by the test that wanted None; a key outside
    the range and a None namespace refused on access, by tests that wanted the setter to raise (and, under
    changelog, a helper that relied on it to skip another subtask's keys)."""
    report = certified(tmp_path, "tests.lenient_backends:every_open_choice", *changelog, "--max-examples", "10")
    chosen = ("KS-RED-2", "KS-MAP-2", "KS-MERGE-1", "TTL-3", "KB-SNAP-7", "KB-KEYS-1", "KB-KEY-2", "KS-NS-1", "OS-3")
    for rid in (*chosen, "KS-2", "OS-6", "SER-5"):
        assert report["requirements"][rid]["outcome"] == "passed", (rid, report["requirements"][rid])


@pytest.mark.parametrize("changelog", [[], pytest.param(["--changelog"], marks=CATALOG)], ids=["plain", "changelog"])
@pytest.mark.parametrize(
    ("backend", "requirements"),
    [
        ("tests.object_backends:keeping_objects", ("KB-SNAP-3", "KB-SNAP-5", "OS-10", "SER-10")),
        pytest.param(
            "tests.sqlite_backends:in_sqlite",
            ("KB-SNAP-2", "KB-SNAP-3", "KB-SNAP-5", "KB-LOCAL-1", "KB-LOCAL-2"),
            marks=CATALOG,
        ),
        ("tests.incremental_backends:by_key_group", ("KB-SNAP-8", "KB-SNAP-9", "KB-SNAP-10", "SP-4", "CS-3")),
    ],
    ids=["objects", "sqlite", "by-key-group"],
)
def test_backend_built_another_way_is_certified(
    tmp_path: Path, changelog: list[str], backend: str, requirements: tuple[str, ...]
) -> None:
    """Correct backends built unlike any reference backend, as they are and wrapped in the changelog backend: the
    suite must not lean on how the reference holds or isolates state.
    - `tests/object_backends.py` holds state objects and serializes them only in a snapshot's asynchronous part, as
      Flink's heap backends do (every other backend here serializes at the write); a value the msgpack default
      refuses then fails the snapshot, the only way SER-10's test reaches its check that a failed snapshot leaves
      no file.
    - `tests/sqlite_backends.py` keeps state in SQLite and isolates a snapshot by a read transaction on a connection
      of its own, which the write-ahead log keeps fixed while the task thread writes.
    - `tests/incremental_backends.py` checkpoints incrementally by key group: a file of the key groups changed since
      the last completed checkpoint, references to earlier files for the rest, and native savepoints of its own
      format; the incremental tests must not lean on RocksDB's SST files."""
    report = certified(tmp_path, backend, *changelog, "--max-examples", "10")
    for rid in requirements:
        assert report["requirements"][rid]["outcome"] == "passed", (rid, report["requirements"][rid])


@pytest.mark.parametrize(
    "storage",
    [
        "filesystem",
        "jobmanager",
        "tests.lenient_backends:storage_reading_current_keys_only",
        "tests.lenient_backends:storage_taking_other_choices",
    ],
)
def test_reference_storages_certify_without_a_backend(tmp_path: Path, storage: str) -> None:
    code, report, output = certify("--storage-under-test", storage, "--report", str(tmp_path / "r.json"), cwd=tmp_path)
    assert code == 0, output
    assert report["verdict"] == "certified" and report["contracts"] == ["checkpoint storage"]
    assert report["storage_under_test"]["requested"] == storage
    assert {t["id"].split("::")[0] for t in report["tests"]} == {"test_storage_contract", "test_storage_locations"}
    assert "certified contracts: checkpoint storage" in output


@pytest.mark.parametrize("name", first_of_each_chapter(STORAGE_CAUGHT_BY))
def test_broken_storage_is_rejected_naming_the_requirement(tmp_path: Path, name: str) -> None:
    code, report, output = certify(
        "--storage-under-test",
        f"tests.broken_storages:{name}",
        "--shrink-seconds",
        "0",
        "--report",
        str(tmp_path / "r.json"),
    )
    assert code == 1, output
    assert STORAGE_CAUGHT_BY[name] in failed_requirements(report), (name, sorted(failed_requirements(report)))
    assert f"VIOLATED {STORAGE_CAUGHT_BY[name]}" in output


def test_every_suite_module_has_a_rank_for_the_likely_root_cause() -> None:
    """The likely root cause is the first failing test in BASIS order; a module missing from BASIS ranked after all
    others, so a timers bug that also failed the model tier was blamed on the model tier (test_timers, test_changelog
    and test_damaged_operator_streams were missing)."""
    suite = sorted(path.stem for path in (ROOT / "conformance" / "suite").glob("test_*.py"))
    assert sorted(BASIS) == suite, (
        f"expected BASIS to rank every suite module, missing {sorted(set(suite) - set(BASIS))}"
    )


def test_same_seed_same_report_and_nothing_left_behind(tmp_path: Path) -> None:
    """Two runs with one seed give the same verdicts, failing tests and messages; neither leaves `.hypothesis/` in the
    author's directory nor anything of statecert's in the temporary directory (pytest's own `pytest-of-*` aside).
    The report records what else a seed reproduces with: the platform and the versions of the libraries that draw
    and run the examples (hypothesis draws a seed's examples by its own version's rules)."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    reports = []
    for run in ("a", "b"):
        code, report, output = certify(
            "tests.broken_backends:map_iteration_pages",
            "--tier",
            "contract,model",
            "--max-examples",
            "5",
            "--seed",
            "1234",
            "--shrink-seconds",
            "0",
            "--report",
            f"{run}.json",
            cwd=tmp_path,
            tmpdir=temporary,
        )
        assert code == 1, output
        reports.append(report)
    first, second = ({t["id"]: (t["outcome"], t["violated"]) for t in r["tests"]} for r in reports)
    assert first == second, "same seed, different test outcomes"
    first, second = ({t["id"]: t["message"] for t in r["tests"] if t["message"]} for r in reports)
    differing = {i: (first[i], second.get(i)) for i in first if first[i] != second.get(i)}
    assert not differing, f"same seed, different messages (fixture reprs or object addresses?): {differing}"
    assert {k: v["outcome"] for k, v in reports[0]["requirements"].items()} == {
        k: v["outcome"] for k, v in reports[1]["requirements"].items()
    }
    cause = reports[0]["likely_root_cause"]
    assert cause and cause["test"].startswith("test_keyed_state_properties::"), cause
    assert "KS-MAP-2" in cause["requirements"]
    assert [t for t in reports[0]["requirements"]["KS-MAP-2"]["failing_tests"] if "KS-MAP-2" in t["message"]]
    expected = {name: importlib.metadata.version(name) for name in ("hypothesis", "pytest", "msgpack", "fsspec")}
    assert reports[0]["libraries"] == expected, f"libraries: expected {expected}, got {reports[0]['libraries']}"
    assert reports[0]["platform"] == platform.platform(), reports[0]["platform"]
    assert not (tmp_path / ".hypothesis").exists(), "certify left an example database in the author's directory"
    left = sorted(p.name for p in temporary.iterdir() if not p.name.startswith("pytest-of-"))
    assert left == [], f"certify left {left} in its temporary directory"


def test_a_check_of_backends_without_a_capability_is_not_applicable_to_one_that_declares_it(tmp_path: Path) -> None:
    """TM-11 checks backends that do not declare timers; on `hashmap`, which declares them, it is not applicable
    (with the reason), not "unsupported by design", which says a capability is missing."""
    _, report, output = certify(
        "hashmap",
        "--report",
        str(tmp_path / "r.json"),
        "--",
        "-k",
        "test_timers_unsupported_fail_only_with_the_documented_error",
    )
    tm11 = report["requirements"]["TM-11"]
    assert tm11["outcome"] == "not-applicable" and "declares" in tm11["reason"], (
        f"statecert certify hashmap: expected TM-11 not-applicable because hashmap declares timers, got {tm11}; "
        f"output:\n{output}"
    )


def test_a_run_without_report_writes_it_to_statecert_report_in_the_working_directory(tmp_path: Path) -> None:
    """Without `--report` the report goes to `./statecert-report/<backend>.json` (the certificate beside it), named
    in the output, where nothing purges it: pytest's temporary directories are removed after a few runs. A second
    run of the same backend replaces it; nothing else is written into the working directory."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    expected = tmp_path / "statecert-report" / "hashmap.json"
    for run in range(2):
        code, _, output = certify("hashmap", "--", "-k", "test_descriptors_without", cwd=tmp_path, tmpdir=temporary)
        assert code == 1, output  # a part of the suite only: incomplete, not certified
        found = re.search(r"report (\S+\.json)", output)
        assert found and Path(found[1]) == expected, (
            f"statecert certify hashmap without --report, run {run + 1}: expected the report {expected} named in "
            f"the output, got {found[1] if found else None}:\n{output}"
        )
        assert expected.is_file() and expected.with_suffix(".md").is_file(), f"{expected} not written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["statecert-report", "tmp"], "certify wrote elsewhere"
    assert sorted(p.name for p in expected.parent.iterdir()) == ["hashmap.json", "hashmap.md"]
