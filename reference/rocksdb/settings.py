"""RocksDB settings from Flink's configuration keys: incremental checkpoints, a per-subtask memory budget split
between block cache and write buffers (like Flink's managed memory), the local working directory (RDB-6)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import rocksdict

from statecert.reference import config as cfg
from statecert.spec.errors import IllegalConfigurationError

MEMORY_FIXED_PER_SLOT = "state.backend.rocksdb.memory.fixed-per-slot"
WRITE_BUFFER_RATIO = "state.backend.rocksdb.memory.write-buffer-ratio"
LOCAL_DIR = "state.backend.rocksdb.localdir"
DEFAULT_MEMORY_BUDGET = 64 * 1024 * 1024
DEFAULT_WRITE_BUFFER_RATIO = 0.5


@dataclass(frozen=True)
class RocksDBSettings:
    incremental: bool = False
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET
    write_buffer_ratio: float = DEFAULT_WRITE_BUFFER_RATIO
    local_dir: str | None = None

    def __post_init__(self) -> None:
        if self.memory_budget_bytes < 1024 * 1024:
            raise IllegalConfigurationError(f"{MEMORY_FIXED_PER_SLOT}: at least 1 MiB, got {self.memory_budget_bytes}")
        if not 0 < self.write_buffer_ratio < 1:
            raise IllegalConfigurationError(f"{WRITE_BUFFER_RATIO}: must lie in (0, 1), got {self.write_buffer_ratio}")

    @property
    def block_cache_bytes(self) -> int:
        return int(self.memory_budget_bytes * (1 - self.write_buffer_ratio))

    @property
    def write_buffer_bytes(self) -> int:
        return int(self.memory_budget_bytes * self.write_buffer_ratio)

    def options(self) -> rocksdict.Options:
        """Raw-mode options: one LRU block cache and a bound on all memtables together."""
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        table = rocksdict.BlockBasedOptions()
        table.set_block_cache(rocksdict.Cache(self.block_cache_bytes))
        options.set_block_based_table_factory(table)
        options.set_db_write_buffer_size(self.write_buffer_bytes)
        options.set_write_buffer_size(max(1024 * 1024, self.write_buffer_bytes // 4))
        return options


def parse_ratio(config: Mapping[str, object], key: str, default: float) -> float:
    value = config.get(key)
    if value is None:
        return default
    try:
        return float(str(value))
    except ValueError:
        raise IllegalConfigurationError(f"{key}: expected a number, got {value!r}") from None


def settings_from_config(config: Mapping[str, object]) -> RocksDBSettings:
    return RocksDBSettings(
        incremental=cfg.get_bool(config, cfg.INCREMENTAL_CHECKPOINTS, False),
        memory_budget_bytes=cfg.get_memory_size(config, MEMORY_FIXED_PER_SLOT, DEFAULT_MEMORY_BUDGET),
        write_buffer_ratio=parse_ratio(config, WRITE_BUFFER_RATIO, DEFAULT_WRITE_BUFFER_RATIO),
        local_dir=cfg.get_str(config, LOCAL_DIR),
    )
