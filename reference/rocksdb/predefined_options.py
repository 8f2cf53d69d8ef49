"""Flink's `PredefinedOptions` (`state.backend.rocksdb.predefined-options`) as rocksdict settings, one for one with
Flink's `PredefinedOptions.java` (RDB-8). RocksDB's info log level is not exposed by rocksdict and is left as is."""

from __future__ import annotations

import enum

import rocksdict

MB = 1024 * 1024


class PredefinedOptions(str, enum.Enum):
    DEFAULT = "DEFAULT"
    SPINNING_DISK_OPTIMIZED = "SPINNING_DISK_OPTIMIZED"
    SPINNING_DISK_OPTIMIZED_HIGH_MEM = "SPINNING_DISK_OPTIMIZED_HIGH_MEM"
    FLASH_SSD_OPTIMIZED = "FLASH_SSD_OPTIMIZED"

    def apply(self, options: rocksdict.Options, table: rocksdict.BlockBasedOptions) -> None:
        """Set this profile's database, column-family and table options (every profile: no fsync, no stats dump)."""
        options.set_use_fsync(False)
        options.set_stats_dump_period_sec(0)
        if self is PredefinedOptions.DEFAULT:
            return
        options.increase_parallelism(4)
        options.set_max_open_files(-1)
        if self is PredefinedOptions.FLASH_SSD_OPTIMIZED:
            return
        options.set_compaction_style(rocksdict.DBCompactionStyle.level())
        options.set_level_compaction_dynamic_level_bytes(True)
        if self is PredefinedOptions.SPINNING_DISK_OPTIMIZED_HIGH_MEM:
            options.set_target_file_size_base(256 * MB)
            options.set_max_bytes_for_level_base(4 * 256 * MB)
            options.set_write_buffer_size(64 * MB)
            options.set_min_write_buffer_number_to_merge(3)
            options.set_max_write_buffer_number(4)
            table.set_block_cache(rocksdict.Cache(256 * MB))
            table.set_block_size(128 * 1024)
            table.set_bloom_filter(10, False)
