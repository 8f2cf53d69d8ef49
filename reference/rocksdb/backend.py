"""`EmbeddedRocksDBStateBackend`: the RocksDB backend as a state backend factory, loadable as `rocksdb` (RDB-6)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from statecert.reference.operator_state import DefaultOperatorStateBackend
from statecert.reference.rocksdb.column_family_store import MAX_VALUE_BYTES
from statecert.reference.rocksdb.keyed_backend import RocksDBKeyedStateBackend
from statecert.reference.rocksdb.settings import RocksDBSettings, settings_from_config
from statecert.spec.backend import BackendCapabilities
from statecert.spec.handles import ROCKSDB_NATIVE_FORMAT
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.operator_backend import OperatorBackendParameters


@dataclass(frozen=True)
class EmbeddedRocksDBStateBackend:
    """Explicit settings win; those left None come from configuration in `configure` (LD-2)."""

    incremental: bool | None = None
    memory_budget_bytes: int | None = None
    write_buffer_ratio: float | None = None
    local_dir: str | None = None
    max_value_bytes: int = MAX_VALUE_BYTES

    name: ClassVar[str] = "rocksdb"

    @property
    def capabilities(self) -> BackendCapabilities:
        """What this configured instance does (SB-2): incremental checkpoints only when they are switched on."""
        return BackendCapabilities(
            async_snapshots=True,
            incremental_checkpoints=bool(self.incremental),
            canonical_savepoints=True,
            native_savepoint_format=ROCKSDB_NATIVE_FORMAT,
            rescaling=True,
            operator_state=True,
            ttl=True,
            schema_evolution=True,
            timers=True,
        )

    def configure(self, config: Mapping[str, object]) -> EmbeddedRocksDBStateBackend:
        from_config = settings_from_config(config)
        return replace(
            self,
            incremental=from_config.incremental if self.incremental is None else self.incremental,
            memory_budget_bytes=self.memory_budget_bytes or from_config.memory_budget_bytes,
            write_buffer_ratio=self.write_buffer_ratio or from_config.write_buffer_ratio,
            local_dir=self.local_dir or from_config.local_dir,
        )

    @property
    def settings(self) -> RocksDBSettings:
        defaults = RocksDBSettings()
        return RocksDBSettings(
            incremental=bool(self.incremental),
            memory_budget_bytes=self.memory_budget_bytes or defaults.memory_budget_bytes,
            write_buffer_ratio=self.write_buffer_ratio or defaults.write_buffer_ratio,
            local_dir=self.local_dir,
        )

    def create_keyed_state_backend(self, params: KeyedBackendParameters[Any]) -> RocksDBKeyedStateBackend:
        return RocksDBKeyedStateBackend(params, self.settings, self.max_value_bytes)

    def create_operator_state_backend(self, params: OperatorBackendParameters) -> DefaultOperatorStateBackend:
        return DefaultOperatorStateBackend(params)


def rocksdb_backend_factory(config: Mapping[str, object]) -> EmbeddedRocksDBStateBackend:
    """Entry point `rocksdb` in `statecert.state_backends`."""
    return EmbeddedRocksDBStateBackend().configure(config)
