"""`EmbeddedRocksDBStateBackend`: the RocksDB backend as a state backend factory, loadable as `rocksdb` (RDB-6)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from statecert.reference.operator_state import DefaultOperatorStateBackend
from statecert.reference.rocksdb.column_family_store import MAX_VALUE_BYTES
from statecert.reference.rocksdb.keyed_backend import RocksDBKeyedStateBackend
from statecert.reference.rocksdb.predefined_options import PredefinedOptions
from statecert.reference.rocksdb.settings import RocksDBSettings, settings_from_config
from statecert.reference.rocksdb.shared_memory import SlotMemory
from statecert.spec.backend import BackendCapabilities
from statecert.spec.handles import ROCKSDB_NATIVE_FORMAT
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.operator_backend import OperatorBackendParameters


@dataclass(frozen=True)
class EmbeddedRocksDBStateBackend:
    """Explicit settings win; those left None come from configuration in `configure` (LD-2). Every keyed backend
    this object creates in one process shares the slot's block cache and write buffer manager (RDB-10)."""

    incremental: bool | None = None
    memory_budget_bytes: int | None = None
    write_buffer_ratio: float | None = None
    local_dir: str | None = None
    max_value_bytes: int = MAX_VALUE_BYTES
    predefined_options: PredefinedOptions | None = None
    options_factory: str | None = None
    configured: RocksDBSettings = field(default_factory=RocksDBSettings)
    """What `configure` read from the configuration (the keys of RDB-6, RDB-8 to RDB-11)."""
    slot: SlotMemory = field(default_factory=SlotMemory, compare=False, repr=False)

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
            configured=from_config,
        )

    @property
    def settings(self) -> RocksDBSettings:
        c = self.configured
        return replace(
            c,
            incremental=bool(self.incremental),
            memory_budget_bytes=self.memory_budget_bytes or c.memory_budget_bytes,
            memory_fixed_per_slot=c.memory_fixed_per_slot
            or self.memory_budget_bytes not in (None, c.memory_budget_bytes),
            write_buffer_ratio=self.write_buffer_ratio or c.write_buffer_ratio,
            local_dir=self.local_dir,
            predefined_options=self.predefined_options or c.predefined_options,
            options_factory=self.options_factory or c.options_factory,
        )

    def create_keyed_state_backend(self, params: KeyedBackendParameters[Any]) -> RocksDBKeyedStateBackend:
        return RocksDBKeyedStateBackend(params, self.settings, self.max_value_bytes, self.slot)

    def create_operator_state_backend(self, params: OperatorBackendParameters) -> DefaultOperatorStateBackend:
        return DefaultOperatorStateBackend(params)


def rocksdb_backend_factory(config: Mapping[str, object]) -> EmbeddedRocksDBStateBackend:
    """Entry point `rocksdb` in `statecert.state_backends`."""
    return EmbeddedRocksDBStateBackend().configure(config)
