"""The statecert pytest plugin (entry point `pytest11: statecert`): runs the conformance suite against a backend.

Inert unless a backend is named (`--statecert-backend`, or `backend` in `[tool.statecert]` of the invoking
directory's pyproject.toml). Then it loads the backend through the loader, provides the suite's fixtures,
applies tiers, capabilities and expected failures, prints a header saying what is tested with which options,
and writes the report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import platform
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Generator, Iterable
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path
from typing import Any

import pytest

from statecert.conformance import capabilities as caps
from statecert.conformance.expected_failures import load_expected_failures, test_id
from statecert.conformance.report import BASIS, Report, TestResult, root_cause
from statecert.conformance.settings import CertifySettings, SettingsError, resolve
from statecert.conformance.suite_inventory import SUITE_DIR, SUITE_PACKAGE, UncollectedTest, uncollected_tests
from statecert.conformance.time_bound import (
    GRACE_SECONDS,
    TimeBoundExceeded,
    end_the_process_after,
    standard_error_descriptor,
    threads_holding_exit,
    time_bound,
)
from statecert.spec import SPEC_VERSION
from statecert.spec.errors import StateCertError
from statecert.spec.requirements import load_requirements

DEFAULT_REPORT_DIR = "statecert-report"
UNSUPPORTED_BY_DESIGN = "unsupported by design"  # the skip reason of a test of a capability not declared
NOT_APPLICABLE = "not applicable"  # the skip reason of a test of backends without a capability that is declared

_SESSION = pytest.StashKey["CertificationSession"]()
EXPLICIT_EXAMPLE_NOTE = re.compile(r"\n(?:Failing|Falsifying) explicit example:")
"""Where hypothesis's note of a failing `@example` call starts in an assertion's message."""
OBJECT_ADDRESS = re.compile(r" object at 0x[0-9a-fA-F]+")
"""An object's address in a default repr (pytest's assertion explanations show them): it differs run to run."""
CALL_ARGUMENT = re.compile(r"^(\s+)(\w+)=")
"""An argument's first line in hypothesis's note of a failing call (`Failing test case: test_x(` ... `)`)."""


def without_fixture_arguments(message: str, fixtures: Iterable[str]) -> str:
    """`message` without the arguments of hypothesis's failing-call note that are pytest fixtures, whose reprs show
    object addresses and temporary paths (over several lines when long): the drawn arguments stay, and reports of
    one seed stay alike."""
    names, kept, inside = set(fixtures), [], -1  # inside: the indentation of the fixture argument being dropped
    for line in message.splitlines():
        indent = len(line) - len(line.lstrip())
        if inside >= 0 and (indent > inside or (indent == inside and line.lstrip()[:1] in ")]}")):
            continue
        inside = -1
        argument = CALL_ARGUMENT.match(line)
        if argument and argument.group(2) in names:
            inside = len(argument.group(1))
            continue
        kept.append(line)
    return "\n".join(kept)


class CertificationSession:
    """Everything the plugin knows about one certification run."""

    def __init__(self, settings: CertifySettings) -> None:
        from statecert.reference.loader import load_state_backend

        assert settings.backend is not None or settings.storage_under_test is not None
        self.settings = settings
        self.job_config = {**settings.backend_config, "state.backend.type": settings.backend or "hashmap"}
        probe = load_state_backend(job_config=self.job_config)
        from statecert.reference.changelog.backend import ChangelogStateBackend

        self.changelog = isinstance(probe, ChangelogStateBackend)
        """The backend is wrapped in the changelog backend: chapter CL's own tests run too."""
        self.backend_name = str(getattr(probe, "name", settings.backend)) if settings.backend else None
        self.factory = f"{type(probe).__module__}:{type(probe).__qualname__}" if settings.backend else None
        self.capabilities = caps.with_overrides(
            caps.declared(probe), settings.capabilities, "[tool.statecert.capabilities]"
        )
        self.storage_factory_name: str | None = None
        if settings.storage_under_test is not None:
            probe_storage = self.new_storage(f"memory://statecert-probe-{uuid.uuid4().hex}")
            self.storage_factory_name = f"{type(probe_storage).__module__}:{type(probe_storage).__qualname__}"
        self.expected_failures = load_expected_failures(settings.xfail_file) if settings.xfail_file else {}
        self.matched_expected: set[str] = set()
        self.results: list[TestResult] = []
        self.order: dict[str, int] = {}
        self.selected: dict[str, tuple[str, ...]] = {}
        """Every test the run's options select (tiers, subject), with its requirements: each must report an
        outcome, or the run is incomplete."""
        self.excluded: dict[str, tuple[str, str]] = {}
        """Requirement -> (outcome, reason) for a requirement whose suite tests the run's options left out."""
        self.uncollected: list[str] = []
        """Suite tests the run did not collect (it named only some of the suite's files or tests), though its
        options select them: they are in `selected`, and never run."""
        self.stale: list[str] = []
        self.hypothesis_home = ""
        self.report_paths: tuple[Path, Path] | None = None
        """The JSON report and the Markdown certificate, once the run wrote them."""
        self.stderr_fd: int | None = None
        """Where the stacks go when a test outlives its bound and the process must end (`time_bound`): the
        standard error as it was when pytest was configured, before its capture took descriptor 2."""
        self.timed_out: list[str] = []
        """Tests a phase of which ran past `--test-timeout`: the thread it hung in may hang yet."""
        self.started = time.time()
        self.quick = False
        """`--statecert-quick`: the heavy tests are left out (`statecert certify --profile quick`)."""
        self.worker = False
        """This process is a pytest-xdist worker: it runs a share of the tests and hands its results to the
        controller, which writes the report (`WorkerResults`)."""
        self.seconds: dict[str, float] = {}
        """Per test, the seconds its phases took so far."""

    def worker_output(self) -> str:
        """What a pytest-xdist worker hands the controller: its results and what its collection selected."""
        return json.dumps(
            {
                "results": [dataclasses.asdict(r) for r in self.results],
                "selected": {tid: list(rids) for tid, rids in self.selected.items()},
                "excluded": {rid: list(why) for rid, why in self.excluded.items()},
                "uncollected": self.uncollected,
                "matched_expected": sorted(self.matched_expected),
                "timed_out": self.timed_out,
            }
        )

    def merge_worker_output(self, output: str) -> None:
        """A worker's results into this controller's: every worker collected the whole suite, so what it selected
        is the same selection; each ran a share of it."""
        data = json.loads(output)
        self.results += [
            TestResult(**{**r, "requirements": tuple(r["requirements"]), "capabilities": tuple(r["capabilities"]),
                          "violated": tuple(r["violated"])})
            for r in data["results"]
        ]  # fmt: skip
        for tid, rids in data["selected"].items():
            self.selected.setdefault(tid, tuple(rids))
        for rid, (outcome, reason) in data["excluded"].items():
            self.excluded.setdefault(rid, (outcome, reason))
        self.uncollected += [tid for tid in data["uncollected"] if tid not in self.uncollected]
        self.matched_expected |= set(data["matched_expected"])
        self.stale = sorted(set(self.expected_failures) - self.matched_expected)
        self.timed_out += data["timed_out"]

    def new_backend(self, local_dir: Path) -> Any:
        from statecert.reference.loader import load_state_backend

        config = {**self.job_config, "state.backend.rocksdb.localdir": str(local_dir)}
        return load_state_backend(job_config=config)

    def new_storage(self, checkpoint_dir: str, *, with_savepoint_dir: bool = True) -> Any:
        """The storage under test, configured for `checkpoint_dir` (and, unless told otherwise, a savepoint
        directory beside it) on top of the run's configuration, through the loader as a job would get it (LD-3,
        LD-7)."""
        from statecert.reference.loader import load_checkpoint_storage

        assert self.settings.storage_under_test is not None
        config = {
            **self.settings.backend_config,
            "execution.checkpointing.storage": self.settings.storage_under_test,
            "execution.checkpointing.dir": checkpoint_dir,
        }
        if with_savepoint_dir:
            config["execution.checkpointing.savepoint-dir"] = f"{checkpoint_dir}-savepoints"
        return load_checkpoint_storage(job_config=config)

    def backend_version(self) -> str:
        return self._version_of(self.factory) if self.factory else "-"

    def _version_of(self, factory: str) -> str:
        top = factory.split(":", 1)[0].split(".", 1)[0]
        with contextlib.suppress(PackageNotFoundError):
            return version(top)  # most packages are distributed under their module's name: no scan of every one
        for dist in packages_distributions().get(top, []):
            try:
                return version(dist)
            except PackageNotFoundError:
                continue
        return "unknown (module not in an installed distribution)"

    def header(self) -> dict[str, Any]:
        return {
            "statecert_version": version("statecert"),
            "spec_version": SPEC_VERSION,
            "date": datetime.datetime.fromtimestamp(self.started, datetime.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "libraries": {name: _installed_version(name) for name in REPRODUCING_LIBRARIES},
            "contracts": list(self.settings.contracts),
            "storage_under_test": None
            if self.storage_factory_name is None
            else {
                "requested": self.settings.storage_under_test,
                "factory": self.storage_factory_name,
                "version": self._version_of(self.storage_factory_name),
            },
            "backend": {
                "name": self.backend_name,
                "requested": self.settings.backend,
                "factory": self.factory,
                "version": self.backend_version(),
                "capabilities": caps.as_dict(self.capabilities),
            },
            "options": {**self.settings.options(), "quick": self.quick},
        }


REPRODUCING_LIBRARIES = ("hypothesis", "pytest", "msgpack", "fsspec")
"""The libraries a seed's run depends on, whose versions the report records: hypothesis draws a seed's examples by
its own version's rules, pytest runs them, msgpack writes the default serializers' bytes and fsspec the files."""


def _installed_version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("statecert", "statecert conformance suite")
    group.addoption("--statecert-backend", default=None, help="backend name (entry point) or module:attr factory")
    group.addoption("--statecert-config", action="append", default=None, help="key=value for the backend factory")
    group.addoption("--statecert-storage", default=None, help="filesystem (default), jobmanager, or an fsspec URL")
    group.addoption(
        "--statecert-storage-under-test",
        default=None,
        help="certify this checkpoint storage (entry point in statecert.checkpoint_storages, or module:attr)",
    )
    group.addoption("--statecert-tier", default=None, help="comma-separated tiers: contract, model, scenarios")
    group.addoption("--statecert-max-examples", type=int, default=None, help="hypothesis examples per property")
    group.addoption("--statecert-seed", type=int, default=None, help="hypothesis seed")
    group.addoption(
        "--statecert-report",
        default=None,
        help="write the JSON report here (Markdown beside it); default: ./statecert-report/<backend>.json",
    )
    group.addoption("--statecert-xfail", default=None, help="TOML file of expected failures")
    group.addoption(
        "--statecert-shrink-seconds", type=int, default=None, help="time bound on shrinking a failing example"
    )
    group.addoption(
        "--statecert-test-timeout",
        type=int,
        default=None,
        help="seconds each phase of a suite test may take before it fails (default 600; 0: no bound)",
    )
    group.addoption(
        "--statecert-quick",
        action="store_true",
        help="leave out the heavy tests (limits, concurrency, other processes): the inner loop, not a certification",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requirement(*ids): spec requirement IDs this test checks")
    config.addinivalue_line(
        "markers", "capability(*names, supported=True): run only when every named capability is (not) declared"
    )
    config.addinivalue_line("markers", "tier(name): the tier of a conformance test (default: contract)")
    config.addinivalue_line(
        "markers", "heavy: a test of limits, concurrency or other processes, taking a second or more (left out quick)"
    )
    config.addinivalue_line(
        "markers", "subject(name): what a conformance test certifies: backend (default), storage or changelog"
    )
    cli = {
        "backend": config.getoption("--statecert-backend"),
        "backend_config": config.getoption("--statecert-config"),
        "storage": config.getoption("--statecert-storage"),
        "tiers": config.getoption("--statecert-tier"),
        "max_examples": config.getoption("--statecert-max-examples"),
        "seed": config.getoption("--statecert-seed"),
        "report": config.getoption("--statecert-report"),
        "xfail_file": config.getoption("--statecert-xfail"),
        "shrink_seconds": config.getoption("--statecert-shrink-seconds"),
        "storage_under_test": config.getoption("--statecert-storage-under-test"),
        "test_timeout": config.getoption("--statecert-test-timeout"),
    }
    try:
        settings = resolve(cli, Path(config.invocation_params.dir))
        if settings.backend is None and settings.storage_under_test is None:
            return
        session = CertificationSession(settings)
    except (SettingsError, caps.UnknownCapabilityError, StateCertError) as exc:
        raise pytest.UsageError(str(exc)) from None
    session.worker = hasattr(config, "workerinput")  # a pytest-xdist worker: its results go to the controller
    session.quick = bool(config.getoption("--statecert-quick"))
    config.stash[_SESSION] = session
    config.pluginmanager.register(WorkerResults(session), "statecert-worker-results")
    session.hypothesis_home = configure_hypothesis(settings)
    session.stderr_fd = standard_error_descriptor()


def pytest_unconfigure(config: pytest.Config) -> None:
    session = _session(config)
    if session is None:
        return
    if session.stderr_fd is not None:
        os.close(session.stderr_fd)
        session.stderr_fd = None
    if session.timed_out and threads_holding_exit():
        # a thread a hung test left may never end, and the interpreter's exit would wait for it for ever: the report
        # is written, so the process ends (status 1, every thread's stack printed) if it is still there a while on
        end_the_process_after(GRACE_SECONDS, None)


TEMPORARY_HOME_PREFIX = "statecert-hypothesis-"
"""The name a temporary hypothesis home starts with: the one kind the run deletes at its end."""


def hypothesis_cache_dir() -> str:
    """hypothesis's home directory for certification runs: `statecert/hypothesis` in the user's cache directory
    (`$XDG_CACHE_HOME`, else `~/.cache`), where it keeps what it derives from the Unicode tables once instead of
    at every run (about 3 s of each process's first text strategy); with no example database nothing else is
    written there. A fresh temporary directory, deleted after the run, where the cache cannot be created."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    home = os.path.join(base, "statecert", "hypothesis")
    try:
        os.makedirs(home, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=home)  # noqa: SIM115 - a writability check, closed at once
        probe.close()
    except OSError:
        return tempfile.mkdtemp(prefix=TEMPORARY_HOME_PREFIX)
    return home


def configure_hypothesis(settings: CertifySettings) -> str:
    """Reproducible, self-contained property runs: the run's seed drives every hypothesis test (as
    `--hypothesis-seed` would), no example database is read or written (nothing is left in the author's directory,
    and one backend's failures are never replayed against another), and shrinking is time-bounded."""
    from hypothesis import HealthCheck, core
    from hypothesis import settings as hypothesis_settings
    from hypothesis.internal.conjecture import engine

    hypothesis_settings.register_profile(
        "statecert-certify",
        max_examples=settings.max_examples,
        deadline=None,
        database=None,
        derandomize=False,
        print_blob=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    hypothesis_settings.load_profile("statecert-certify")
    core.global_force_seed = settings.seed  # type: ignore[assignment]
    # hypothesis also caches under its home directory (default ./.hypothesis): keep it out of the author's project
    from hypothesis.configuration import set_hypothesis_home_dir

    home = hypothesis_cache_dir()
    set_hypothesis_home_dir(home)
    if hasattr(engine, "MAX_SHRINKING_SECONDS"):
        engine.MAX_SHRINKING_SECONDS = settings.shrink_seconds
    return home


WORKER_OUTPUT = "statecert"
"""The key of a pytest-xdist worker's output that carries its certification results."""


class WorkerResults:
    """Certification under pytest-xdist (`statecert certify` runs on the machine's cores): each worker hands its
    results to the controller as it finishes, and the controller writes the one report."""

    def __init__(self, session: CertificationSession) -> None:
        self.session = session

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT)
        if output is not None:
            self.session.merge_worker_output(output)


def _session(config: pytest.Config) -> CertificationSession | None:
    return config.stash.get(_SESSION, None)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    session = _session(config)
    if session is None:
        return None
    h = session.header()
    declared = ", ".join(f"{k}={v}" for k, v in h["backend"]["capabilities"].items())
    o = h["options"]
    lines = [f"statecert {h['statecert_version']} (spec {h['spec_version']}): certifying {', '.join(h['contracts'])}"]
    if session.settings.backend:
        lines += [
            f"backend {h['backend']['name']!r} ({h['backend']['factory']}, version {h['backend']['version']})",
            f"capabilities: {declared}",
        ]
    if h["storage_under_test"]:
        s = h["storage_under_test"]
        lines.append(f"checkpoint storage {s['requested']!r} ({s['factory']}, version {s['version']})")
    return [
        *lines,
        f"options: tiers={','.join(o['tiers'])} storage={o['storage']} max_examples={o['max_examples']} "
        f"seed={o['seed']} shrink_seconds={o['shrink_seconds']} test_timeout={o['test_timeout']} "
        f"config={o['backend_config'] or '{}'} expected_failures={o['expected_failures']}",
    ]


def _in_suite(item: pytest.Item) -> bool:
    """Whether a collected test belongs to the conformance suite (by file, whatever name it was imported under)."""
    return Path(str(item.path)).resolve().parent == SUITE_DIR


def capabilities_of(item: pytest.Item) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The capabilities a test uses, and those it needs declared False (it checks their documented error)."""
    used: list[str] = []
    unsupported: list[str] = []
    for marker in item.iter_markers("capability"):
        (used if marker.kwargs.get("supported", True) else unsupported).extend(marker.args)
    return tuple(dict.fromkeys(used)), tuple(dict.fromkeys(unsupported))


def _requirements_of(item: pytest.Item | UncollectedTest) -> tuple[str, ...]:
    marker = item.get_closest_marker("requirement")
    return tuple(marker.args) if marker else ()


def _excluded(session: CertificationSession, item: pytest.Item | UncollectedTest) -> bool:
    """Whether the run's options leave `item` out; if so its requirements are recorded as left out, and why."""
    excluded = _exclusion(session, item)
    if excluded is None:
        return False
    for rid in _requirements_of(item):
        if session.excluded.get(rid, ("",))[0] != "skipped":  # a tier left out outranks a subject
            session.excluded[rid] = excluded
    return True


def _exclusion(session: CertificationSession, item: pytest.Item | UncollectedTest) -> tuple[str, str] | None:
    """Why the run's options leave a suite test out, as the (outcome, reason) its requirements then get; None if
    the test belongs to the run."""
    tier_marker = item.get_closest_marker("tier")
    tier = tier_marker.args[0] if tier_marker else "contract"
    if tier not in session.settings.tiers:
        tiers = ",".join(session.settings.tiers)
        return "skipped", f"checked in the {tier} tier, which this run did not select (--tier {tiers})"
    subject = item.get_closest_marker("subject")
    subject_name = subject.args[0] if subject else "backend"
    if subject_name in ("backend", "changelog") and not session.settings.backend:
        return "not-applicable", "checked when certifying a state backend; this run certified a checkpoint storage"
    if session.quick and item.get_closest_marker("heavy") is not None:
        return "skipped", "a heavy test (limits, concurrency, other processes), left out by the quick profile"
    if subject_name == "changelog" and not session.changelog:
        # chapter CL checks the changelog wrapper: only with --changelog
        return "not-applicable", "checked when certifying through the changelog backend (--changelog)"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest's own -k, -m and --deselect, so that what they leave out is known
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    session = _session(config)
    if session is None:
        return
    rank = {name: i for i, name in enumerate(BASIS)}
    # the suite's modules run from the most basic contract to the most composite, so that --exitfirst stops in the
    # chapter of the bug (state semantics before snapshots, snapshots before rescaling and savepoints)
    items.sort(key=lambda item: rank.get(Path(str(item.path)).stem, len(BASIS)) if _in_suite(item) else -1)
    keep = []
    for item in items:
        if not _in_suite(item):
            keep.append(item)
            continue
        if _excluded(session, item):
            continue
        keep.append(item)
        tid = test_id(item.path.stem, item.name)
        session.order[tid] = len(session.order)
        session.selected[tid] = _requirements_of(item)
        used, unsupported = capabilities_of(item)
        try:
            lacking = caps.missing(session.capabilities, used) + caps.missing(session.capabilities, unsupported, False)
        except caps.UnknownCapabilityError as exc:
            raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
        missing = [n for n in lacking if n in used]
        if missing:
            states = ", ".join(f"{n} not declared" for n in missing)
            item.add_marker(pytest.mark.skip(reason=f"{UNSUPPORTED_BY_DESIGN}: capability {states}"))
        elif lacking:  # a check of backends without a capability this backend declares
            states = ", ".join(lacking)
            why = f"{NOT_APPLICABLE}: checks backends that do not declare {states}; this backend declares it"
            item.add_marker(pytest.mark.skip(reason=why))
        tid = test_id(item.path.stem, item.name)
        reason = session.expected_failures.get(tid)
        if reason is not None:
            session.matched_expected.add(tid)
            item.add_marker(pytest.mark.xfail(reason=f"known bug: {reason}", strict=True))
    items[:] = keep
    collected = {(Path(str(i.path)).stem, getattr(i, "originalname", i.name)) for i in keep if _in_suite(i)}
    modules = {Path(str(i.path)).stem: i.module for i in keep if _in_suite(i) and isinstance(i, pytest.Function)}
    for test in uncollected_tests(collected, modules):
        if not _excluded(session, test):
            tid = test_id(test.module, test.name)
            session.uncollected.append(tid)
            session.selected[tid] = _requirements_of(test)
    session.stale = sorted(set(session.expected_failures) - session.matched_expected)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with _bounded(item, "setup"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _bounded(item, "call"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    with _bounded(item, "teardown"):
        return (yield)


def _bounded(item: pytest.Item, phase: str) -> contextlib.AbstractContextManager[None]:
    """The run's time bound on one phase of a suite test (none outside the suite or a certification run)."""
    session = _session(item.config)
    if session is None or not _in_suite(item):
        return contextlib.nullcontext()
    return time_bound(session.settings.test_timeout, phase, stderr=session.stderr_fd)


def violated_requirements(requirements: tuple[str, ...], message: str) -> tuple[str, ...]:
    """The requirements a failure is attributed to: those of the test that its assertion message names (the
    suite's messages start with the ID they check), else all of the test's requirements."""
    named = tuple(rid for rid in requirements if re.search(rf"(?<![A-Z-]){re.escape(rid)}(?![0-9])", message))
    return named or requirements


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    session = _session(item.config)
    if session is None or not _in_suite(item):
        return report
    tid = test_id(item.path.stem, item.name)
    session.seconds[tid] = session.seconds.get(tid, 0.0) + report.duration
    if report.when == "teardown" and report.passed:
        for result in reversed(session.results):  # the teardown's time to the result of its test
            if result.test_id == tid:
                result.seconds = session.seconds[tid]
                break
    if (
        report.when == "call"
        or (report.when == "setup" and not report.passed)
        or (report.when == "teardown" and report.failed)
    ):
        requirements = _requirements_of(item)
        used, unsupported = capabilities_of(item)
        if hasattr(report, "wasxfail"):
            outcome = "failed" if report.passed else "expected-failure"  # strict xfail that passed is a failure
        elif report.skipped:
            skipped_because = str(report.longrepr)
            outcome = (
                "unsupported"
                if UNSUPPORTED_BY_DESIGN in skipped_because
                else "not-applicable"
                if NOT_APPLICABLE in skipped_because
                else "skipped"
            )
        else:
            outcome = report.outcome
        message = ""
        if call.excinfo is not None and call.excinfo.errisinstance(TimeBoundExceeded):
            session.timed_out.append(test_id(item.path.stem, item.name))
        if report.failed and report.longrepr is not None:
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1]
            # hypothesis notes an explicit example's call, fixtures' reprs (object addresses, temporary paths)
            # included: the assertion already names the example, and the report stays the same for the same seed
            message = EXPLICIT_EXAMPLE_NOTE.split(message, maxsplit=1)[0]
            message = without_fixture_arguments(message, getattr(item, "fixturenames", ()))
            message = OBJECT_ADDRESS.sub(" object", message)
        elif hasattr(report, "wasxfail"):
            message = report.wasxfail
        elif report.skipped and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2])
        session.results.append(
            TestResult(
                test_id(item.path.stem, item.name),
                outcome,
                requirements,
                used + unsupported,
                " ".join(message.split())[:2000],
                violated_requirements(requirements, message) if outcome == "failed" else (),
                session.order.get(tid, len(session.order)),
                session.seconds[tid],
            )
        )
    return report


def _why_not_run(session: pytest.Session) -> str:
    """What kept selected tests from running, as far as pytest tells: its selection options, or a stop."""
    option = session.config.option
    causes = []
    cert = _session(session.config)
    if cert is not None and cert.uncollected:
        modules = sorted({tid.split("::")[0] for tid in cert.uncollected})
        causes.append(
            f"not collected: the run named only part of the suite ({len(cert.uncollected)} tests of "
            f"{', '.join(modules)}); run all of it with `statecert certify` or `pytest --pyargs {SUITE_PACKAGE}`"
        )
    if getattr(option, "keyword", ""):
        causes.append(f"deselected by -k {option.keyword!r}")
    if getattr(option, "markexpr", ""):
        causes.append(f"deselected by -m {option.markexpr!r}")
    if getattr(option, "deselect", None):
        causes.append("deselected by --deselect")
    if session.shouldfail or session.shouldstop:
        causes.append(f"the run stopped early ({session.shouldfail or session.shouldstop})")
    return "; ".join(causes) or "pytest did not run them (interrupted, or selected away by a plugin)"


def _default_report_path(cert: CertificationSession, config: pytest.Config) -> Path:
    """Where a run given no `--statecert-report` writes its report: `./statecert-report/<what was certified>.json`
    (and `.md`) in the directory the run started in, where nothing purges it; a later run of the same backend
    replaces it."""
    subject = "+".join(n for n in (cert.settings.backend, cert.settings.storage_under_test) if n)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", subject).strip("-.") or "certificate"
    return Path(config.invocation_params.dir) / DEFAULT_REPORT_DIR / f"{name}.json"


def report_paths(config: pytest.Config) -> tuple[Path, Path] | None:
    """The JSON report and the Markdown certificate a finished certification run wrote; None before or without."""
    cert = _session(config)
    return None if cert is None else cert.report_paths


def timed_out_tests(config: pytest.Config) -> list[str]:
    """The tests of a certification run a phase of which ran past `--test-timeout`."""
    cert = _session(config)
    return [] if cert is None else list(cert.timed_out)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    cert = _session(session.config)
    if cert is None:
        return
    if os.path.basename(cert.hypothesis_home).startswith(TEMPORARY_HOME_PREFIX):
        shutil.rmtree(cert.hypothesis_home, ignore_errors=True)
    if cert.worker:
        session.config.workeroutput[WORKER_OUTPUT] = cert.worker_output()  # type: ignore[attr-defined]
        return
    requirements = load_requirements()
    unknown: dict[str, list[str]] = {}
    for result in cert.results:
        for rid in result.requirements:
            if rid not in requirements:
                unknown.setdefault(rid, []).append(result.test_id)
    ran = {result.test_id for result in cert.results}
    not_run = {tid: rids for tid, rids in cert.selected.items() if tid not in ran}
    incomplete = None
    if not_run:
        incomplete = {
            "tests_not_run": list(not_run),  # in collection order, as `selected` is
            "selected": len(cert.selected),
            "cause": _why_not_run(session),
        }
    report = Report(cert.header(), requirements, cert.results, cert.stale, unknown, not_run, cert.excluded, incomplete)
    path = Path(cert.settings.report) if cert.settings.report else _default_report_path(cert, session.config)
    json_path, md_path = report.write(path)
    cert.report_paths = (json_path, md_path)
    if report.stale_expected_failures or unknown:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    cert = _session(config)
    if cert is None:
        return
    tr = terminalreporter
    tr.section("statecert certification")
    failed: dict[str, list[str]] = {}
    for r in cert.results:
        if r.outcome == "failed":
            for rid in r.violated or ("(no requirement)",):
                failed.setdefault(rid, []).append(f"{r.test_id}: {r.message}")
    for rid, tests in sorted(failed.items()):
        tr.write_line(f"VIOLATED {rid}")
        for line in tests:
            tr.write_line(f"    {line}")
    root = root_cause(cert.results)
    if root is not None:
        tr.write_line(f"LIKELY ROOT CAUSE {root.test_id}: {root.message}")
    for entry in cert.stale:
        tr.write_line(f"STALE expected failure (matches no test): {entry}")
    paths = cert.report_paths
    if paths:
        tr.write_line(f"report: {paths[0]} (certificate: {paths[1]})")


@pytest.fixture
def statecert_certification(request: pytest.FixtureRequest) -> CertificationSession:
    """The running certification (backend, settings); skips when no backend was named."""
    session = _session(request.config)
    if session is None:
        pytest.skip("no backend to certify: pass --statecert-backend or set backend in [tool.statecert]")
    return session
