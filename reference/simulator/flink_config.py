"""A simulated job's settings from Flink 2.x keys (a job or scenario file's `[config]` table): the checkpointing
keys become the coordinator's settings, the restart keys the restart strategy, the backend keys the job's backend,
recovery keys where it starts, the buffer-timeout keys its network buffers' timeout, the mini-batch keys its keyed
tasks' bundles, the storage key its checkpoint storage; everything else reaches the backend and storage loaders as it
is, but for the directories every run chooses itself, which are refused."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from statecert.reference import config as cfg
from statecert.reference.config import catalog
from statecert.reference.coordinator.restart import FixedDelayRestart, RestartStrategy, restart_strategy_from_config
from statecert.reference.coordinator.settings import CheckpointingMode, CheckpointingSettings
from statecert.reference.simulator.job_spec import JobSpec
from statecert.spec.errors import IllegalConfigurationError


def checkpointing_as_config(settings: CheckpointingSettings) -> dict[str, object]:
    """The Flink keys that describe `settings` (the job file's native `[checkpointing]` section)."""
    config: dict[str, object] = {
        catalog.CHECKPOINTING_INTERVAL.key: f"{settings.interval_ms} ms",
        catalog.CHECKPOINTING_TIMEOUT.key: f"{settings.timeout_ms} ms",
        catalog.MAX_CONCURRENT_CHECKPOINTS.key: settings.max_concurrent,
        catalog.MIN_PAUSE.key: f"{settings.min_pause_ms} ms",
        catalog.TOLERABLE_FAILED_CHECKPOINTS.key: settings.tolerable_failures,
        catalog.MAX_RETAINED_CHECKPOINTS.key: settings.retained,
        catalog.EXTERNALIZED_CHECKPOINT_RETENTION.key: settings.retention.value,
        catalog.CHECKPOINTING_MODE.key: "AT_LEAST_ONCE"
        if settings.mode is CheckpointingMode.AT_LEAST_ONCE
        else "EXACTLY_ONCE",
    }
    if settings.mode is CheckpointingMode.UNALIGNED or settings.alignment_timeout_ms is not None:
        config[catalog.UNALIGNED_ENABLED.key] = True
        config[catalog.ALIGNED_CHECKPOINT_TIMEOUT.key] = f"{settings.alignment_timeout_ms or 0} ms"
    return config


CHOSEN_BY_THE_RUNNER = {
    catalog.CHECKPOINTS_DIRECTORY: "a run's checkpoints go to the directory its runner gives it (--checkpoint-dir "
    "on Spark, the work directory on the simulator)",
    catalog.SAVEPOINT_DIRECTORY: "a run's savepoints go to the directory its runner gives it (--checkpoint-dir on "
    "Spark, the work directory on the simulator)",
    catalog.ROCKSDB_LOCAL_DIR: "each run keeps RocksDB's working directories in its own work directory",
}
"""Keys a job or scenario file cannot set, because every run chooses them itself: a value would be ignored."""


def refuse_keys_chosen_by_the_runner(config: Mapping[str, object]) -> None:
    """IllegalConfigurationError naming the first key of `config` a run chooses itself (CHOSEN_BY_THE_RUNNER)."""
    for option, why in CHOSEN_BY_THE_RUNNER.items():
        for key in option.all_keys:
            if config.get(key) is not None:
                raise IllegalConfigurationError(f"{key}: not settable in a job or scenario file: {why}")


def checkpoint_storage_kind(config: Mapping[str, object]) -> str | None:
    """`execution.checkpointing.storage` as a simulated or scenario job's storage (`jobmanager` or `filesystem`, any
    case), None when unset; any other storage is an IllegalConfigurationError naming the key."""
    value = cfg.read(config, catalog.CHECKPOINT_STORAGE)
    if value is None:
        return None
    kind = value.lower()
    if kind not in ("jobmanager", "filesystem"):
        raise IllegalConfigurationError(
            f"{catalog.CHECKPOINT_STORAGE.key}: a job or scenario runs on 'jobmanager' or 'filesystem' storage, "
            f"got {kind!r}"
        )
    return kind


def with_flink_config(spec: JobSpec, config: Mapping[str, object]) -> JobSpec:
    """`spec` with the Flink keys of `config` applied over its native settings (IllegalConfigurationError names
    the key)."""
    if not config:
        return spec
    cfg.warn_unknown_keys(config)
    refuse_keys_chosen_by_the_runner(config)
    keys = dict(config)
    settings = CheckpointingSettings.from_config(cfg.overlay(checkpointing_as_config(spec.checkpointing), keys))
    assert settings is not None  # the native settings always carry an interval
    as_text = tuple(sorted((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in keys.items()))
    changes: dict[str, object] = {"checkpointing": settings, "config": as_text}
    if cfg.is_set(keys, catalog.STATE_BACKEND):
        changes["backend"] = cfg.read(keys, catalog.STATE_BACKEND)
    if (storage := checkpoint_storage_kind(keys)) is not None:
        changes["storage"] = storage
    if cfg.is_set(keys, catalog.INCREMENTAL_CHECKPOINTS):
        changes["incremental"] = cfg.read(keys, catalog.INCREMENTAL_CHECKPOINTS)
    if cfg.is_set(keys, catalog.CHANGELOG_ENABLED):
        changes["changelog"] = cfg.read(keys, catalog.CHANGELOG_ENABLED)
    if cfg.is_set(keys, catalog.CHANGELOG_MATERIALIZE_INTERVAL):
        changes["materialize_interval_ms"] = cfg.read(keys, catalog.CHANGELOG_MATERIALIZE_INTERVAL)
    if cfg.is_set(keys, catalog.DATA_INLINE_THRESHOLD):
        changes["file_state_size_threshold"] = cfg.read(keys, catalog.DATA_INLINE_THRESHOLD)
    if cfg.is_set(keys, catalog.BUFFER_TIMEOUT):
        changes["buffer_timeout_ms"] = float(cfg.read(keys, catalog.BUFFER_TIMEOUT))
    if cfg.is_set(keys, catalog.BUFFER_TIMEOUT_ENABLED) and not cfg.read(keys, catalog.BUFFER_TIMEOUT_ENABLED):
        changes["buffer_timeout_ms"] = math.inf  # sent only when full or flushed before an event
    if cfg.is_set(keys, catalog.MINI_BATCH_ENABLED) and cfg.read(keys, catalog.MINI_BATCH_ENABLED):
        latency, size = cfg.read(keys, catalog.MINI_BATCH_ALLOW_LATENCY), cfg.read(keys, catalog.MINI_BATCH_SIZE)
        for option, value in ((catalog.MINI_BATCH_ALLOW_LATENCY, latency), (catalog.MINI_BATCH_SIZE, size)):
            if value <= 0:  # Flink refuses mini-batch without both bounds
                raise IllegalConfigurationError(
                    f"{option.key}: must be positive when {catalog.MINI_BATCH_ENABLED.key} is true, got {value}"
                )
        changes["mini_batch_size"], changes["mini_batch_latency_ms"] = size, float(latency)
    return dataclasses.replace(spec, **changes)  # type: ignore[arg-type]


def restart_strategy(spec: JobSpec) -> RestartStrategy:
    """The job's restart strategy: its native fixed delay, unless `[config]` sets `restart-strategy.*`."""
    config = dict(spec.config)
    if not any(key.startswith("restart-strategy") for key in config):
        return FixedDelayRestart(spec.restart_attempts, spec.restart_delay_ms)
    return restart_strategy_from_config(config, checkpointing_enabled=True)
