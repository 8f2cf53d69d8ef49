"""User options factories (`state.backend.rocksdb.options-factory: module:attr`), Flink's `RocksDBOptionsFactory` and
`ConfigurableRocksDBOptionsFactory` in Python (RDB-9). A factory is applied after the predefined options, so its
settings win over them; managed or fixed memory is applied after the factory, so the shared block cache and write
buffer manager win over the factory's (as Flink documents)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import rocksdict

from statecert.reference.loader import load_factory
from statecert.spec.errors import DynamicCodeLoadingError

OPTIONS_FACTORY = "state.backend.rocksdb.options-factory"


@runtime_checkable
class RocksDBOptionsFactory(Protocol):
    """Changes the options every RocksDB instance of the backend is opened with. rocksdict has one `Options` for
    database and column families; table options (block size, cache, filters) come through `create_table_options`,
    because a table factory set on `Options` directly cannot be read back and would be replaced."""

    def create_db_options(self, current: rocksdict.Options) -> rocksdict.Options: ...

    def create_column_options(self, current: rocksdict.Options) -> rocksdict.Options: ...


@runtime_checkable
class ConfigurableRocksDBOptionsFactory(RocksDBOptionsFactory, Protocol):
    """A factory that reads its own keys from the configuration (Flink's `configure(ReadableConfig)`)."""

    def configure(self, config: Mapping[str, object]) -> RocksDBOptionsFactory: ...


def load_options_factory(path: str, config: Mapping[str, object]) -> RocksDBOptionsFactory:
    """The factory `module:attr` names: a class (instantiated without arguments) or an instance; configured with
    the configuration when it is configurable."""
    target: Any = load_factory(path, "statecert.rocksdb_options_factories", "RocksDB options")
    factory = target() if isinstance(target, type) else target
    if isinstance(factory, ConfigurableRocksDBOptionsFactory):
        factory = factory.configure(config)
    if not isinstance(factory, RocksDBOptionsFactory):
        raise DynamicCodeLoadingError(
            f"{OPTIONS_FACTORY}: {path!r} is not a RocksDB options factory (create_db_options and "
            "create_column_options are required)"
        )
    return factory


def apply_factory(
    factory: RocksDBOptionsFactory, options: rocksdict.Options, table: rocksdict.BlockBasedOptions
) -> rocksdict.Options:
    options = factory.create_column_options(factory.create_db_options(options))
    create_table = getattr(factory, "create_table_options", None)
    if create_table is not None:
        create_table(table)
    return options
