"""The settings layer against Flink 2.x (chapter LD, COORD-10..13): every key under its current name and each 1.x
fallback reaches the component it configures, with Flink's default when unset; the current key wins; values parse
with Flink's units; unknown keys are named; `statecert config --list` prints the table."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.reference import config as cfg
from statecert.reference.changelog.backend import ChangelogStateBackend
from statecert.reference.config import catalog
from statecert.reference.config.values import float_parser, int_parser, parse_duration_ms, parse_memory_size
from statecert.reference.coordinator.restart import (
    ExponentialDelayRestart,
    FailureRateRestart,
    FixedDelayRestart,
    NoRestart,
    restart_strategy_from_config,
)
from statecert.reference.coordinator.settings import CheckpointingMode, CheckpointingSettings
from statecert.reference.loader import load_checkpoint_storage, load_state_backend
from statecert.reference.simulator.flink_config import with_flink_config
from statecert.reference.simulator.job_spec import JobSpec
from statecert.spec.errors import IllegalConfigurationError, StateCertError

Config = dict[str, object]
ON = {"execution.checkpointing.interval": "1 s"}  # checkpointing keys take effect once checkpointing is on


def _rocksdb(config: Config) -> Any:
    return load_state_backend(job_config={"state.backend.type": "rocksdb", **config})


def _changelog(config: Config) -> Any:
    backend = load_state_backend(job_config={"state.changelog.enabled": "true", **config})
    assert isinstance(backend, ChangelogStateBackend)
    return backend.settings


def _checkpointing(config: Config) -> CheckpointingSettings:
    settings = CheckpointingSettings.from_config({**ON, **config})
    assert settings is not None
    return settings


def _restart(config: Config) -> Any:
    return restart_strategy_from_config(config, checkpointing_enabled=True)


def _fs(config: Config) -> Any:
    return load_checkpoint_storage(job_config={"execution.checkpointing.dir": "memory://ck", **config})


def _simulated(config: Config) -> JobSpec:
    """The simulator's job settings with `config` as a job file's `[config]` table."""
    return with_flink_config(JobSpec(), config)


def _mini_batch(config: Config, setting: str) -> Any:
    """A mini-batch setting of the simulator with mini-batch enabled and `config`; Flink refuses an enabled
    mini-batch whose latency or size is not positive (both default to that), so an unset one shows the error."""
    try:
        return getattr(_simulated({"table.exec.mini-batch.enabled": "true", **config}), setting)
    except StateCertError as exc:
        return type(exc).__name__


# key -> (a value to set, how to observe it in the component that reads it, what to observe, Flink's default as
# observed with the key unset). The defaults are Flink 2.x's (CheckpointingOptions, StateRecoveryOptions,
# RestartStrategyOptions, StateChangelogOptions, RocksDBOptions).
PROBES: dict[str, tuple[object, Callable[[Config], Any], Any, Any]] = {
    "state.backend.type": ("ROCKSDB", lambda c: load_state_backend(job_config=c).name, "rocksdb", "hashmap"),
    "execution.checkpointing.storage": (
        "JobManager",
        lambda c: load_checkpoint_storage(job_config={"execution.checkpointing.dir": "memory://ck", **c}).name,
        "jobmanager",
        "filesystem",  # unset with a directory: file system storage (Flink's CheckpointStorageLoader)
    ),
    "execution.checkpointing.dir": (
        "memory://elsewhere",
        lambda c: getattr(load_checkpoint_storage(job_config=c), "checkpoint_dir", None),
        "memory://elsewhere",
        None,  # unset: job-manager storage without a directory
    ),
    "execution.checkpointing.savepoint-dir": ("memory://sp", lambda c: _fs(c).savepoint_dir, "memory://sp", None),
    "execution.checkpointing.data-inline-threshold": (
        "1 kibibytes",
        lambda c: _fs(c).file_state_size_threshold,
        1024,
        20 * 1024,
    ),
    "execution.checkpointing.incremental": ("true", lambda c: _rocksdb(c).incremental, True, False),
    "execution.checkpointing.num-retained": ("3", lambda c: _checkpointing(c).retained, 3, 1),
    "execution.checkpointing.interval": (
        "2 min",
        lambda c: getattr(CheckpointingSettings.from_config(c), "interval_ms", None),
        120_000,
        None,  # unset: checkpointing off
    ),
    "execution.checkpointing.mode": (
        "at_least_once",
        lambda c: _checkpointing(c).mode,
        CheckpointingMode.AT_LEAST_ONCE,
        CheckpointingMode.EXACTLY_ONCE,
    ),
    "execution.checkpointing.timeout": ("30 s", lambda c: _checkpointing(c).timeout_ms, 30_000, 600_000),
    "execution.checkpointing.max-concurrent-checkpoints": ("2", lambda c: _checkpointing(c).max_concurrent, 2, 1),
    "execution.checkpointing.min-pause": ("500 ms", lambda c: _checkpointing(c).min_pause_ms, 500, 0),
    "execution.checkpointing.tolerable-failed-checkpoints": (
        "4",
        lambda c: _checkpointing(c).tolerable_failures,
        4,
        0,
    ),
    "execution.checkpointing.unaligned.enabled": (
        "true",
        lambda c: _checkpointing(c).mode,
        CheckpointingMode.UNALIGNED,
        CheckpointingMode.EXACTLY_ONCE,
    ),
    "execution.checkpointing.aligned-checkpoint-timeout": (
        "3 s",
        lambda c: _checkpointing({"execution.checkpointing.unaligned.enabled": "true", **c}).alignment_timeout_ms,
        3000,
        None,  # 0 s: unaligned from the start (no alignment phase)
    ),
    "execution.checkpointing.externalized-checkpoint-retention": (
        "retain_on_cancellation",
        lambda c: _checkpointing(c).retention.value,
        "RETAIN_ON_CANCELLATION",
        "NO_EXTERNALIZED_CHECKPOINTS",
    ),
    "execution.state-recovery.path": (
        "memory://sp/savepoint-1",
        lambda c: cfg.read(c, catalog.STATE_RECOVERY_PATH),
        "memory://sp/savepoint-1",
        None,
    ),
    "execution.state-recovery.claim-mode": (
        "claim",
        lambda c: cfg.read(c, catalog.STATE_RECOVERY_CLAIM_MODE),
        "CLAIM",
        "NO_CLAIM",
    ),
    "restart-strategy.type": ("fixeddelay", lambda c: _restart(c).name, "fixed-delay", "exponential-delay"),
    "restart-strategy.fixed-delay.attempts": (
        "5",
        lambda c: _restart({"restart-strategy.type": "fixed-delay", **c}).attempts,
        5,
        1,
    ),
    "restart-strategy.fixed-delay.delay": (
        "10 s",
        lambda c: _restart({"restart-strategy.type": "fixed-delay", **c}).delay_ms,
        10_000,
        1000,
    ),
    "restart-strategy.failure-rate.max-failures-per-interval": (
        "3",
        lambda c: _restart({"restart-strategy.type": "failure-rate", **c}).max_failures,
        3,
        1,
    ),
    "restart-strategy.failure-rate.failure-rate-interval": (
        "5 min",
        lambda c: _restart({"restart-strategy.type": "failure-rate", **c}).interval_ms,
        300_000,
        60_000,
    ),
    "restart-strategy.failure-rate.delay": (
        "2 s",
        lambda c: _restart({"restart-strategy.type": "failure-rate", **c}).delay_ms,
        2000,
        1000,
    ),
    "restart-strategy.exponential-delay.initial-backoff": ("2 s", lambda c: _restart(c).initial_ms, 2000, 1000),
    "restart-strategy.exponential-delay.max-backoff": ("5 min", lambda c: _restart(c).max_ms, 300_000, 60_000),
    "restart-strategy.exponential-delay.backoff-multiplier": ("2.0", lambda c: _restart(c).multiplier, 2.0, 1.5),
    "restart-strategy.exponential-delay.reset-backoff-threshold": (
        "10 min",
        lambda c: _restart(c).reset_ms,
        600_000,
        3_600_000,
    ),
    "restart-strategy.exponential-delay.jitter-factor": ("0.2", lambda c: _restart(c).jitter, 0.2, 0.1),
    "restart-strategy.exponential-delay.attempts-before-reset-backoff": (
        "10",
        lambda c: _restart(c).attempts,
        10,
        2**31 - 1,
    ),
    "state.changelog.enabled": (
        "true",
        lambda c: isinstance(load_state_backend(job_config=c), ChangelogStateBackend),
        True,
        False,
    ),
    "state.changelog.storage": ("memory", lambda c: _changelog(c).storage, "memory", "filesystem"),
    "state.changelog.periodic-materialize.interval": (
        "1 min",
        lambda c: _changelog(c).materialize_interval_ms,
        60_000,
        600_000,
    ),
    "state.changelog.max-failures-allowed": ("7", lambda c: _changelog(c).max_failures_allowed, 7, 3),
    "execution.buffer-timeout.interval": ("5 ms", lambda c: _simulated(c).buffer_timeout_ms, 5.0, 100.0),
    "execution.buffer-timeout.enabled": ("false", lambda c: _simulated(c).buffer_timeout_ms, math.inf, 100.0),
    "table.exec.mini-batch.enabled": (
        "true",
        lambda c: (
            _simulated(
                {"table.exec.mini-batch.allow-latency": "5 ms", "table.exec.mini-batch.size": "9", **c}
            ).mini_batch_size
        ),
        9,
        0,
    ),
    "table.exec.mini-batch.allow-latency": (
        "7 ms",
        lambda c: _mini_batch({"table.exec.mini-batch.size": "9", **c}, "mini_batch_latency_ms"),
        7.0,
        "IllegalConfigurationError",
    ),
    "table.exec.mini-batch.size": (
        "300",
        lambda c: _mini_batch({"table.exec.mini-batch.allow-latency": "5 ms", **c}, "mini_batch_size"),
        300,
        "IllegalConfigurationError",
    ),
    "state.backend.rocksdb.localdir": ("/tmp/rocks", lambda c: _rocksdb(c).local_dir, "/tmp/rocks", None),
    "state.backend.rocksdb.predefined-options": (
        "flash_ssd_optimized",
        lambda c: _rocksdb(c).settings.predefined_options.value,
        "FLASH_SSD_OPTIMIZED",
        "DEFAULT",
    ),
    "state.backend.rocksdb.options-factory": (
        "tests.rocksdb_options_factories:MoreWriteBuffers",
        lambda c: _rocksdb(c).settings.options_factory,
        "tests.rocksdb_options_factories:MoreWriteBuffers",
        None,
    ),
    "state.backend.rocksdb.memory.managed": ("false", lambda c: _rocksdb(c).settings.memory_managed, False, True),
    "state.backend.rocksdb.memory.fixed-per-slot": (
        "128mb",
        lambda c: _rocksdb(c).settings.memory_budget_bytes,
        128 * 1024 * 1024,
        64 * 1024 * 1024,  # statecert's stand-in for a slot's managed memory
    ),
    "state.backend.rocksdb.memory.fixed-per-tm": (
        "1gb",
        lambda c: _rocksdb(c).settings.memory_fixed_per_tm,
        1024**3,
        None,
    ),
    "state.backend.rocksdb.memory.write-buffer-ratio": (
        "0.3",
        lambda c: _rocksdb(c).settings.write_buffer_ratio,
        0.3,
        0.5,
    ),
    "state.backend.rocksdb.memory.high-prio-pool-ratio": (
        "0.2",
        lambda c: _rocksdb(c).settings.high_prio_pool_ratio,
        0.2,
        0.1,
    ),
    "state.backend.rocksdb.timer-service.factory": (
        "heap",
        lambda c: _rocksdb(c).settings.timer_service_factory,
        "HEAP",
        "ROCKSDB",
    ),
}
REFUSED = {"state.changelog.dstl.dfs.base-path"}  # declared so it is refused, not silently ignored (CL-10)

KEYS = [(o.key, key) for o in catalog.OPTIONS for key in o.all_keys if o.key not in REFUSED]


@pytest.mark.requirement("LD-9")
def test_every_declared_option_has_a_probe() -> None:
    declared = {o.key for o in catalog.OPTIONS} - REFUSED
    assert declared == set(PROBES), (
        f"options without a test: {sorted(declared - set(PROBES))}; probes without an option: "
        f"{sorted(set(PROBES) - declared)}"
    )


@pytest.mark.requirement("LD-9", "LD-3", "LD-7", "COORD-10", "COORD-12")
@pytest.mark.parametrize(("option", "key"), KEYS, ids=[key for _, key in KEYS])
def test_each_key_and_each_fallback_reaches_its_component(option: str, key: str) -> None:
    value, probe, expected, _ = PROBES[option]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = probe({key: value})
    assert got == expected, f"{key}={value!r}: expected {expected!r} in the component, got {got!r}"
    deprecations = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    if key == option:
        assert not any(key in m for m in deprecations), deprecations
    else:
        assert any(m == f"{key} is deprecated; use {option}" for m in deprecations), (
            f"reading the 1.x key {key} should warn naming {option}; got {deprecations}"
        )


@pytest.mark.requirement("LD-9", "COORD-10", "COORD-12")
@pytest.mark.parametrize("option", sorted(PROBES))
def test_unset_keys_take_flinks_default(option: str) -> None:
    _, probe, _, default = PROBES[option]
    got = probe({})
    assert got == default, f"{option} unset: expected Flink's default {default!r}, got {got!r}"


STALE = {  # a value for the deprecated key that the component would show differently from PROBES' value
    "state.backend.type": "hashmap",
    "execution.checkpointing.storage": "filesystem",
    "execution.checkpointing.dir": "memory://stale",
    "execution.checkpointing.savepoint-dir": "memory://stale-sp",
    "execution.checkpointing.data-inline-threshold": "4kb",
    "execution.checkpointing.incremental": "false",
    "execution.checkpointing.num-retained": "9",
    "execution.checkpointing.unaligned.enabled": "false",
    "execution.checkpointing.aligned-checkpoint-timeout": "9 s",
    "execution.state-recovery.path": "memory://stale",
    "execution.state-recovery.claim-mode": "NO_CLAIM",
    "restart-strategy.type": "failure-rate",
    "state.changelog.enabled": "false",
    "state.changelog.storage": "filesystem",
    "state.changelog.periodic-materialize.interval": "9 min",
    "state.changelog.max-failures-allowed": "9",
    "execution.buffer-timeout.interval": "9 ms",
}
WITH_FALLBACKS = [(o.key, old) for o in catalog.OPTIONS for old in o.deprecated_keys if o.key in PROBES]


@pytest.mark.requirement("LD-9")
def test_every_option_with_fallbacks_has_a_stale_value() -> None:
    assert {key for key, _ in WITH_FALLBACKS} == set(STALE), sorted({key for key, _ in WITH_FALLBACKS} ^ set(STALE))


@pytest.mark.requirement("LD-9")
@pytest.mark.parametrize(("option", "old"), WITH_FALLBACKS, ids=[old for _, old in WITH_FALLBACKS])
def test_the_current_key_wins_over_a_deprecated_one(option: str, old: str) -> None:
    value, probe, expected, _ = PROBES[option]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = probe({option: value, old: STALE[option]})
        alone = probe({old: STALE[option]})
    assert alone != expected, f"the stale value {STALE[option]!r} of {old} must show differently"
    assert got == expected, f"{option}={value!r} with {old}={STALE[option]!r}: expected {expected!r}, got {got!r}"
    assert [w for w in caught if f"{old} is deprecated" in str(w.message)] != [], "reading the old key alone warns"


# -- values ----------------------------------------------------------------------------------------------------------
MEMORY_UNITS = {
    "": 1,
    "b": 1,
    "bytes": 1,
    "k": 1024,
    "kb": 1024,
    "kibibytes": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mebibytes": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gibibytes": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
    "tebibytes": 1024**4,
}
TIME_UNITS = {"": 1, "ms": 1, "millis": 1, "s": 1000, "sec": 1000, "seconds": 1000, "min": 60_000, "m": 60_000}
TIME_UNITS |= {"minutes": 60_000, "h": 3_600_000, "hours": 3_600_000, "d": 86_400_000, "days": 86_400_000}


@pytest.mark.requirement("LD-6")
@given(
    n=st.integers(0, 10**6),
    unit=st.sampled_from(sorted(MEMORY_UNITS)),
    space=st.sampled_from(["", " "]),
    upper=st.booleans(),
)
def test_memory_sizes_take_every_flink_unit_spelling(n: int, unit: str, space: str, upper: bool) -> None:
    text = f"{n}{space}{unit.upper() if upper else unit}"
    assert parse_memory_size("k", text) == n * MEMORY_UNITS[unit], text


@pytest.mark.requirement("LD-6")
@given(n=st.integers(0, 10**6), unit=st.sampled_from(sorted(TIME_UNITS)), space=st.sampled_from(["", " "]))
def test_durations_take_flinks_units(n: int, unit: str, space: str) -> None:
    assert parse_duration_ms("k", f"{n}{space}{unit}") == n * TIME_UNITS[unit]


@pytest.mark.requirement("LD-6")
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("execution.checkpointing.interval", "soon"),
        ("execution.checkpointing.interval", "10 fortnights"),
        ("execution.checkpointing.data-inline-threshold", "2mb"),
        ("execution.checkpointing.data-inline-threshold", "12 parsecs"),
        ("execution.checkpointing.num-retained", "0"),
        ("execution.checkpointing.mode", "MOSTLY_ONCE"),
        ("restart-strategy.type", "sometimes"),
    ],
)
def test_bad_values_name_the_key(key: str, value: object) -> None:
    option = next(o for o in catalog.OPTIONS if key in o.all_keys)
    with pytest.raises(IllegalConfigurationError, match="^" + re.escape(key) + ": "):
        cfg.read({key: value}, option)


@pytest.mark.requirement("LD-10")
@pytest.mark.parametrize(
    ("typo", "closest"),
    [
        ("execution.checkpointing.intervall", "execution.checkpointing.interval"),
        ("state.checkpoint.dir", "state.checkpoints.dir"),
        ("restart-strategy.fixed-delay.attempt", "restart-strategy.fixed-delay.attempts"),
    ],
)
def test_an_unknown_key_is_named_with_the_closest_known_one(typo: str, closest: str) -> None:
    with pytest.warns(cfg.UnknownConfigurationKeyWarning, match=rf"{typo}: .*did you mean {closest}\?") as caught:
        load_state_backend(job_config={typo: "x"})
    where = {w.filename for w in caught}
    assert where == {__file__}, (
        f"LD-10: load_state_backend(job_config={{{typo!r}: 'x'}}) warned; expected the warning attributed to its "
        f"caller ({__file__}), got {sorted(where)}"
    )


@pytest.mark.requirement("LD-10")
def test_known_but_unsupported_and_foreign_keys_are_not_reported() -> None:
    config = {key: "x" for key in cfg.UNSUPPORTED} | {"pipeline.name": "x", "state.backend.rocksdb.metrics.size": 1}
    assert cfg.unknown_keys(config) == {}


# -- restart strategies ----------------------------------------------------------------------------------------------
@pytest.mark.requirement("COORD-12")
def test_restart_strategies_follow_flinks_rules() -> None:
    import random

    rng = random.Random(0)
    assert NoRestart().on_failure(0, rng) is None
    fixed = FixedDelayRestart(2, 100)
    assert [fixed.on_failure(t, rng) for t in (0, 1, 2)] == [100, 100, None]
    rate = FailureRateRestart(2, 1000, 5)
    assert [rate.on_failure(t, rng) for t in (0, 10, 20)] == [5, 5, None], "3 failures within 1 s > 2"
    rate = FailureRateRestart(2, 1000, 5)
    assert [rate.on_failure(t, rng) for t in (0, 10, 2000)] == [5, 5, 5], "the first two left the interval"
    exp = ExponentialDelayRestart(100, 1000, 2.0, 10_000, 0.0, 5)
    assert [exp.on_failure(t, rng) for t in (0, 1, 2, 3, 4, 5)] == [100, 200, 400, 800, 1000, None]
    exp = ExponentialDelayRestart(100, 1000, 2.0, 10_000, 0.0, 5)
    assert [exp.on_failure(t, rng) for t in (0, 1, 20_000)] == [100, 200, 100], "reset after the threshold"
    jittery = ExponentialDelayRestart(100, 1000, 2.0, 10_000, 0.1, 5)
    delay = jittery.on_failure(0, rng)
    assert delay is not None and 90 <= delay <= 110


@pytest.mark.requirement("COORD-12")
def test_the_default_restart_strategy_depends_on_checkpointing() -> None:
    assert isinstance(restart_strategy_from_config({}, checkpointing_enabled=False), NoRestart)
    assert isinstance(restart_strategy_from_config({}, checkpointing_enabled=True), ExponentialDelayRestart)
    for alias in ("none", "off", "disable", "NONE"):
        assert isinstance(restart_strategy_from_config({"restart-strategy": alias}, True), NoRestart)


# -- the command -----------------------------------------------------------------------------------------------------
@pytest.mark.requirement("LD-9")
def test_config_list_prints_every_key_with_its_fallbacks() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", "config", "--markdown"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    for option in catalog.OPTIONS:
        assert f"`{option.key}`" in done.stdout, option.key
        for old in option.deprecated_keys:
            assert f"`{old}`" in done.stdout, old
    for key in cfg.UNSUPPORTED:
        assert f"`{key}`" in done.stdout, key
    listed = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", "config", "--list"], capture_output=True, text=True
    )
    assert listed.returncode == 0 and "execution.checkpointing.dir" in listed.stdout, listed.stderr


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.requirement("LD-6")
@given(
    bounds=st.tuples(st.integers(-50, 50), st.integers(-50, 50)).map(sorted),
    offset=st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0]),
    at=st.sampled_from(["minimum", "maximum"]),
)
def test_a_bounded_number_is_accepted_exactly_within_its_bounds(bounds: list[int], offset: float, at: str) -> None:
    """A bounded float option accepts exactly the numbers in [minimum, maximum], its bounds included, and refuses a
    number past either bound with IllegalConfigurationError naming the key."""
    minimum, maximum = bounds
    value = (minimum if at == "minimum" else maximum) + offset
    parse = float_parser(float(minimum), float(maximum))
    inside = minimum <= value <= maximum
    try:
        got: float | None = parse("some.ratio", str(value))
    except IllegalConfigurationError as exc:
        assert not inside and "some.ratio" in str(exc), (
            f"LD-6: float_parser({minimum}, {maximum})('some.ratio', {value!r}): expected {value}, got {exc}"
        )
        return
    assert inside and got == value, (
        f"LD-6: float_parser({minimum}, {maximum})('some.ratio', {value!r}): expected "
        f"{'IllegalConfigurationError' if not inside else value}, got {got}"
    )


@pytest.mark.requirement("LD-6", "CS-1")
@pytest.mark.parametrize("size", [1024 * 1024, 1024 * 1024 + 1])
def test_the_inline_threshold_is_at_most_one_mebibyte(size: int) -> None:
    """`execution.checkpointing.data-inline-threshold` takes at most 1 MiB (Flink's maximum file state threshold):
    1 MiB is read as given, one byte more is IllegalConfigurationError naming the key."""
    key = catalog.DATA_INLINE_THRESHOLD.key
    try:
        got = cfg.read({key: f"{size}b"}, catalog.DATA_INLINE_THRESHOLD)
    except IllegalConfigurationError as exc:
        assert size > 1024 * 1024 and key in str(exc), f"LD-6: {key}={size}b: expected {size}, got {exc}"
        return
    assert size <= 1024 * 1024 and got == size, f"LD-6: {key}={size}b: expected the error, got {got}"


# -- where a warning points, overlays, parsers' edges (from the config target's mutation survivors) -----------------
@pytest.mark.requirement("LD-9")
def test_a_deprecated_key_warns_at_the_line_of_the_users_code_that_passed_it() -> None:
    with pytest.warns(DeprecationWarning, match="state.backend is deprecated; use state.backend.type") as caught:
        load_state_backend(job_config={"state.backend": "hashmap"})
    where = {w.filename for w in caught if issubclass(w.category, DeprecationWarning)}
    assert where == {__file__}, (
        "LD-9: load_state_backend(job_config={'state.backend': 'hashmap'}) warned; expected the DeprecationWarning "
        f"attributed to its caller ({__file__}), got {sorted(where)}"
    )


@pytest.mark.requirement("LD-10")
def test_an_unknown_key_given_to_the_storage_loader_is_named_too() -> None:
    typo = "execution.checkpointing.dirr"
    with pytest.warns(cfg.UnknownConfigurationKeyWarning) as caught:
        load_checkpoint_storage(job_config={typo: "memory://x"})
    named = [str(w.message) for w in caught if issubclass(w.category, cfg.UnknownConfigurationKeyWarning)]
    assert any(m.startswith(f"{typo}: ") for m in named), (
        f"LD-10: load_checkpoint_storage(job_config={{{typo!r}: ...}}): expected a warning naming {typo}, got {named}"
    )


@pytest.mark.requirement("LD-9")
@given(option=st.sampled_from([o for o in catalog.OPTIONS if o.deprecated_keys]), data=st.data())
def test_an_overlay_setting_an_option_by_any_key_drops_every_key_of_it_from_the_base(
    option: cfg.ConfigOption[Any], data: st.DataObject
) -> None:
    old = data.draw(st.sampled_from(option.deprecated_keys))
    base = {key: f"base-{key}" for key in option.all_keys} | {"unrelated.key": "kept"}
    merged = cfg.overlay(base, {old: "override"})
    assert merged == {old: "override", "unrelated.key": "kept"}, (
        f"LD-9: overlay(every key of {option.key} set, {{{old!r}: 'override'}}): expected only the override's key "
        f"of the option (a 1.x key not masked by the base's current one), got {merged}"
    )


@pytest.mark.requirement("LD-6")
@pytest.mark.parametrize("value", [1, 0, 1.0, ["true"], {"true": 1}])
def test_a_boolean_key_given_a_non_text_non_boolean_value_is_a_configuration_error(value: object) -> None:
    with pytest.raises(IllegalConfigurationError, match=r"^execution\.checkpointing\.incremental: "):
        cfg.read({"execution.checkpointing.incremental": value}, catalog.INCREMENTAL_CHECKPOINTS)


@pytest.mark.requirement("LD-6")
@given(data=st.data())
def test_a_bounded_integer_key_names_its_bounds_when_refusing(data: st.DataObject) -> None:
    option = data.draw(st.sampled_from([o for o in catalog.OPTIONS if o.type_name == "integer"]))
    for value in ("-2147483648", "2147483647"):  # within a Java int: refused, if at all, for the bounds
        try:
            option.parse(option.key, value)
        except IllegalConfigurationError as exc:
            message = str(exc)
            bounds = re.search(r"an integer in (-?\d+|-inf)\.\.(-?\d+|inf), got", message)
            below = value.startswith("-")
            assert bounds is not None and bounds.group(1 if below else 2) not in ("-inf", "inf"), (
                f"LD-6: {option.key}={value}: expected the refusal to name the key's {'lower' if below else 'upper'} "
                f"bound, got {message!r}"
            )


# the smallest value each integer key takes (below it: IllegalConfigurationError), and the largest where there is one
INTEGER_BOUNDS = {
    "execution.checkpointing.num-retained": (1, None),
    "execution.checkpointing.max-concurrent-checkpoints": (1, None),
    "execution.checkpointing.tolerable-failed-checkpoints": (0, None),
    "restart-strategy.fixed-delay.attempts": (0, None),
    "restart-strategy.failure-rate.max-failures-per-interval": (1, None),
    "restart-strategy.exponential-delay.attempts-before-reset-backoff": (1, None),
    "state.changelog.max-failures-allowed": (1, None),
}


@pytest.mark.requirement("LD-6")
@pytest.mark.parametrize(("key", "bounds"), sorted(INTEGER_BOUNDS.items()))
def test_an_integer_key_takes_its_bounds_and_refuses_one_past_them(key: str, bounds: tuple[int, int | None]) -> None:
    option = next(o for o in catalog.OPTIONS if o.key == key)
    low, high = bounds
    high = 2**31 - 1 if high is None else high  # unbounded: up to a Java int's largest
    for taken in (low, high):
        assert option.parse(key, str(taken)) == taken, f"LD-6: {key}={taken}: expected it taken, got a refusal"
    for refused in (low - 1, high + 1):
        with pytest.raises(IllegalConfigurationError, match=f"^{re.escape(key)}: "):
            option.parse(key, str(refused))


@pytest.mark.requirement("LD-6")
def test_an_integer_parser_takes_both_of_its_bounds() -> None:
    parse = int_parser(-3, 10)
    taken = [parse("key", str(n)) for n in (-3, 10)]
    assert taken == [-3, 10], f"LD-6: int_parser(-3, 10) on -3 and 10: expected both taken, got {taken}"
    for refused in ("-4", "11"):
        with pytest.raises(IllegalConfigurationError, match=r"^key: expected an integer in -3\.\.10, got "):
            parse("key", refused)


@pytest.mark.requirement("LD-6")
@pytest.mark.parametrize(
    ("bits", "key"), [(32, "execution.checkpointing.num-retained"), (64, "table.exec.mini-batch.size")]
)
def test_an_integer_holds_its_java_type_and_a_boolean_is_no_number(bits: int, key: str) -> None:
    parse = int_parser(bits=bits)
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    taken = [parse("key", str(n)) for n in (low, high)]
    assert taken == [low, high], f"LD-6: int_parser(bits={bits}) on {low} and {high}: expected both taken, got {taken}"
    for refused in (low - 1, high + 1, True):
        with pytest.raises(IllegalConfigurationError, match=r"^key: "):
            parse("key", refused if isinstance(refused, bool) else str(refused))
    option = next(o for o in catalog.OPTIONS if o.key == key)
    with pytest.raises(IllegalConfigurationError, match=f"^{re.escape(key)}: expected a {bits}-bit integer"):
        option.parse(key, str(high + 1))
    with pytest.raises(IllegalConfigurationError, match=r"^key: "):
        float_parser()("key", True)
