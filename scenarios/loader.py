"""Reading a scenario file (TOML). Every problem is one `ScenarioError` naming the file, the key and what was
expected; nothing is guessed (unknown keys and sections are errors too)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from statecert.reference import config as cfg
from statecert.reference.config import catalog
from statecert.reference.coordinator.restart import FixedDelayRestart, RestartStrategy, restart_strategy_from_config
from statecert.reference.coordinator.settings import CheckpointingMode, CheckpointingSettings
from statecert.reference.key_types import KEY_TYPES, KeyType
from statecert.reference.loader import (
    BUILT_IN_BACKENDS,
    STATE_BACKEND_GROUP,
    load_configured_factory,
    registered_names,
)
from statecert.reference.simulator.flink_config import (
    checkpoint_storage_kind,
    checkpointing_as_config,
    refuse_keys_chosen_by_the_runner,
)
from statecert.scenarios.model import (
    Action,
    Bound,
    CheckpointConfig,
    Event,
    Expectations,
    InputConfig,
    JobConfig,
    Phase,
    Run,
    Scenario,
)
from statecert.spec.errors import IllegalConfigurationError, ScenarioError, StateCertError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

RUNNERS = ("sim", "spark", "flink")
OPERATORS = ("count", "sum")
KEY_SELECTORS = ("key", "split")
STORAGES = ("filesystem", "jobmanager")
ERROR_CONDITIONS = ("always", "native-format-differs")
SECTIONS = ("scenario", "job", "input", "checkpointing", "restart", "timeline", "expect", "config")

Check = Callable[[Any], bool]


def _positive(v: Any) -> bool:
    return bool(v >= 1)


def _non_negative(v: Any) -> bool:
    return bool(v >= 0)


def _below(limit: int) -> Check:
    return lambda v: bool(0 <= v < limit)


def _between(low: int, high: int) -> Check:
    return lambda v: bool(low <= v <= high)


# Caps on a scenario's size, so that a typo cannot start a run of hours (a scenario is a test, not a load test).
MAX_PARALLELISM = 256
MAX_SOURCES = 64
MAX_RECORDS_PER_SOURCE = 1_000_000
MAX_KEYS_PER_SOURCE = 1_000_000
MAX_EPOCH = 10_000
MAX_COUNT = 1_000
CAPPED = "(scenario sizes are capped so that a run ends in minutes)"


def _backend_name(name: str) -> str:
    """Built-in names in any case, as Flink matches them (LD-3)."""
    return name.lower() if name.lower() in BUILT_IN_BACKENDS else name


def backend_problem(name: str) -> str | None:
    """Why the loader cannot resolve backend `name` (a built-in or registered name, or an importable
    `module:attr`), or None when it can."""
    if name in registered_names(STATE_BACKEND_GROUP) or name.lower() in BUILT_IN_BACKENDS:
        return None
    if ":" in name:
        try:
            load_configured_factory(name, STATE_BACKEND_GROUP, "state backend")
        except StateCertError as exc:
            return str(exc)
        return None
    known = sorted(registered_names(STATE_BACKEND_GROUP))
    return f"unknown state backend {name!r}; known names are {known}, or a module:attr factory path"


class _Reader:
    """Typed access to one table, with errors naming the file and the dotted key."""

    def __init__(self, path: Path, where: str, table: Any, allowed: Mapping[str, type]) -> None:
        self.path, self.where = path, where
        if not isinstance(table, dict):
            self.fail(where, "expected a table")
        unknown = sorted(set(table) - set(allowed))
        if unknown:
            self.fail(where, f"unknown key(s) {unknown}; expected some of {sorted(allowed)}")
        self.table, self.allowed = table, allowed

    def fail(self, key: str, problem: str) -> NoReturn:
        raise ScenarioError(f"{self.path}: {key}: {problem}")

    def get(self, key: str, default: Any, check: Check | None = None, what: str = "", choices: Any = ()) -> Any:
        if key not in self.table:
            return default
        value, kind = self.table[key], self.allowed[key]
        name = f"{self.where}.{key}"
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            self.fail(name, f"expected {_type_name(kind)}, got {value!r}")
        if choices and value not in choices:
            self.fail(name, f"expected one of {list(choices)}, got {value!r}")
        if check is not None and not check(value):
            self.fail(name, f"expected {what}, got {value!r}")
        return value


def _type_name(kind: type) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "an array"}.get(
        kind, kind.__name__
    )


def load_scenario(file: str | Path) -> Scenario:
    path = Path(file)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: invalid TOML: {exc}") from None
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise ScenarioError(f"{path}: unknown section(s) {unknown}; expected some of {list(SECTIONS)}")
    if "scenario" not in data:
        raise ScenarioError(f"{path}: [scenario]: missing; expected a table with a description")
    head = _Reader(path, "scenario", data["scenario"], {"description": str, "runners": list, "backends": list})
    description = head.get("description", "", lambda v: bool(v.strip()), "a non-empty description")
    if not description:
        head.fail("scenario.description", "missing; say what the scenario checks")
    runners = tuple(head.get("runners", list(RUNNERS)))
    for runner in runners:
        if runner not in RUNNERS:
            head.fail("scenario.runners", f"expected some of {list(RUNNERS)}, got {runner!r}")
    backends = tuple(head.get("backends", []))
    if not all(isinstance(b, str) for b in backends):
        head.fail("scenario.backends", "expected an array of backend names")
    for name in backends:
        if problem := backend_problem(name):
            head.fail("scenario.backends", problem)
    job = _job(path, data.get("job", {}))
    source = _input(path, data.get("input", {}))
    checkpointing = _checkpointing(path, data.get("checkpointing", {}))
    keys = job.sources * (source.keys_per_source if job.key_selector == "key" else 1)
    if keys > KeyType(job.key_type).capacity:
        raise ScenarioError(
            f"{path}: job.key_type: {job.key_type} holds {KeyType(job.key_type).capacity} distinct keys, the input "
            f"has {keys} (sources x input.keys_per_source)"
        )
    restart = _Reader(path, "restart", data.get("restart", {}), {"attempts": int})
    attempts = restart.get("attempts", 100, _non_negative, "a number >= 0")
    runs = _runs(path, data.get("timeline", []), job)
    expect = _expectations(path, data.get("expect", {}))
    changelog = job.changelog or any(run.resume is not None and run.resume.changelog for run in runs)
    if changelog and checkpointing.max_concurrent > 1:
        raise ScenarioError(
            f"{path}: checkpointing.max_concurrent: the changelog backend allows 1 concurrent checkpoint, as Flink "
            f"requires (CL-10), got {checkpointing.max_concurrent}"
        )
    if checkpointing.mode is not CheckpointingMode.EXACTLY_ONCE and "spark" in runners:
        raise ScenarioError(
            f"{path}: checkpointing.mode: the Spark runner's epochs are aligned (exactly-once); "
            f'{checkpointing.mode.value} runs on the simulator: set scenario.runners = ["sim"]'
        )
    if job.stages == 3 and "spark" in runners:
        raise ScenarioError(f'{path}: job.stages: the Spark runner runs 2 stages; set scenario.runners = ["sim"]')
    scenario = Scenario(
        path.stem, path, description, runners, job, source, checkpointing, attempts, runs, expect, backends
    )
    return _with_flink_config(path, scenario, data.get("config", {}))


def _job(path: Path, table: Any) -> JobConfig:
    r = _Reader(
        path,
        "job",
        table,
        {
            "sources": int,
            "parallelism": int,
            "max_parallelism": int,
            "operator": str,
            "key_selector": str,
            "key_type": str,
            "backend": str,
            "storage": str,
            "stages": int,
            "serializer_version": int,
            "start_from": str,
            "changelog": bool,
            "window_ms": int,
            "union_state": bool,
        },
    )
    start_from = r.get("start_from", None)
    job = JobConfig(
        sources=r.get("sources", 2, _between(1, MAX_SOURCES), f"a number in 1..{MAX_SOURCES} {CAPPED}"),
        parallelism=r.get("parallelism", 2, _between(1, MAX_PARALLELISM), f"a number in 1..{MAX_PARALLELISM} {CAPPED}"),
        max_parallelism=r.get("max_parallelism", 128, lambda v: 1 <= v <= 32768, "a number in 1..32768"),
        operator=r.get("operator", "count", choices=OPERATORS),
        key_selector=r.get("key_selector", "key", choices=KEY_SELECTORS),
        key_type=r.get("key_type", "string", choices=KEY_TYPES),
        backend=_backend_name(r.get("backend", "hashmap", lambda v: bool(v), "a backend name")),
        storage=r.get("storage", "filesystem", choices=STORAGES),
        stages=r.get("stages", 2, choices=(2, 3)),
        serializer_version=r.get("serializer_version", 1, choices=(1, 2)),
        start_from=(path.parent / start_from).resolve() if start_from else None,
        changelog=r.get("changelog", False),
        window_ms=r.get("window_ms", 0, _between(0, 10**9), "0 (no windows) or a window size in ms"),
        union_state=r.get("union_state", False),
    )
    if job.window_ms and job.stages != 2:
        r.fail("job.window_ms", f"windows run in 2-stage jobs, got stages = {job.stages}")
    if job.parallelism > job.max_parallelism:
        r.fail("job.parallelism", f"expected at most max_parallelism ({job.max_parallelism}), got {job.parallelism}")
    if problem := backend_problem(job.backend):
        r.fail("job.backend", problem)
    if job.start_from is not None and not job.start_from.exists():
        r.fail("job.start_from", f"expected an existing savepoint directory, got {start_from!r} (no such path)")
    return job


def _input(path: Path, table: Any) -> InputConfig:
    r = _Reader(
        path, "input", table, {"seed": int, "keys_per_source": int, "records_per_source": int, "key_skew": float}
    )
    return InputConfig(
        seed=r.get("seed", 0, _non_negative, "a number >= 0"),
        keys_per_source=r.get(
            "keys_per_source", 10, _between(1, MAX_KEYS_PER_SOURCE), f"a number in 1..{MAX_KEYS_PER_SOURCE} {CAPPED}"
        ),
        records_per_source=r.get(
            "records_per_source",
            300,
            _between(1, MAX_RECORDS_PER_SOURCE),
            f"a number in 1..{MAX_RECORDS_PER_SOURCE} {CAPPED}",
        ),
        key_skew=r.get("key_skew", 1.0, lambda v: v >= 1.0, "a number >= 1"),
    )


def _checkpointing(path: Path, table: Any) -> CheckpointConfig:
    r = _Reader(
        path,
        "checkpointing",
        table,
        {
            "interval_ms": int,
            "records_per_epoch": int,
            "mode": str,
            "timeout_ms": int,
            "max_concurrent": int,
            "tolerable_failures": int,
            "retained": int,
            "incremental": bool,
            "materialize_interval_ms": int,
        },
    )
    config = CheckpointConfig(
        interval_ms=r.get("interval_ms", 50, _positive, "a number >= 1"),
        records_per_epoch=r.get("records_per_epoch", 50, _positive, "a number >= 1"),
        mode=CheckpointingMode(r.get("mode", "exactly-once", choices=[m.value for m in CheckpointingMode])),
        timeout_ms=r.get("timeout_ms", 600_000, _positive, "a number >= 1"),
        max_concurrent=r.get("max_concurrent", 1, _positive, "a number >= 1"),
        tolerable_failures=r.get("tolerable_failures", 0, _non_negative, "a number >= 0"),
        retained=r.get("retained", 1, _positive, "a number >= 1"),
        incremental=r.get("incremental", False),
        materialize_interval_ms=r.get("materialize_interval_ms", 600_000, _non_negative, "a number >= 0"),
    )
    try:
        settings(config)
    except ValueError as exc:
        r.fail("checkpointing", str(exc))
    return config


def settings(config: CheckpointConfig) -> CheckpointingSettings:
    """The coordinator's settings for a scenario's checkpointing section."""
    return CheckpointingSettings(
        interval_ms=config.interval_ms,
        timeout_ms=config.timeout_ms,
        max_concurrent=config.max_concurrent,
        tolerable_failures=config.tolerable_failures,
        retained=config.retained,
        mode=config.mode,
    )


def scenario_settings(scenario: Scenario) -> CheckpointingSettings:
    """The coordinator's settings: the `[checkpointing]` section with the `[config]` table's Flink keys over it."""
    native = settings(scenario.checkpointing)
    if not scenario.config:
        return native
    merged = cfg.overlay(checkpointing_as_config(native), dict(scenario.config))
    configured = CheckpointingSettings.from_config(merged)
    assert configured is not None
    return configured


def scenario_restart(scenario: Scenario) -> RestartStrategy:
    """`[restart] attempts` (a fixed delay of 0), unless `[config]` sets `restart-strategy.*`."""
    config = dict(scenario.config)
    if not any(key.startswith("restart-strategy") for key in config):
        return FixedDelayRestart(scenario.restart_attempts, 0.0)
    return restart_strategy_from_config(config, checkpointing_enabled=True)


def _with_flink_config(path: Path, scenario: Scenario, table: Any) -> Scenario:
    """Fold the `[config]` table's Flink keys into the scenario (backend, incremental, changelog and its interval,
    a start path), and check every key now: a bad value is one ScenarioError naming the file and the key."""
    if not isinstance(table, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int | float | bool) for k, v in table.items()
    ):
        raise ScenarioError(f"{path}: [config]: expected a table of Flink configuration keys and plain values")
    if not table:
        return scenario
    config = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in table.items()}
    job, checkpointing = scenario.job, scenario.checkpointing
    try:
        cfg.warn_unknown_keys(config)
        refuse_keys_chosen_by_the_runner(config)
        for option in cfg.OPTIONS:
            cfg.read(config, option)
        if (storage := checkpoint_storage_kind(config)) is not None:
            job = replace(job, storage=storage)
        if cfg.is_set(config, catalog.STATE_BACKEND):
            job = replace(job, backend=_backend_name(cfg.read(config, catalog.STATE_BACKEND)))
        if cfg.is_set(config, catalog.CHANGELOG_ENABLED):
            job = replace(job, changelog=cfg.read(config, catalog.CHANGELOG_ENABLED))
        if cfg.is_set(config, catalog.INCREMENTAL_CHECKPOINTS):
            checkpointing = replace(checkpointing, incremental=cfg.read(config, catalog.INCREMENTAL_CHECKPOINTS))
        if cfg.is_set(config, catalog.CHANGELOG_MATERIALIZE_INTERVAL):
            interval = cfg.read(config, catalog.CHANGELOG_MATERIALIZE_INTERVAL)
            checkpointing = replace(checkpointing, materialize_interval_ms=interval)
        start = cfg.read(config, catalog.STATE_RECOVERY_PATH)
        if start is not None:
            if job.start_from is not None:
                raise ScenarioError(f"{path}: [config]: {catalog.STATE_RECOVERY_PATH.key} and job.start_from both set")
            job = replace(job, start_from=(path.parent / start).resolve())
        scenario = replace(scenario, job=job, checkpointing=checkpointing, config=tuple(sorted(config.items())))
        scenario_settings(scenario)
        scenario_restart(scenario)
    except IllegalConfigurationError as exc:
        raise ScenarioError(f"{path}: [config]: {exc}") from None
    if problem := backend_problem(job.backend):
        raise ScenarioError(f"{path}: [config]: {catalog.STATE_BACKEND.key}: {problem}")
    if job.start_from is not None and not job.start_from.exists():
        raise ScenarioError(f"{path}: [config]: {catalog.STATE_RECOVERY_PATH.key}: no such savepoint {start!r}")
    return scenario


_EVENT_KEYS: dict[str, type] = {
    "action": str,
    "epoch": int,
    "phase": str,
    "task": int,
    "count": int,
    "format": str,
    "from": str,
    "backend": str,
    "parallelism": int,
    "serializer_version": int,
    "relocate": bool,
    "changelog": bool,
}
_ONLY_FOR: dict[str, tuple[Action, ...]] = {
    "phase": (Action.TASK_FAILURE,),
    "task": (Action.TASK_FAILURE, Action.WORKER_KILL),
    "count": (Action.STORAGE_WRITE_FAILURE,),
    "format": (Action.SAVEPOINT, Action.STOP_WITH_SAVEPOINT),
    "from": (Action.RESUME,),
    "backend": (Action.RESUME,),
    "parallelism": (Action.RESUME,),
    "serializer_version": (Action.RESUME,),
    "relocate": (Action.RESUME,),
    "changelog": (Action.RESUME,),
}


def _runs(path: Path, entries: Any, job: JobConfig) -> tuple[Run, ...]:
    if not isinstance(entries, list):
        raise ScenarioError(f"{path}: timeline: expected an array of tables ([[timeline]])")
    runs: list[Run] = []
    events: list[Event] = []
    resume: Event | None = None
    parallelism = job.parallelism
    ended = False
    for i, table in enumerate(entries):
        where = f"timeline[{i}]"
        r = _Reader(path, where, table, _EVENT_KEYS)
        action = Action(
            r.get("action", None, choices=[a.value for a in Action]) or r.fail(f"{where}.action", "missing")
        )
        for key in table:
            if key in _ONLY_FOR and action not in _ONLY_FOR[key]:
                r.fail(f"{where}.{key}", f"not a setting of {action.value}")
        if action is Action.RESUME:
            took_savepoint = any(e.action in (Action.SAVEPOINT, Action.STOP_WITH_SAVEPOINT) for e in events)
            if not took_savepoint and r.get("from", "savepoint") == "savepoint":
                r.fail(where, "resume from a savepoint, but this run takes none; add a savepoint before it")
            event = Event(
                action,
                source=r.get("from", "savepoint", choices=("savepoint", "checkpoint")),
                backend=r.get("backend", None, lambda v: bool(v), 'a backend name or "other"'),
                parallelism=r.get(
                    "parallelism",
                    None,
                    _between(1, min(MAX_PARALLELISM, job.max_parallelism)),
                    f"a number in 1..{min(MAX_PARALLELISM, job.max_parallelism)} (at most job.max_parallelism, "
                    f"{job.max_parallelism}, and {MAX_PARALLELISM})",
                ),
                serializer_version=r.get("serializer_version", None, choices=(1, 2)),
                relocate=r.get("relocate", False),
                changelog=r.get("changelog", None),
            )
            if event.backend not in (None, "other") and (problem := backend_problem(event.backend)):
                r.fail(f"{where}.backend", problem)
            runs.append(Run(tuple(events), resume))
            events, resume, ended = [], event, False
            parallelism = event.parallelism or parallelism
            continue
        if ended:
            r.fail(where, f"the run already ended at an earlier {events[-1].action.value}; add a resume before this")
        event = Event(
            action,
            epoch=r.get("epoch", 1, _between(1, MAX_EPOCH), f"a number in 1..{MAX_EPOCH} {CAPPED}"),
            phase=Phase(r.get("phase", "processing", choices=[p.value for p in Phase])),
            task=r.get("task", 0, _below(parallelism), f"a subtask index below {parallelism}"),
            count=r.get("count", 1, _between(1, MAX_COUNT), f"a number in 1..{MAX_COUNT} {CAPPED}"),
            format=r.get("format", "canonical", choices=("canonical", "native")),
        )
        if events and event.epoch < events[-1].epoch:
            r.fail(
                f"{where}.epoch", f"expected epochs in order within a run, got {event.epoch} after {events[-1].epoch}"
            )
        events.append(event)
        ended = action in (Action.STOP_WITH_SAVEPOINT, Action.CANCEL)
    runs.append(Run(tuple(events), resume))
    return tuple(runs)


def _bound(r: _Reader, key: str, default: Bound) -> Bound:
    if key not in r.table:
        return default
    value = r.table[key]
    name = f"{r.where}.{key}"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return Bound(value, value)
    counts = isinstance(value, dict) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value.values()
    )
    if counts and value and set(value) <= {"min", "max"}:
        low, high = value.get("min"), value.get("max")
        if low is not None and high is not None and low > high:
            r.fail(name, f"min ({low}) exceeds max ({high}): no count satisfies it")
        return Bound(low, high)
    r.fail(name, f"expected a count >= 0 or a table {{ min = N, max = M }}, got {value!r}")


def _expectations(path: Path, table: Any) -> Expectations:
    r = _Reader(
        path,
        "expect",
        table,
        {
            "exactly_once": bool,
            "state_equals_oracle": bool,
            "completed_checkpoints": object,
            "failovers": object,
            "error": str,
            "error_when": str,
            "job_failed": bool,
        },
    )
    error = r.get("error", None, lambda v: v.isidentifier(), "an exception class name")
    if error is not None:
        from statecert.spec import errors

        if not isinstance(getattr(errors, error, None), type):
            r.fail("expect.error", f"expected a documented error of statecert.spec.errors, got {error!r}")
    expect = Expectations(
        exactly_once=r.get("exactly_once", error is None),
        state_equals_oracle=r.get("state_equals_oracle", error is None),
        completed_checkpoints=_bound(r, "completed_checkpoints", Bound(min=0 if error else 1)),
        failovers=_bound(r, "failovers", Bound()),
        error=error,
        error_when=r.get("error_when", "always", choices=ERROR_CONDITIONS),
        job_failed=r.get("job_failed", False),
    )
    return expect
