"""Flink's configuration keys and typed accessors that fail with IllegalConfigurationError naming the key (LD-6)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from statecert.spec.errors import IllegalConfigurationError

STATE_BACKEND_TYPE = "state.backend.type"
LEGACY_STATE_BACKEND = "state.backend"
CHECKPOINT_STORAGE = "state.checkpoint-storage"
CHECKPOINTS_DIRECTORY = "state.checkpoints.dir"
SAVEPOINT_DIRECTORY = "state.savepoints.dir"
FS_SMALL_FILE_THRESHOLD = "state.storage.fs.memory-threshold"
INCREMENTAL_CHECKPOINTS = "state.backend.incremental"
MAX_RETAINED_CHECKPOINTS = "state.checkpoints.num-retained"
CHANGELOG_ENABLED = "state.backend.changelog.enabled"

DEFAULT_FS_SMALL_FILE_THRESHOLD = 20 * 1024
MAX_FS_SMALL_FILE_THRESHOLD = 1024 * 1024
DEFAULT_JOBMANAGER_MAX_STATE_SIZE = 5 * 1024 * 1024

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3, "gb": 1024**3}
_SIZE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")

Config = Mapping[str, object]


def get_str(config: Config, key: str) -> str | None:
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise IllegalConfigurationError(f"{key}: expected a non-empty string, got {value!r}")
    return value.strip()


def get_bool(config: Config, key: str, default: bool) -> bool:
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise IllegalConfigurationError(f"{key}: expected true or false, got {value!r}")


def get_memory_size(config: Config, key: str, default: int, maximum: int | None = None) -> int:
    """Flink's MemorySize syntax: a byte count with an optional unit (b, kb, mb, gb)."""
    value = config.get(key)
    if value is None:
        return default
    match = _SIZE.match(str(value)) if not isinstance(value, bool) else None
    if match is None or match.group(2).lower() not in _UNITS:
        raise IllegalConfigurationError(f"{key}: expected a memory size such as '20kb', got {value!r}")
    size = int(match.group(1)) * _UNITS[match.group(2).lower()]
    if maximum is not None and size > maximum:
        raise IllegalConfigurationError(f"{key}: {size} bytes is above the maximum of {maximum}")
    return size


def get_positive_int(config: Config, key: str, default: int) -> int:
    value = config.get(key)
    if value is None:
        return default
    try:
        number = int(str(value)) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < 1:
        raise IllegalConfigurationError(f"{key}: expected a positive integer, got {value!r}")
    return number


def merge(job_config: Config | None, cluster_config: Config | None) -> dict[str, object]:
    """Job configuration overrides cluster configuration key by key (LD-1)."""
    return {**(cluster_config or {}), **(job_config or {})}
