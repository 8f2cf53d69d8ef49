"""The embedded RocksDB backend beyond the shared behaviour tests (chapters RDB and CKP)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import warnings
from pathlib import Path
from typing import Any

import crc32c
import fsspec
import pytest

from statecert.conformance.helpers import keyed_backend
from statecert.reference.checkpointing import create_subtasks, take_snapshot
from statecert.reference.completed_checkpoint_store import CompletedCheckpointStore
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.loader import load_state_backend
from statecert.reference.rocksdb.backend import EmbeddedRocksDBStateBackend
from statecert.reference.rocksdb.key_layout import composite_key, key_group_prefix, split_composite_key
from statecert.reference.rocksdb.predefined_options import PredefinedOptions
from statecert.reference.serializers import BytesSerializer, LongSerializer, StringSerializer
from statecert.reference.shared_state_registry import shared_files
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.errors import CheckpointCorruptedError, StateSizeLimitError, UnsupportedSnapshotError
from statecert.spec.handles import FileStateHandle, IncrementalKeyedStateHandle, KeyGroupsStateHandle
from statecert.spec.metadata import CheckpointKind
from statecert.spec.state import VOID_NAMESPACE, ValueStateDescriptor

KEYS = StringSerializer()
COUNT = ValueStateDescriptor("count", serializer=LongSerializer())
BLOB = ValueStateDescriptor("blob", serializer=BytesSerializer())


def put_counts(subtasks: list[Any], counts: dict[str, int]) -> None:
    for key, value in counts.items():
        for s in subtasks:
            if s.keyed.key_group_of(key) in s.keyed.key_group_range:
                s.keyed.set_current_key(key)
                s.keyed.get_or_create_state(COUNT).update(value)


def read_counts(subtasks: list[Any]) -> dict[str, int]:
    out = {}
    for s in subtasks:
        state = s.keyed.get_or_create_state(COUNT)
        for key in list(s.keyed.get_keys("count", VOID_NAMESPACE)):
            s.keyed.set_current_key(key)
            out[key] = state.value()
    return out


def dispose(subtasks: list[Any]) -> None:
    for s in subtasks:
        s.dispose()


@pytest.mark.requirement("RDB-1")
def test_key_layout_keeps_key_groups_contiguous_and_ordered() -> None:
    raws = sorted(
        composite_key(kg, key, ns)
        for kg in (0, 1, 255, 256, 32767)
        for key in (b"", b"a", b"\xff" * 3)
        for ns in (b"", b"w")
    )
    groups = [split_composite_key(r)[0] for r in raws]
    assert groups == sorted(groups), "key groups are not contiguous in key order"
    for raw in raws:
        kg, key, ns, rest = split_composite_key(raw)
        assert composite_key(kg, key, ns) == raw and rest == b""
        assert key_group_prefix(kg) <= raw < key_group_prefix(kg + 1)


@pytest.mark.requirement("RDB-6")
def test_loader_gives_rocksdb_with_configuration(tmp_path: Path) -> None:
    backend: Any = load_state_backend(
        job_config={
            "state.backend.type": "rocksdb",
            "execution.checkpointing.incremental": "true",
            "state.backend.rocksdb.memory.fixed-per-slot": "8mb",
            "state.backend.rocksdb.localdir": str(tmp_path),
        }
    )
    assert isinstance(backend, EmbeddedRocksDBStateBackend)
    assert backend.settings.incremental and backend.settings.memory_budget_bytes == 8 * 1024 * 1024
    assert backend.settings.memory_scope == "slot" and backend.settings.local_dir == str(tmp_path)
    app = EmbeddedRocksDBStateBackend(incremental=False)
    configured: Any = load_state_backend(app, job_config={"execution.checkpointing.incremental": "true"})
    assert configured.settings.incremental is False, "the application's explicit setting must win (LD-2)"


# Each setting an application may give EmbeddedRocksDBStateBackend: its value there, the configuration's key and
# value, and how `settings` shows either.
EXPLICIT_SETTINGS: dict[str, tuple[Any, str, str, Any]] = {
    "incremental": (False, "execution.checkpointing.incremental", "true", lambda s: s.incremental),
    "memory_budget_bytes": (
        16 * 1024 * 1024,
        "state.backend.rocksdb.memory.fixed-per-slot",
        "8mb",
        lambda s: s.memory_budget_bytes,
    ),
    "write_buffer_ratio": (
        0.2,
        "state.backend.rocksdb.memory.write-buffer-ratio",
        "0.3",
        lambda s: s.write_buffer_ratio,
    ),
    "predefined_options": (
        PredefinedOptions.SPINNING_DISK_OPTIMIZED,
        "state.backend.rocksdb.predefined-options",
        "FLASH_SSD_OPTIMIZED",
        lambda s: s.predefined_options,
    ),
    "options_factory": (
        "tests.rocksdb_options_factories:MoreWriteBuffers",
        "state.backend.rocksdb.options-factory",
        "tests.rocksdb_options_factories:ConfigurableWriteBuffers",
        lambda s: s.options_factory,
    ),
}


@pytest.mark.requirement("LD-2", "RDB-6")
@pytest.mark.parametrize("field", sorted(EXPLICIT_SETTINGS))
def test_an_application_setting_wins_and_an_unset_one_comes_from_configuration(field: str) -> None:
    """Each RocksDB setting through the loader's configure(): set on the application's object it wins over the
    configuration, left unset the configuration's value is used (an `or` turned `and` in configure() made the
    configuration win over an explicit write-buffer ratio, and no test saw it)."""
    explicit, key, value, read = EXPLICIT_SETTINGS[field]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        configured: Any = load_state_backend(EmbeddedRocksDBStateBackend(**{field: explicit}), job_config={key: value})
        unset: Any = load_state_backend(EmbeddedRocksDBStateBackend(), job_config={key: value})
        from_config = read(load_state_backend(job_config={"state.backend.type": "rocksdb", key: value}).settings)
    assert read(configured.settings) == explicit, (
        f"LD-2: {field}={explicit!r} on the application's backend, {key}={value}: settings show "
        f"{read(configured.settings)!r}"
    )
    assert read(unset.settings) == from_config != read(EmbeddedRocksDBStateBackend().settings), (
        f"LD-2: {field} unset on the application's backend, {key}={value}: settings show {read(unset.settings)!r}, "
        f"the configuration gives {from_config!r}"
    )


def sst_bytes(directory: Path) -> int:
    """The size of the SST files under `directory`; a file that background compaction deletes between the listing
    and its stat (which failed a fresh-clone tox run) counts for nothing: its data is in the file that replaced it."""
    total = 0
    for f in directory.rglob("*.sst"):
        with contextlib.suppress(FileNotFoundError):
            total += f.stat().st_size
    return total


def flushes_done(backend: Any) -> None:
    """Wait (at most a minute) until RocksDB has no memtable flush pending or running: flushes run in background
    threads, and a fresh-clone tox run on a busy machine counted the SST files before the first had finished."""
    for _ in range(1200):
        metrics = backend.native_metrics()
        if metrics["mem-table-flush-pending"] == 0 and metrics["num-running-flushes"] == 0:
            return
        time.sleep(0.05)


@pytest.mark.requirement("RDB-6")
def test_state_larger_than_memory_budget_spills_and_stays_correct(tmp_path: Path) -> None:
    backend = EmbeddedRocksDBStateBackend(memory_budget_bytes=2 * 1024 * 1024, local_dir=str(tmp_path)).configure(
        {f"state.backend.rocksdb.metrics.{name}": "true" for name in ("mem-table-flush-pending", "num-running-flushes")}
    )
    payload = {f"k{i}": os.urandom(2000) for i in range(6000)}  # 12 MB of incompressible bytes, 6x the budget
    with keyed_backend(backend) as b:
        state = b.get_or_create_state(BLOB)
        for key, value in payload.items():
            b.set_current_key(key)
            state.update(value)
        flushes_done(b)
        on_disk = sst_bytes(Path(b.instance_dir))
        assert on_disk > 2 * 2 * 1024 * 1024, f"only {on_disk} bytes reached disk"
        for key, value in payload.items():
            b.set_current_key(key)
            assert state.value() == value, f"value of {key} changed after spilling"


@pytest.mark.requirement("RDB-5")
def test_value_above_the_limit_is_rejected(tmp_path: Path) -> None:
    backend = EmbeddedRocksDBStateBackend(local_dir=str(tmp_path), max_value_bytes=1000)
    with keyed_backend(backend) as b:
        b.set_current_key("k")
        state = b.get_or_create_state(BLOB)
        state.update(b"x" * 1000)
        with pytest.raises(StateSizeLimitError, match="'blob': a value of 1001 bytes exceeds"):
            state.update(b"x" * 1001)
        assert state.value() == b"x" * 1000


@pytest.mark.requirement("RDB-4")
def test_dispose_removes_every_local_directory(tmp_path: Path) -> None:
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"))
    backend = EmbeddedRocksDBStateBackend(incremental=True, local_dir=str(tmp_path / "local"))
    subtasks = create_subtasks(backend, KEYS, 2, 128)
    put_counts(subtasks, {f"k{i}": i for i in range(500)})
    access = storage.create_checkpoint_storage("job")
    take_snapshot(subtasks, access.initialize_location_for_checkpoint(1), 1, 128)
    assert any((tmp_path / "local").iterdir())
    dispose(subtasks)
    assert list((tmp_path / "local").iterdir()) == []


@pytest.mark.requirement("RDB-4")
def test_leftover_local_directory_never_resurrects_old_data(tmp_path: Path) -> None:
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"))
    backend = EmbeddedRocksDBStateBackend(incremental=True, local_dir=str(tmp_path / "local"))
    access = storage.create_checkpoint_storage("job")
    crashed = create_subtasks(backend, KEYS, 1, 128)
    put_counts(crashed, {"kept": 1})
    pointer = take_snapshot(crashed, access.initialize_location_for_checkpoint(1), 1, 128)
    put_counts(crashed, {"stale": 2, "kept": 99})  # after the checkpoint: must not come back
    crashed[0].keyed.compact()  # the crashed instance's data is on disk in SST files, and it is never disposed
    restored = create_subtasks(backend, KEYS, 1, 128, restore_from=storage.load_checkpoint(pointer).operator("op"))
    assert read_counts(restored) == {"kept": 1}
    dispose(restored + crashed)


def incremental_chain(tmp_path: Path, retained: int, checkpoints: int, abort: set[int] = frozenset()) -> Any:
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    backend = EmbeddedRocksDBStateBackend(incremental=True, local_dir=str(tmp_path / "local"))
    access = storage.create_checkpoint_storage("job")
    store = CompletedCheckpointStore(retained)
    subtasks = create_subtasks(backend, KEYS, 2, 128)
    expected: dict[str, int] = {}
    snapshots: dict[int, dict[str, int]] = {}
    for checkpoint_id in range(1, checkpoints + 1):
        changes = {f"k{(checkpoint_id * 37 + i) % 400}": checkpoint_id * 1000 + i for i in range(60)}
        put_counts(subtasks, changes)
        expected.update(changes)
        location = access.initialize_location_for_checkpoint(checkpoint_id)
        pointer = take_snapshot(subtasks, location, checkpoint_id, 128)
        if checkpoint_id in abort:
            location.dispose_on_failure()
            for s in subtasks:
                s.keyed.notify_checkpoint_aborted(checkpoint_id)
            continue
        store.add(pointer, storage.load_checkpoint(pointer))
        snapshots[checkpoint_id] = dict(expected)
        for s in subtasks:
            s.keyed.notify_checkpoint_complete(checkpoint_id)
        for s in subtasks:  # compaction rewrites SST files between checkpoints
            if checkpoint_id % 4 == 0:
                s.keyed.compact()
    dispose(subtasks)
    return storage, access, store, snapshots, backend


def files_in(url: str) -> set[str]:
    fs, path = fsspec.core.url_to_fs(url)
    return {fs.unstrip_protocol(p) for p in fs.find(path)} if fs.exists(path) else set()


@pytest.mark.requirement("RDB-2", "CKP-1", "CKP-2")
@pytest.mark.parametrize("retained", [1, 2, 3])
def test_shared_directory_holds_exactly_the_retained_checkpoints_files(tmp_path: Path, retained: int) -> None:
    _, access, store, snapshots, backend = incremental_chain(tmp_path, retained, 10)
    referenced = set().union(*(shared_files(c.metadata) for c in store.retained))
    assert referenced, "incremental checkpoints referenced no shared files"
    assert files_in(access.shared_dir) == referenced, "shared/ must hold exactly the retained checkpoints' files"
    kept_dirs = {Path(p).name for p in os.listdir(Path(access.job_dir.removeprefix("file://")))} - {"shared"}
    assert kept_dirs == {f"chk-{c.metadata.checkpoint_id}" for c in store.retained}
    for completed in store.retained:  # every retained checkpoint restores with its own state (RDB-3)
        operator = completed.metadata.operator("op")
        restored = create_subtasks(backend, KEYS, 3, 128, restore_from=operator)
        assert read_counts(restored) == snapshots[completed.metadata.checkpoint_id]
        dispose(restored)


@pytest.mark.requirement("RDB-2")
def test_incremental_checkpoint_reuses_files_and_uploads_only_new_ones(tmp_path: Path) -> None:
    store = incremental_chain(tmp_path, 2, 3)[2]
    first, second = (c.metadata for c in store.retained)
    assert shared_files(first) & shared_files(second), "the newer checkpoint reuses none of the older's files"
    assert shared_files(second) - shared_files(first), "the newer checkpoint uploaded nothing new"


@pytest.mark.requirement("RDB-2", "CKP-2")
def test_aborted_checkpoint_is_never_a_base(tmp_path: Path) -> None:
    _, _, store, snapshots, backend = incremental_chain(tmp_path, 3, 4, abort={2})
    ids = [c.metadata.checkpoint_id for c in store.retained]
    assert ids == [1, 3, 4]
    for completed in store.retained:
        for path in shared_files(completed.metadata):
            fs, local = fsspec.core.url_to_fs(path)
            assert fs.exists(local), f"checkpoint {completed.metadata.checkpoint_id} references missing {path}"
        restored = create_subtasks(backend, KEYS, 2, 128, restore_from=completed.metadata.operator("op"))
        assert read_counts(restored) == snapshots[completed.metadata.checkpoint_id]
        dispose(restored)


@pytest.mark.requirement("CKP-3")
def test_savepoints_are_not_retained_with_checkpoints() -> None:
    from statecert.spec.metadata import CheckpointMetadata

    with pytest.raises(ValueError, match="savepoints"):
        CompletedCheckpointStore(1).add("file:///x", CheckpointMetadata(1, (), CheckpointKind.SAVEPOINT_NATIVE))


@pytest.mark.requirement("RDB-3", "SP-1")
@pytest.mark.parametrize(("first", "second"), [(2, 3), (3, 1)])
def test_heap_to_rocksdb_and_back_through_canonical_savepoints(tmp_path: Path, first: int, second: int) -> None:
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), savepoint_dir=str(tmp_path / "sp"))
    access = storage.create_checkpoint_storage("job")
    counts = {f"key{i}": i * 3 for i in range(700)}
    heap = create_subtasks(HashMapStateBackend(), KEYS, 4, 128)
    put_counts(heap, counts)
    one = take_snapshot(
        heap, access.initialize_location_for_savepoint(1), 1, 128, kind=CheckpointKind.SAVEPOINT_CANONICAL
    )
    rocks = create_subtasks(
        EmbeddedRocksDBStateBackend(local_dir=str(tmp_path / "l")),
        KEYS,
        first,
        128,
        restore_from=storage.load_checkpoint(one).operator("op"),
    )
    assert read_counts(rocks) == counts
    two = take_snapshot(
        rocks, access.initialize_location_for_savepoint(2), 2, 128, kind=CheckpointKind.SAVEPOINT_CANONICAL
    )
    back = create_subtasks(
        HashMapStateBackend(), KEYS, second, 128, restore_from=storage.load_checkpoint(two).operator("op")
    )
    assert read_counts(back) == counts
    dispose(heap + rocks + back)


@pytest.mark.requirement("RDB-3", "SP-3", "KB-RESTORE-5")
def test_native_rocksdb_savepoint_restores_in_rocksdb_only(tmp_path: Path) -> None:
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), savepoint_dir=str(tmp_path / "sp"))
    access = storage.create_checkpoint_storage("job")
    rocks = EmbeddedRocksDBStateBackend(local_dir=str(tmp_path / "l"))
    subtasks = create_subtasks(rocks, KEYS, 2, 128)
    counts = {f"k{i}": i for i in range(300)}
    put_counts(subtasks, counts)
    pointer = take_snapshot(
        subtasks, access.initialize_location_for_savepoint(1), 1, 128, kind=CheckpointKind.SAVEPOINT_NATIVE
    )
    dispose(subtasks)
    operator = storage.load_checkpoint(pointer).operator("op")
    handles = [h for st in operator.subtask_states.values() for h in st.managed_keyed_state]
    assert handles and all(isinstance(h, IncrementalKeyedStateHandle) for h in handles)
    for parallelism in (2, 5):  # fast path and rescaling
        restored = create_subtasks(rocks, KEYS, parallelism, 128, restore_from=operator)
        assert read_counts(restored) == counts
        dispose(restored)
    with pytest.raises(UnsupportedSnapshotError, match="native:rocksdb"):
        create_subtasks(HashMapStateBackend(), KEYS, 2, 128, restore_from=operator)


@pytest.mark.requirement("RDB-3")
def test_full_checkpoints_are_canonical(tmp_path: Path) -> None:
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"))
    subtasks = create_subtasks(EmbeddedRocksDBStateBackend(local_dir=str(tmp_path / "l")), KEYS, 2, 128)
    put_counts(subtasks, {"a": 1, "b": 2})
    pointer = take_snapshot(
        subtasks, storage.create_checkpoint_storage("j").initialize_location_for_checkpoint(1), 1, 128
    )
    dispose(subtasks)
    operator = storage.load_checkpoint(pointer).operator("op")
    assert all(
        isinstance(h, KeyGroupsStateHandle) for st in operator.subtask_states.values() for h in st.managed_keyed_state
    )
    heap = create_subtasks(HashMapStateBackend(), KEYS, 1, 128, restore_from=operator)
    assert read_counts(heap) == {"a": 1, "b": 2}


@pytest.mark.requirement("RDB-3")
@pytest.mark.parametrize("parallelism", [1, 2])
def test_native_restore_with_a_registered_but_empty_state(tmp_path: Path, parallelism: int) -> None:
    """Regression (found by the model tier): the files hold every column family, empty ones included."""
    from statecert.spec.state import ListStateDescriptor

    storage = FileSystemCheckpointStorage(str(tmp_path / "c"))
    backend = EmbeddedRocksDBStateBackend(incremental=True, local_dir=str(tmp_path / "l"))
    subtasks = create_subtasks(backend, KEYS, 1, 128)
    subtasks[0].keyed.get_or_create_state(ListStateDescriptor("empty", element_serializer=LongSerializer()))
    put_counts(subtasks, {"a": 1})
    pointer = take_snapshot(
        subtasks, storage.create_checkpoint_storage("j").initialize_location_for_checkpoint(1), 1, 128
    )
    dispose(subtasks)
    restored = create_subtasks(
        backend, KEYS, parallelism, 128, restore_from=storage.load_checkpoint(pointer).operator("op")
    )
    assert read_counts(restored) == {"a": 1}
    dispose(restored)


def test_a_cut_sst_file_fails_its_restore_naming_the_checkpoint_file(tmp_path: Path) -> None:
    """RocksDB's complaint about a cut SST file names the working copy the restore downloaded (and deletes); the
    error names the checkpoint's file first, on one line (FMT-8)."""
    backend_factory = load_state_backend(
        None, {"state.backend.type": "rocksdb", "execution.checkpointing.incremental": "true"}
    )
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    with keyed_backend(backend_factory) as backend:
        state = backend.get_or_create_state(ValueStateDescriptor("v", serializer=LongSerializer()))
        for i in range(2_000):
            backend.set_current_key(f"k{i}")
            state.update(i)
        location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
        handle = backend.snapshot(1, 0, location).run()
    assert isinstance(handle, IncrementalKeyedStateHandle)
    name, sst = next((n, h) for n, h in sorted(handle.shared_state.items()) if n.endswith(".sst"))
    path = Path(fsspec.core.strip_protocol(sst.path))
    data = path.read_bytes()[: path.stat().st_size // 2]
    cut = tmp_path / "cut.sst"
    cut.write_bytes(data)
    damaged = dataclasses.replace(
        handle,
        shared_state={**handle.shared_state, name: FileStateHandle(cut.as_uri(), len(data), crc32c.crc32c(data))},
    )
    with pytest.raises(CheckpointCorruptedError) as raised:
        keyed_backend(backend_factory, restore=[damaged])
    message = str(raised.value)
    assert message.startswith(cut.as_uri()), f"expected the error to name {cut.as_uri()} first, got: {message}"
    assert "\n" not in message, f"expected one line, got: {message!r}"
