"""RocksDB settings from Flink's configuration keys (RDB-6, RDB-8 to RDB-11): incremental checkpoints, the local
working directory, predefined options, a user options factory, managed or fixed memory shared per slot or per
process, native metrics and the timer service factory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import rocksdict

from statecert.reference import config as cfg
from statecert.reference.config import catalog
from statecert.reference.rocksdb.native_metrics import enabled_metrics
from statecert.reference.rocksdb.options_factory import apply_factory, load_options_factory
from statecert.reference.rocksdb.predefined_options import PredefinedOptions
from statecert.reference.rocksdb.shared_memory import PROCESS_MEMORY, SharedResources, SlotMemory
from statecert.spec.errors import IllegalConfigurationError

MEMORY_MANAGED = catalog.ROCKSDB_MEMORY_MANAGED.key
MEMORY_FIXED_PER_SLOT = catalog.ROCKSDB_MEMORY_FIXED_PER_SLOT.key
MEMORY_FIXED_PER_TM = catalog.ROCKSDB_MEMORY_FIXED_PER_TM.key
WRITE_BUFFER_RATIO = catalog.ROCKSDB_WRITE_BUFFER_RATIO.key
HIGH_PRIO_POOL_RATIO = catalog.ROCKSDB_HIGH_PRIO_POOL_RATIO.key
PREDEFINED_OPTIONS = catalog.ROCKSDB_PREDEFINED_OPTIONS.key
TIMER_SERVICE_FACTORY = catalog.ROCKSDB_TIMER_SERVICE_FACTORY.key
LOCAL_DIR = catalog.ROCKSDB_LOCAL_DIR.key
DEFAULT_MEMORY_BUDGET = 64 * 1024 * 1024
"""The managed memory of one slot: statecert's stand-in for Flink's `taskmanager.memory.managed.*` share."""
DEFAULT_WRITE_BUFFER_RATIO = 0.5
DEFAULT_HIGH_PRIO_POOL_RATIO = 0.1


@dataclass(frozen=True)
class RocksDBSettings:
    incremental: bool = False
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET
    """The slot's memory: `fixed-per-slot` when set, else the managed memory of a slot."""
    write_buffer_ratio: float = DEFAULT_WRITE_BUFFER_RATIO
    local_dir: str | None = None
    predefined_options: PredefinedOptions = PredefinedOptions.DEFAULT
    options_factory: str | None = None
    factory_config: tuple[tuple[str, str], ...] = ()
    """The configuration a configurable options factory is configured with (kept as strings: settings travel to
    Spark workers)."""
    memory_managed: bool = True
    memory_fixed_per_slot: bool = False
    memory_fixed_per_tm: int | None = None
    high_prio_pool_ratio: float = DEFAULT_HIGH_PRIO_POOL_RATIO
    metrics: frozenset[str] = frozenset()
    timer_service_factory: str = "ROCKSDB"

    def __post_init__(self) -> None:
        if self.memory_budget_bytes < 1024 * 1024:
            raise IllegalConfigurationError(f"{MEMORY_FIXED_PER_SLOT}: at least 1 MiB, got {self.memory_budget_bytes}")
        if self.memory_fixed_per_tm is not None and self.memory_fixed_per_tm < 1024 * 1024:
            raise IllegalConfigurationError(f"{MEMORY_FIXED_PER_TM}: at least 1 MiB, got {self.memory_fixed_per_tm}")
        for key, ratio in (
            (WRITE_BUFFER_RATIO, self.write_buffer_ratio),
            (HIGH_PRIO_POOL_RATIO, self.high_prio_pool_ratio),
        ):
            if not 0 < ratio < 1:
                raise IllegalConfigurationError(f"{key}: must lie in (0, 1), got {ratio}")
        if self.write_buffer_ratio + self.high_prio_pool_ratio >= 1:
            raise IllegalConfigurationError(
                f"{WRITE_BUFFER_RATIO} {self.write_buffer_ratio} with {HIGH_PRIO_POOL_RATIO} "
                f"{self.high_prio_pool_ratio}: the two must sum to less than 1"
            )
        if self.timer_service_factory not in ("ROCKSDB", "HEAP"):
            raise IllegalConfigurationError(
                f"{TIMER_SERVICE_FACTORY}: expected ROCKSDB (Flink's default: timers in RocksDB) or HEAP (timers on "
                f"the heap, snapshotted synchronously), got {self.timer_service_factory!r}"
            )

    @property
    def memory_scope(self) -> str:
        """`slot` (fixed-per-slot, or managed memory), `process` (fixed-per-tm) or `none`, with Flink's precedence:
        fixed-per-slot over managed memory; fixed-per-tm only when neither applies."""
        if self.memory_fixed_per_slot or self.memory_managed:
            return "slot"
        return "process" if self.memory_fixed_per_tm is not None else "none"

    def shared_resources(self, slot: SlotMemory) -> SharedResources | None:
        if self.memory_scope == "slot":
            return slot.get(self.memory_budget_bytes, self.write_buffer_ratio)
        if self.memory_scope == "process" and self.memory_fixed_per_tm is not None:
            return PROCESS_MEMORY.get(self.memory_fixed_per_tm, self.write_buffer_ratio)
        return None

    def options(self, slot: SlotMemory | None = None) -> rocksdict.Options:
        """Raw-mode options: predefined options, then the options factory, then the shared memory (RDB-9, RDB-10).
        The high-priority pool ratio is validated but not applied: rocksdict's `Cache` takes a capacity only."""
        options = rocksdict.Options(raw_mode=True)
        # RocksDB opens table files with up to 16 threads, started anew at every open and every new column family
        # even when there is no file to open: most of the cost of opening the small database of one subtask.
        options.set_max_file_opening_threads(1)
        table = rocksdict.BlockBasedOptions()
        self.predefined_options.apply(options, table)
        if self.options_factory is not None:
            factory = load_options_factory(self.options_factory, dict(self.factory_config))
            options = apply_factory(factory, options, table)
        shared = self.shared_resources(slot or SlotMemory())
        if shared is not None:
            table.set_block_cache(shared.cache)
            options.set_write_buffer_manager(shared.write_buffer_manager)
        options.set_block_based_table_factory(table)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        return options


def settings_from_config(config: Mapping[str, object]) -> RocksDBSettings:
    factory = cfg.read(config, catalog.ROCKSDB_OPTIONS_FACTORY)
    if factory is not None:
        load_options_factory(factory, config)  # a factory that cannot be loaded fails at configuration time
    fixed_per_slot = cfg.read(config, catalog.ROCKSDB_MEMORY_FIXED_PER_SLOT)
    return RocksDBSettings(
        incremental=cfg.read(config, catalog.INCREMENTAL_CHECKPOINTS),
        memory_budget_bytes=DEFAULT_MEMORY_BUDGET if fixed_per_slot is None else fixed_per_slot,
        write_buffer_ratio=cfg.read(config, catalog.ROCKSDB_WRITE_BUFFER_RATIO),
        local_dir=cfg.read(config, catalog.ROCKSDB_LOCAL_DIR),
        predefined_options=PredefinedOptions(cfg.read(config, catalog.ROCKSDB_PREDEFINED_OPTIONS)),
        options_factory=factory,
        factory_config=tuple(sorted((str(k), str(v)) for k, v in config.items())) if factory else (),
        memory_managed=cfg.read(config, catalog.ROCKSDB_MEMORY_MANAGED),
        memory_fixed_per_slot=fixed_per_slot is not None,
        memory_fixed_per_tm=cfg.read(config, catalog.ROCKSDB_MEMORY_FIXED_PER_TM),
        high_prio_pool_ratio=cfg.read(config, catalog.ROCKSDB_HIGH_PRIO_POOL_RATIO),
        metrics=enabled_metrics(config),
        timer_service_factory=cfg.read(config, catalog.ROCKSDB_TIMER_SERVICE_FACTORY),
    )
