"""A RocksDB options factory for `bench_changelog.py`'s large-state regime: every flushed file is compacted at once
into small-file levels, so each incremental checkpoint uploads rewritten files as a terabyte-scale job with uniform
key updates does (compaction churn), at a state size the simulator runs in seconds."""

from __future__ import annotations

import rocksdict


class CompactionHeavy:
    def create_db_options(self, current: rocksdict.Options) -> rocksdict.Options:
        return current

    def create_column_options(self, current: rocksdict.Options) -> rocksdict.Options:
        current.set_level_zero_file_num_compaction_trigger(1)
        current.set_level_compaction_dynamic_level_bytes(False)
        current.set_target_file_size_base(64 * 1024)
        current.set_max_bytes_for_level_base(256 * 1024)
        return current
