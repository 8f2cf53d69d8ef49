"""RocksDB's tuning surface reaches RocksDB (RDB-8 to RDB-11): what each setting does is read back from the OPTIONS
file RocksDB writes and from RocksDB's own properties, never from statecert's settings objects."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.conformance.helpers import keyed_backend
from statecert.reference.rocksdb.backend import EmbeddedRocksDBStateBackend
from statecert.reference.rocksdb.settings import RocksDBSettings, settings_from_config
from statecert.reference.rocksdb.shared_memory import SlotMemory, cache_capacity, write_buffer_manager_capacity
from statecert.reference.serializers import LongSerializer
from statecert.spec.errors import DynamicCodeLoadingError, IllegalConfigurationError
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.state import ValueStateDescriptor

VALUE = ValueStateDescriptor("v", serializer=LongSerializer())
MB = 1024 * 1024


def options_of(backend: Any) -> dict[str, str]:
    """The [CFOptions "default"] and [TableOptions/BlockBasedTable "default"] and [DBOptions] entries RocksDB wrote."""
    values: dict[str, str] = {}
    for line in backend.options_file.read_text().splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name not in values:
            values[name] = value
    return values


def filled(state_backend: Any, keys: int = 200, **kwargs: Any) -> Any:
    backend = keyed_backend(state_backend, **kwargs)
    state = backend.get_or_create_state(VALUE)
    for i in range(keys):
        key = f"k{i}"
        try:
            backend.set_current_key(key)
        except Exception:
            continue
        state.update(i)
    return backend


def rocksdb(tmp_path: Path, config: dict[str, object], **explicit: Any) -> Any:
    return EmbeddedRocksDBStateBackend(local_dir=str(tmp_path), **explicit).configure(config)


# Flink's PredefinedOptions, as RocksDB records them in its OPTIONS file; every profile: no fsync, no stats dump
PROFILES = {
    "DEFAULT": {"max_background_jobs": "2", "target_file_size_base": str(64 * MB), "max_write_buffer_number": "2"},
    "SPINNING_DISK_OPTIMIZED": {
        "max_background_jobs": "4",
        "max_open_files": "-1",
        "compaction_style": "kCompactionStyleLevel",
        "level_compaction_dynamic_level_bytes": "true",
        "target_file_size_base": str(64 * MB),
    },
    "SPINNING_DISK_OPTIMIZED_HIGH_MEM": {
        "max_background_jobs": "4",
        "max_open_files": "-1",
        "target_file_size_base": str(256 * MB),
        "max_bytes_for_level_base": str(1024 * MB),
        "write_buffer_size": str(64 * MB),
        "min_write_buffer_number_to_merge": "3",
        "max_write_buffer_number": "4",
        "block_size": str(128 * 1024),
        "filter_policy": "bloomfilter",
    },
    "FLASH_SSD_OPTIMIZED": {"max_background_jobs": "4", "max_open_files": "-1", "target_file_size_base": str(64 * MB)},
}
EVERY_PROFILE = {"use_fsync": "false", "stats_dump_period_sec": "0"}


@pytest.mark.requirement("RDB-8")
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_predefined_options_reach_rocksdb(tmp_path: Path, profile: str) -> None:
    config = {"state.backend.rocksdb.predefined-options": profile.lower() if profile != "DEFAULT" else profile}
    with filled(rocksdb(tmp_path, config)) as backend:
        written = options_of(backend)
    expected = {**EVERY_PROFILE, **PROFILES[profile]}
    wrong = {k: (v, written.get(k)) for k, v in expected.items() if written.get(k) != v}
    assert not wrong, (
        f"RDB-8: predefined-options={profile}: expected Flink's settings in RocksDB's OPTIONS file, got these "
        f"entries differing (expected, got): {wrong}"
    )


@pytest.mark.requirement("RDB-10")
@given(total=st.integers(1 * MB, 1 << 40), ratio=st.floats(0.01, 0.99))
def test_the_shared_cache_and_write_buffer_manager_are_sized_as_flink_sizes_them(total: int, ratio: float) -> None:
    """Flink's RocksDBMemoryControllerUtils: cache (long) ((3 - r) * total / 3), write buffer manager
    (long) (2 * total * r / 3), so memtables and cached blocks together stay within the total."""
    got = (cache_capacity(total, ratio), write_buffer_manager_capacity(total, ratio))
    expected = (int((3 - ratio) * total / 3), int(2 * total * ratio / 3))
    assert got == expected, (
        f"RDB-10: (cache_capacity, write_buffer_manager_capacity)({total}, {ratio}): expected Flink's {expected}, "
        f"got {got}"
    )


@pytest.mark.requirement("RDB-10")
def test_a_slots_memory_is_made_anew_in_each_process_and_slots_are_interchangeable() -> None:
    """A slot's shared cache does not travel to a Spark worker (pickling drops it, the worker makes its own), and a
    backend's identity does not depend on which slot object it holds."""
    slot = SlotMemory()
    here = slot.get(8 * MB, 0.5)
    copy = pickle.loads(pickle.dumps(slot))
    there = copy.get(8 * MB, 0.5)
    assert there is not here and there.cache is not here.cache and copy.get(8 * MB, 0.5) is there, (
        "RDB-10: pickle.loads(pickle.dumps(slot)).get(8 MiB, 0.5): expected new shared resources of its own, made "
        f"once, got {'the original' if there is here else 'new ones each call'}"
    )
    assert SlotMemory() == slot and hash(SlotMemory()) == hash(slot), (
        "RDB-10: SlotMemory() == another SlotMemory(): expected equal with equal hashes, got unequal"
    )


@pytest.mark.requirement("RDB-10", "LD-6")
@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"state.backend.rocksdb.memory.fixed-per-slot": str(MB - 1)}, "fixed-per-slot"),
        ({"state.backend.rocksdb.memory.fixed-per-tm": str(MB - 1)}, "fixed-per-tm"),
        ({"state.backend.rocksdb.memory.write-buffer-ratio": "0"}, "write-buffer-ratio: must lie in (0, 1)"),
        ({"state.backend.rocksdb.memory.high-prio-pool-ratio": "0"}, "high-prio-pool-ratio: must lie in (0, 1)"),
        ({"state.backend.rocksdb.memory.write-buffer-ratio": "1"}, "write-buffer-ratio: must lie in (0, 1)"),
        ({"state.backend.rocksdb.memory.write-buffer-ratio": "1.5"}, "write-buffer-ratio: must lie in (0, 1)"),
        (
            {
                "state.backend.rocksdb.memory.write-buffer-ratio": "0.5",
                "state.backend.rocksdb.memory.high-prio-pool-ratio": "0.5",
            },
            "the two must sum to less than 1",
        ),
    ],
)
def test_memory_settings_just_outside_their_bounds_are_refused(
    tmp_path: Path, config: dict[str, str], named: str
) -> None:
    with pytest.raises(IllegalConfigurationError) as raised:
        rocksdb(tmp_path, config)
    assert named in str(raised.value), (
        f"RDB-10: configure({config}): expected an IllegalConfigurationError naming {named!r}, got {raised.value}"
    )


@pytest.mark.requirement("RDB-10")
@pytest.mark.parametrize(
    "config",
    [
        {"state.backend.rocksdb.memory.fixed-per-slot": str(MB)},
        {"state.backend.rocksdb.memory.managed": "false", "state.backend.rocksdb.memory.fixed-per-tm": str(MB)},
        {
            "state.backend.rocksdb.memory.write-buffer-ratio": "0.49",
            "state.backend.rocksdb.memory.high-prio-pool-ratio": "0.5",
        },
    ],
)
def test_memory_settings_on_their_bounds_are_taken(tmp_path: Path, config: dict[str, str]) -> None:
    try:
        with filled(rocksdb(tmp_path, config), 10):
            pass
    except IllegalConfigurationError as exc:
        raise AssertionError(f"RDB-10: configure({config}): expected a working backend, got {exc}") from exc


@pytest.mark.requirement("RDB-6", "LD-6")
def test_settings_made_without_configuration_are_the_configuration_defaults() -> None:
    """`RocksDBSettings()` (a backend made in code) is what an empty configuration gives, and settings are an
    immutable value: equal settings hash alike, so they can key a cache of configured backends."""
    from_code, from_config = RocksDBSettings(), settings_from_config({})
    assert from_code == from_config and hash(from_code) == hash(from_config), (
        f"RDB-6: RocksDBSettings() vs settings_from_config({{}}): expected equal values, got {from_code} and "
        f"{from_config}"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        from_code.incremental = True  # type: ignore[misc]


@pytest.mark.requirement("RDB-9")
@pytest.mark.parametrize(
    ("factory", "extra", "buffers"),
    [
        ("tests.rocksdb_options_factories:MoreWriteBuffers", {}, "7"),
        ("tests.rocksdb_options_factories:ConfigurableWriteBuffers", {"statecert.test.write-buffers": "9"}, "9"),
    ],
)
def test_an_options_factory_wins_over_predefined_options(
    tmp_path: Path, factory: str, extra: dict[str, str], buffers: str
) -> None:
    config = {
        "state.backend.rocksdb.predefined-options": "SPINNING_DISK_OPTIMIZED_HIGH_MEM",
        "state.backend.rocksdb.options-factory": factory,
        **extra,
    }
    with filled(rocksdb(tmp_path, config)) as backend:
        written = options_of(backend)
    assert (written["max_write_buffer_number"], written["block_size"]) == (buffers, str(64 * 1024)), written
    assert written["target_file_size_base"] == str(256 * MB), "the predefined options the factory left stay"


@pytest.mark.requirement("RDB-10")
@pytest.mark.parametrize(
    ("config", "expected_total"),
    [
        ({}, 64 * MB),
        ({"state.backend.rocksdb.memory.fixed-per-slot": "24mb"}, 24 * MB),
        (
            {"state.backend.rocksdb.memory.managed": "false", "state.backend.rocksdb.memory.fixed-per-tm": "12mb"},
            12 * MB,
        ),
    ],
)
def test_managed_and_fixed_memory_override_the_factorys_cache(
    tmp_path: Path, config: dict[str, str], expected_total: int
) -> None:
    config = {
        **config,
        "state.backend.rocksdb.options-factory": "tests.rocksdb_options_factories:MoreWriteBuffers",
        "state.backend.rocksdb.metrics.block-cache-capacity": "true",
        "state.backend.rocksdb.memory.write-buffer-ratio": "0.4",
    }
    with filled(rocksdb(tmp_path, config)) as backend:
        capacity = backend.native_metrics()["block-cache-capacity"]
    assert capacity == cache_capacity(expected_total, 0.4), (
        f"block cache capacity: expected {cache_capacity(expected_total, 0.4)} (of {expected_total} bytes), got "
        f"{capacity} (the factory's 1 GiB cache must be replaced)"
    )


@pytest.mark.requirement("RDB-8", "RDB-9", "RDB-10")
@pytest.mark.parametrize(
    ("setting", "capacity"),
    [
        ({"state.backend.rocksdb.options-factory": "tests.rocksdb_options_factories:MoreWriteBuffers"}, 1024 * MB),
        ({"state.backend.rocksdb.predefined-options": "SPINNING_DISK_OPTIMIZED_HIGH_MEM"}, 256 * MB),
    ],
    ids=["the options factory's", "the high-memory profile's"],
)
def test_without_managed_memory_the_configured_block_cache_is_used(
    tmp_path: Path, setting: dict[str, str], capacity: int
) -> None:
    config = {
        "state.backend.rocksdb.memory.managed": "false",
        "state.backend.rocksdb.metrics.block-cache-capacity": "true",
        **setting,
    }
    with filled(rocksdb(tmp_path, config)) as backend:
        got = backend.native_metrics()["block-cache-capacity"]
    assert got == capacity, (
        f"RDB-10: {setting} without managed memory, native metric block-cache-capacity: expected the configured "
        f"cache's {capacity}, got {got}"
    )


@pytest.mark.requirement("RDB-10")
@pytest.mark.parametrize("managed", [True, False])
def test_one_block_cache_per_slot(tmp_path: Path, managed: bool) -> None:
    """Two subtasks' RocksDB instances of one slot: with shared memory the write buffer manager charges one
    instance's memtables to the cache both use, so the idle one sees its cache usage grow; without, it does not."""
    config = {
        "state.backend.rocksdb.memory.managed": str(managed).lower(),
        "state.backend.rocksdb.metrics.block-cache-usage": "true",
    }
    state_backend = rocksdb(tmp_path, config)
    with keyed_backend(state_backend, key_group_range=KeyGroupRange(0, 127)) as idle:
        before = idle.native_metrics()["block-cache-usage"]
        with filled(state_backend, 5000, key_group_range=KeyGroupRange(0, 127)):
            after = idle.native_metrics()["block-cache-usage"]
    if managed:
        assert after > before, f"shared cache: the idle instance's usage stayed at {before} while the other wrote"
    else:
        assert after == before, f"separate caches: the idle instance's usage went from {before} to {after}"


@pytest.mark.requirement("RDB-11")
def test_native_metrics_are_rocksdbs_properties(tmp_path: Path) -> None:
    config = {
        "state.backend.rocksdb.metrics.estimate-num-keys": "true",
        "state.backend.rocksdb.metrics.num-running-compactions": "false",
        "state.backend.rocksdb.metrics.column-family-as-variable": "true",
    }
    with filled(rocksdb(tmp_path, config), 300, key_group_range=KeyGroupRange(0, 127)) as backend:
        metrics = backend.native_metrics()
    assert metrics == {"estimate-num-keys": 300}, metrics


@pytest.mark.requirement("RDB-8", "RDB-9", "RDB-10", "RDB-11", "LD-6")
@pytest.mark.parametrize(
    ("config", "error", "named"),
    [
        ({"state.backend.rocksdb.predefined-options": "FAST"}, IllegalConfigurationError, "predefined-options"),
        ({"state.backend.rocksdb.memory.write-buffer-ratio": "0.95"}, IllegalConfigurationError, "high-prio-pool"),
        ({"state.backend.rocksdb.memory.high-prio-pool-ratio": "1.5"}, IllegalConfigurationError, "high-prio-pool"),
        ({"state.backend.rocksdb.metrics.no-such-metric": "true"}, IllegalConfigurationError, "no-such-metric"),
        ({"state.backend.rocksdb.memory.fixed-per-tm": "1kb"}, IllegalConfigurationError, "fixed-per-tm"),
        ({"state.backend.rocksdb.timer-service.factory": "JVM"}, IllegalConfigurationError, "timer-service"),
        ({"state.backend.rocksdb.options-factory": "tests.nowhere:Factory"}, DynamicCodeLoadingError, "tests.nowhere"),
        (
            {"state.backend.rocksdb.options-factory": "tests.rocksdb_options_factories:NOT_A_FACTORY"},
            DynamicCodeLoadingError,
            "NOT_A_FACTORY",
        ),
    ],
)
def test_bad_tuning_values_are_configuration_errors(
    tmp_path: Path, config: dict[str, str], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        rocksdb(tmp_path, config)


class _Collect:
    def __init__(self) -> None:
        self.fired: list[tuple[Any, Any, int]] = []

    def on_event_time(self, timer: Any) -> None:
        self.fired.append((timer.key, timer.namespace, timer.timestamp))

    def on_processing_time(self, timer: Any) -> None:
        self.fired.append((timer.key, timer.namespace, timer.timestamp))


def _timer_column_family_entries(backend: Any) -> int:
    """Entries RocksDB itself holds in the timer service's column families (read from the database, not the heap)."""
    from statecert.reference.rocksdb.native_restore import column_family_name

    names = [n for n in backend.registered_state_names if n.startswith("_timer_state/")]
    total = 0
    for name in names:
        column_family = backend._db.get_column_family(column_family_name(name))
        total += sum(1 for _ in column_family.keys())  # noqa: SIM118 - Rdict.keys(), not a dict
    return total


@pytest.mark.requirement("RDB-12", "TM-6")
@pytest.mark.parametrize("factory", ["heap", "ROCKSDB"])
@pytest.mark.parametrize("incremental", [False, True])
def test_heap_timers_reach_rocksdb_only_in_the_synchronous_part_of_a_snapshot(
    tmp_path: Path, factory: str, incremental: bool
) -> None:
    """HEAP: registered timers are not in RocksDB until `snapshot` is called, and are there right after it, before
    the asynchronous part runs; ROCKSDB: they are written as registered. Either way the snapshot restores them
    (into a backend of the other factory too) and only them."""
    from statecert.conformance.helpers import location_for
    from statecert.reference.storage.filesystem import FileSystemCheckpointStorage

    config = {
        "state.backend.rocksdb.timer-service.factory": factory,
        "execution.checkpointing.incremental": str(incremental),
    }
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"))
    with keyed_backend(rocksdb(tmp_path / "a", config), key_group_range=KeyGroupRange(0, 127)) as backend:
        service = backend.get_timer_service("t", LongSerializer(), _Collect())
        for i in range(20):
            backend.set_current_key(f"k{i}")
            service.register_event_time_timer(i % 3, 100 + i)
        in_rocksdb = _timer_column_family_entries(backend)
        assert in_rocksdb == (0 if factory == "heap" else 20), f"{factory}: {in_rocksdb} timers in RocksDB"
        task = backend.snapshot(1, 0, location_for(storage, 1))
        assert _timer_column_family_entries(backend) == 20, "the synchronous part did not write the heap timers"
        backend.set_current_key("k0")
        service.delete_event_time_timer(0, 100)  # after the snapshot call: not in the snapshot (TM-6)
        handle = task.run()
    other = "ROCKSDB" if factory == "heap" else "HEAP"
    restored_config = {"state.backend.rocksdb.timer-service.factory": other}
    for state_backend in (rocksdb(tmp_path / "b", config), rocksdb(tmp_path / "c", restored_config)):
        with keyed_backend(state_backend, key_group_range=KeyGroupRange(0, 127), restore=[handle]) as backend:
            collect = _Collect()
            backend.get_timer_service("t", LongSerializer(), collect).advance_watermark(1000)
            assert sorted(collect.fired) == sorted((f"k{i}", i % 3, 100 + i) for i in range(20)), collect.fired
