"""RocksDB settings from Flink's configuration keys (RDB-6, RDB-8 to RDB-11): incremental checkpoints, the local
working directory, predefined options, a user options factory, managed or fixed memory shared per slot or per
process, native metrics and the timer service factory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import rocksdict

from statecert.reference import config as cfg
from statecert.reference.rocksdb.native_metrics import enabled_metrics
from statecert.reference.rocksdb.options_factory import OPTIONS_FACTORY, apply_factory, load_options_factory
from statecert.reference.rocksdb.predefined_options import PredefinedOptions
from statecert.reference.rocksdb.shared_memory import PROCESS_MEMORY, SharedResources, SlotMemory
from statecert.spec.errors import IllegalConfigurationError

MEMORY_MANAGED = "state.backend.rocksdb.memory.managed"
MEMORY_FIXED_PER_SLOT = "state.backend.rocksdb.memory.fixed-per-slot"
MEMORY_FIXED_PER_TM = "state.backend.rocksdb.memory.fixed-per-tm"
WRITE_BUFFER_RATIO = "state.backend.rocksdb.memory.write-buffer-ratio"
HIGH_PRIO_POOL_RATIO = "state.backend.rocksdb.memory.high-prio-pool-ratio"
PREDEFINED_OPTIONS = "state.backend.rocksdb.predefined-options"
TIMER_SERVICE_FACTORY = "state.backend.rocksdb.timer-service.factory"
LOCAL_DIR = "state.backend.rocksdb.localdir"
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


def parse_ratio(config: Mapping[str, object], key: str, default: float) -> float:
    value = config.get(key)
    if value is None:
        return default
    try:
        return float(str(value))
    except ValueError:
        raise IllegalConfigurationError(f"{key}: expected a number, got {value!r}") from None


def parse_predefined(config: Mapping[str, object]) -> PredefinedOptions:
    name = cfg.get_str(config, PREDEFINED_OPTIONS)
    if name is None:
        return PredefinedOptions.DEFAULT
    try:
        return PredefinedOptions(name.upper())
    except ValueError:
        known = ", ".join(p.value for p in PredefinedOptions)
        raise IllegalConfigurationError(f"{PREDEFINED_OPTIONS}: unknown {name!r}; known: {known}") from None


def settings_from_config(config: Mapping[str, object]) -> RocksDBSettings:
    fixed_per_slot = config.get(MEMORY_FIXED_PER_SLOT) is not None
    factory = cfg.get_str(config, OPTIONS_FACTORY)
    if factory is not None:
        load_options_factory(factory, config)  # a factory that cannot be loaded fails at configuration time
    timer_factory = cfg.get_str(config, TIMER_SERVICE_FACTORY)
    return RocksDBSettings(
        incremental=cfg.get_bool(config, cfg.INCREMENTAL_CHECKPOINTS, False),
        memory_budget_bytes=cfg.get_memory_size(config, MEMORY_FIXED_PER_SLOT, DEFAULT_MEMORY_BUDGET),
        write_buffer_ratio=parse_ratio(config, WRITE_BUFFER_RATIO, DEFAULT_WRITE_BUFFER_RATIO),
        local_dir=cfg.get_str(config, LOCAL_DIR),
        predefined_options=parse_predefined(config),
        options_factory=factory,
        factory_config=tuple(sorted((str(k), str(v)) for k, v in config.items())) if factory else (),
        memory_managed=cfg.get_bool(config, MEMORY_MANAGED, True),
        memory_fixed_per_slot=fixed_per_slot,
        memory_fixed_per_tm=(
            cfg.get_memory_size(config, MEMORY_FIXED_PER_TM, 0) if config.get(MEMORY_FIXED_PER_TM) is not None else None
        ),
        high_prio_pool_ratio=parse_ratio(config, HIGH_PRIO_POOL_RATIO, DEFAULT_HIGH_PRIO_POOL_RATIO),
        metrics=enabled_metrics(config),
        timer_service_factory=timer_factory.upper() if timer_factory else "ROCKSDB",
    )
