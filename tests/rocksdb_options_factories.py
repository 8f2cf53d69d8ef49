"""RocksDB options factories for the tuning tests, named by `state.backend.rocksdb.options-factory`."""

from __future__ import annotations

from collections.abc import Mapping

import rocksdict

BUFFERS_KEY = "statecert.test.write-buffers"


class MoreWriteBuffers:
    """Sets 7 write buffers, 64 KiB blocks and its own 1 GiB block cache (which managed memory must replace)."""

    buffers = 7

    def create_db_options(self, current: rocksdict.Options) -> rocksdict.Options:
        return current

    def create_column_options(self, current: rocksdict.Options) -> rocksdict.Options:
        current.set_max_write_buffer_number(self.buffers)
        return current

    def create_table_options(self, table: rocksdict.BlockBasedOptions) -> None:
        table.set_block_size(64 * 1024)
        table.set_block_cache(rocksdict.Cache(1024 * 1024 * 1024))


class ConfigurableWriteBuffers(MoreWriteBuffers):
    """Reads its number of write buffers from `statecert.test.write-buffers`."""

    def configure(self, config: Mapping[str, object]) -> ConfigurableWriteBuffers:
        configured = ConfigurableWriteBuffers()
        configured.buffers = int(str(config.get(BUFFERS_KEY, 5)))
        return configured


NOT_A_FACTORY = object()
