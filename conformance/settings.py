"""Certification settings: command-line options over `[tool.statecert]` in the user's `pyproject.toml`."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec

from statecert.cli.arguments import output_file_problem
from statecert.conformance.capabilities import UnknownCapabilityError, with_overrides
from statecert.spec.backend import BackendCapabilities

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TIERS = ("contract", "model", "scenarios")
DEFAULT_TIERS = ("contract", "model")  # scenarios: on request, it runs Spark
DEFAULT_TEST_TIMEOUT = 600
"""Seconds each phase of a suite test may take (`--test-timeout`, `conformance.time_bound`); 0 is no bound."""
MAX_TEST_TIMEOUT = 7 * 24 * 3600
"""A week: beyond it the bound means nothing, and `setitimer` takes any float, so a typo's 10**20 is refused."""


class SettingsError(ValueError):
    """An invalid setting; the message names the file or option and the problem."""


@dataclass(frozen=True)
class CertifySettings:
    backend: str | None = None
    backend_config: dict[str, str] = field(default_factory=dict)
    storage: str = "filesystem"
    tiers: tuple[str, ...] = DEFAULT_TIERS
    max_examples: int = 25
    seed: int = 0
    report: str | None = None
    xfail_file: str | None = None
    capabilities: dict[str, Any] = field(default_factory=dict)
    shrink_seconds: int = 30
    storage_under_test: str | None = None
    test_timeout: int = DEFAULT_TEST_TIMEOUT

    @property
    def contracts(self) -> tuple[str, ...]:
        """What this run certifies: a state backend, a checkpoint storage, or both."""
        return (("state backend",) if self.backend else ()) + (
            ("checkpoint storage",) if self.storage_under_test else ()
        )

    def options(self) -> dict[str, Any]:
        return {
            "storage": self.storage,
            "tiers": list(self.tiers),
            "max_examples": self.max_examples,
            "seed": self.seed,
            "backend_config": dict(self.backend_config),
            "expected_failures": self.xfail_file,
            "capability_overrides": dict(self.capabilities),
            "shrink_seconds": self.shrink_seconds,
            "storage_under_test": self.storage_under_test,
            "test_timeout": self.test_timeout,
        }


def read_pyproject(directory: Path) -> dict[str, Any]:
    """`[tool.statecert]` of `directory/pyproject.toml`, or {} when there is none."""
    path = directory / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: invalid TOML: {exc}") from None
    section = data.get("tool", {}).get("statecert", {})
    if not isinstance(section, dict):
        raise SettingsError(f"{path}: [tool.statecert] must be a table")
    unknown = set(section) - {
        "backend",
        "config",
        "storage",
        "tiers",
        "max-examples",
        "seed",
        "report",
        "xfail",
        "capabilities",
        "shrink-seconds",
        "storage-under-test",
        "test-timeout",
    }
    if unknown:
        raise SettingsError(f"{path}: unknown key(s) in [tool.statecert]: {sorted(unknown)}")
    return section


def parse_tiers(value: Any, where: str) -> tuple[str, ...]:
    tiers = tuple(t.strip() for t in (value.split(",") if isinstance(value, str) else value) if t.strip())
    bad = [t for t in tiers if t not in TIERS]
    if not tiers:
        raise SettingsError(f"{where}: no tier given; tiers are {list(TIERS)}")
    if bad:
        raise SettingsError(f"{where}: unknown tier(s) {bad}; tiers are {list(TIERS)}")
    return tiers


def resolve(cli: dict[str, Any], directory: Path) -> CertifySettings:
    """Command-line values (None when not given) over the pyproject section over defaults."""
    file = read_pyproject(directory)
    where = f"{directory / 'pyproject.toml'} [tool.statecert]"

    def pick(cli_key: str, file_key: str, default: Any) -> Any:
        value = cli.get(cli_key)
        return value if value is not None else file.get(file_key, default)

    def source(cli_key: str, file_key: str, option: str) -> str:
        """Where a setting came from, for its error: the option, or the file and key."""
        return option if cli.get(cli_key) is not None else f"{where} {file_key}"

    def integer(cli_key: str, file_key: str, option: str, default: int) -> int:
        value = pick(cli_key, file_key, default)
        if not isinstance(value, int) or isinstance(value, bool):  # TOML's 1.5, "1" or true is not an integer
            raise SettingsError(f"{source(cli_key, file_key, option)}: expected an integer, got {value!r}")
        return value

    def factory_name(cli_key: str, file_key: str, option: str, what: str) -> str | None:
        """A backend or storage to load: absent, or a non-empty name (an empty one, say from an unset shell
        variable, must not fall back to the default backend and certify that)."""
        value = pick(cli_key, file_key, None)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            source = option if cli.get(cli_key) is not None else f"{where} {file_key}"
            raise SettingsError(f"{source}: expected {what} (an entry-point name or module:attr), got {value!r}")
        return value

    backend = factory_name("backend", "backend", "backend", "a state backend")
    storage_under_test = factory_name(
        "storage_under_test", "storage-under-test", "--storage-under-test", "a checkpoint storage"
    )
    file_config = file.get("config", {})
    if not isinstance(file_config, dict) or not all(
        isinstance(v, str | int | float | bool) for v in file_config.values()
    ):
        raise SettingsError(f"{where} config: expected a table of keys and plain values, got {file_config!r}")
    config = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in file_config.items()}
    for item in cli.get("backend_config") or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SettingsError(f"--config: expected key=value, got {item!r}")
        config[key] = value
    check_config_names_nothing_certification_sets(config, backend, storage_under_test)
    max_examples = integer("max_examples", "max-examples", "--max-examples", 25)
    seed = integer("seed", "seed", "--seed", 0)
    shrink_seconds = integer("shrink_seconds", "shrink-seconds", "--shrink-seconds", 30)
    if max_examples < 1:
        raise SettingsError(
            f"{source('max_examples', 'max-examples', '--max-examples')}: must be at least 1, got {max_examples}"
        )
    if shrink_seconds < 0:
        where_from = source("shrink_seconds", "shrink-seconds", "--shrink-seconds")
        raise SettingsError(f"{where_from}: must be at least 0, got {shrink_seconds}")
    test_timeout = integer("test_timeout", "test-timeout", "--test-timeout", DEFAULT_TEST_TIMEOUT)
    if not 0 <= test_timeout <= MAX_TEST_TIMEOUT:
        where_from = source("test_timeout", "test-timeout", "--test-timeout")
        raise SettingsError(
            f"{where_from}: must lie in 0..{MAX_TEST_TIMEOUT} seconds (0: no bound), got {test_timeout}"
        )
    if not 0 <= seed < 2**64:
        raise SettingsError(f"{source('seed', 'seed', '--seed')}: must lie in 0..2**64-1, got {seed}")
    storage = pick("storage", "storage", "filesystem")
    if not isinstance(storage, str):
        raise SettingsError(
            f"{source('storage', 'storage', '--storage')}: expected a storage name or URL, got {storage!r}"
        )
    check_storage(storage, "--storage" if cli.get("storage") is not None else where)
    xfail_file = pick("xfail_file", "xfail", None)
    if xfail_file is not None and (not isinstance(xfail_file, str) or not xfail_file.strip()):
        raise SettingsError(f"{source('xfail_file', 'xfail', '--xfail')}: expected a TOML file, got {xfail_file!r}")
    tiers = pick("tiers", "tiers", ",".join(DEFAULT_TIERS))
    if not isinstance(tiers, str) and not (isinstance(tiers, list) and all(isinstance(t, str) for t in tiers)):
        raise SettingsError(f"{source('tiers', 'tiers', '--tier')}: expected tier names, got {tiers!r}")
    report = pick("report", "report", None)
    if report is not None:
        report_from = source("report", "report", "--report")
        if not isinstance(report, str) or not report.strip():
            raise SettingsError(f"{report_from}: expected a file for the JSON report, got {report!r}")
        if Path(report).is_dir():
            raise SettingsError(f"{report_from}: {report} is a directory; name the report file in it (report.json)")
        problem = output_file_problem(report)
        if problem is not None:
            raise SettingsError(f"{report_from}: {problem}")
    capabilities = file.get("capabilities", {})
    if not isinstance(capabilities, dict):
        raise SettingsError(f"{where}: capabilities must be a table")
    try:  # names and value types, before anything is loaded
        with_overrides(
            BackendCapabilities(), capabilities, f"{directory / 'pyproject.toml'} [tool.statecert.capabilities]"
        )
    except UnknownCapabilityError as exc:
        raise SettingsError(str(exc)) from None
    return CertifySettings(
        backend=backend,
        backend_config=config,
        storage=storage,
        tiers=parse_tiers(tiers, "--tier" if cli.get("tiers") is not None else where),
        max_examples=max_examples,
        seed=seed,
        report=report,
        xfail_file=xfail_file,
        capabilities=dict(capabilities),
        shrink_seconds=shrink_seconds,
        storage_under_test=storage_under_test,
        test_timeout=test_timeout,
    )


SET_BY_CERTIFICATION = (
    "execution.checkpointing.dir",
    "state.checkpoints.dir",
    "execution.checkpointing.savepoint-dir",
    "state.savepoints.dir",
)
"""Keys certification sets for every test (a fresh directory each, under --storage): a value given for them would be
overridden unseen."""


def check_config_names_nothing_certification_sets(
    config: dict[str, str], backend: str | None, storage_under_test: str | None
) -> None:
    """The configuration (`--config`, `[tool.statecert.config]`) may not name another backend or storage than the one
    certified, nor the directories certification sets: either would be overridden, and the certificate would not be
    of what the user asked for (where the checkpoints go is `--storage`)."""
    named = (
        (backend, ("state.backend.type", "state.backend"), "the backend certified"),
        (storage_under_test, ("execution.checkpointing.storage", "state.checkpoint-storage"), "--storage-under-test"),
    )
    for name, keys, what in named:
        for key in keys:
            if name is not None and key in config and config[key] != name:
                raise SettingsError(f"configuration {key}={config[key]}: conflicts with {what}, {name!r}")
    for key in SET_BY_CERTIFICATION:
        if key in config:
            raise SettingsError(
                f"configuration {key}={config[key]}: certification gives every test a directory of its own; "
                "choose where with --storage URL"
            )


def check_storage(storage: str, where: str) -> None:
    """`filesystem`, `jobmanager`, or a URL of a file system fsspec knows; anything else is a settings error, never
    a directory name (a typo would otherwise be created as a directory and blamed on the backend)."""
    if storage in ("filesystem", "jobmanager"):
        return
    protocol, sep, rest = storage.partition("://")
    if not sep or not protocol or not rest:
        raise SettingsError(
            f"{where}: storage must be filesystem, jobmanager or an fsspec URL such as memory://certify, "
            f"got {storage!r}"
        )
    try:
        fsspec.get_filesystem_class(protocol)
    except (ValueError, ImportError) as exc:
        raise SettingsError(f"{where}: no file system for {protocol}:// ({exc})") from None
    try:  # one read-only look before the suite, so that an unreachable storage is one line, not every test failing
        fs, path = fsspec.url_to_fs(storage)
        fs.exists(path)
    except Exception as exc:  # each file system raises its own: socket errors, refused credentials...
        raise SettingsError(f"{where}: cannot reach {storage}: {type(exc).__name__}: {exc}") from None
