"""The RocksDB keyed state backend (chapter RDB): state in column families of a local RocksDB, snapshots taken
from a RocksDB checkpoint (hard links: the synchronous part), written as canonical key groups or as the native
files, incrementally when enabled."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgpack
import rocksdict

from statecert.reference.format.canonical import CanonicalHeader, Entry, describe, write_canonical_snapshot
from statecert.reference.format.entry_check import EntryValidator
from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.keyed_backend_base import KeyedStateBackendBase
from statecert.reference.migration import check_key_serializer, check_registered_serializers
from statecert.reference.rocksdb.column_family_store import (
    MAX_VALUE_BYTES,
    ColumnFamilyStore,
    KeyGroupCursor,
    iterate_entries,
)
from statecert.reference.rocksdb.files import upload_file
from statecert.reference.rocksdb.heap_timer_store import TIMER_STATE_PREFIX, HeapTimerStore
from statecert.reference.rocksdb.key_layout import key_group_prefix
from statecert.reference.rocksdb.native_restore import (
    column_family_name,
    open_native_files,
    open_read_only,
    read_native_meta,
)
from statecert.reference.rocksdb.settings import RocksDBSettings
from statecert.reference.rocksdb.shared_memory import SlotMemory
from statecert.reference.snapshot_task import AsyncSnapshotTask
from statecert.reference.storage.written_streams import WrittenStreams
from statecert.spec.errors import CheckpointFormatError
from statecert.spec.handles import (
    ROCKSDB_NATIVE_FORMAT,
    IncrementalKeyedStateHandle,
    KeyedStateHandle,
    StreamStateHandle,
)
from statecert.spec.keyed_backend import (
    DEFAULT_CHECKPOINT_OPTIONS,
    CheckpointOptions,
    KeyedBackendParameters,
    SnapshotType,
)
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.serializers import SerializerSnapshot
from statecert.spec.storage import CheckpointedStateScope, CheckpointStreamFactory

SST_SUFFIX = ".sst"


class RocksDBKeyedStateBackend(KeyedStateBackendBase):
    backend_name = "rocksdb"

    def __init__(
        self,
        params: KeyedBackendParameters[Any],
        settings: RocksDBSettings,
        max_value_bytes: int = MAX_VALUE_BYTES,
        slot: SlotMemory | None = None,
    ) -> None:
        super().__init__(params)
        self._settings = settings
        self._max_value_bytes = max_value_bytes
        self._backend_id = uuid.uuid4().hex
        base = Path(params.local_dir or settings.local_dir or tempfile.gettempdir())
        self.instance_dir = base / self._instance_dir_name(params)
        self._db_dir = self.instance_dir / "db"
        self._snapshot_dir = self.instance_dir / "snapshots"
        self._options = settings.options(slot)
        self._uploaded: dict[int, dict[str, StreamStateHandle]] = {}
        self._base_uploads: dict[str, StreamStateHandle] = {}
        self._fast_path = self._fast_path_handle(params.restore_state)
        self._db: rocksdict.Rdict | None = None
        self._column_families: list[ColumnFamilyStore] = []  # every store opened on `_db`, released with it
        self._column_family_names: set[str] = set()  # the column families `_db` holds
        try:
            if self._fast_path is not None:
                self._open_from_files(self._fast_path)
            self.restore_handles(params.restore_state)
        except BaseException:
            self.dispose()
            raise

    def _instance_dir_name(self, params: KeyedBackendParameters[Any]) -> str:
        """Like Flink's `job_<id>_op_<id>_uuid_<random>`: every instance starts in a directory of its own, named
        with a fresh UUID, so what an earlier instance left behind (a crash, a failed restore) is never opened again,
        not even by a restarted process (RDB-4, KB-LOCAL-3)."""
        rng = params.key_group_range
        return f"statecert-rocksdb-{params.job_id}-{params.operator_id}-{rng.start}-{rng.end}-{self._backend_id}"

    # -- stores ----------------------------------------------------------------------------------------------------
    def create_store(self, meta: StateMetaInfo) -> ColumnFamilyStore | HeapTimerStore:
        name = column_family_name(meta.name)
        db = self._database([name])
        if name in self._column_family_names:
            cf = db.get_column_family(name)
        else:
            cf = db.create_column_family(name, self._options)
            self._column_family_names.add(name)
        handle = db.get_column_family_handle(name)
        store = ColumnFamilyStore(db, cf, handle, meta, self._max_value_bytes)
        self._column_families.append(store)
        if self._settings.timer_service_factory == "HEAP" and meta.name.startswith(TIMER_STATE_PREFIX):
            return HeapTimerStore(store, self.key_group_range)
        return store

    def prepare_stores(self, metas: Sequence[StateMetaInfo]) -> None:
        """A database not created yet is created with the column families of `metas` in one open: RocksDB rewrites
        and rereads its OPTIONS file, which describes every column family, at each one it creates on a live database,
        so creating them one by one costs time quadratic in their number (a restore of 258 states: seconds instead of
        milliseconds). A database that exists already (a second handle's states) creates them as they come."""
        self._database([column_family_name(m.name) for m in metas])

    def _database(self, column_families: Sequence[str] = ()) -> rocksdict.Rdict:
        """The database, created at its first use together with `column_families`: a new database and its first
        column family in one OPTIONS file instead of two."""
        if self._db is None:
            families = dict.fromkeys(column_families, self._options)
            self._db = rocksdict.Rdict(str(self._db_dir), self._options, column_families=families)
            self._column_family_names = set(families)
        return self._db

    # -- restore ---------------------------------------------------------------------------------------------------
    def _fast_path_handle(self, handles: Sequence[Any]) -> IncrementalKeyedStateHandle | None:
        """One native handle of exactly this range: use its files as they are (RDB-3)."""
        if len(handles) == 1 and isinstance(handles[0], IncrementalKeyedStateHandle):
            handle = handles[0]
            if handle.snapshot_format == ROCKSDB_NATIVE_FORMAT and handle.key_group_range == self.key_group_range:
                return handle
        return None

    def _open_from_files(self, handle: IncrementalKeyedStateHandle) -> None:
        key_serializer, metas = read_native_meta(handle)
        self._key_serializer = check_key_serializer(self._key_serializer, key_serializer)
        self._db = open_native_files(handle, self._db_dir, self._options)
        self._column_family_names = set(rocksdict.Rdict.list_cf(str(self._db_dir), self._options))
        column_families = self._column_family_names - {"default"}
        if not {column_family_name(m.name) for m in metas} <= column_families:
            raise CheckpointFormatError(
                describe(handle.meta_state), "the state meta data names a state the RocksDB files do not hold"
            )
        for meta in metas:
            check_registered_serializers(meta, describe(handle.meta_state))
            self._stores[meta.name] = self.create_store(meta)
        self._base_uploads = dict(handle.shared_state)  # the restored files are already in storage

    def restore_foreign_handles(self, handles: Sequence[Any]) -> None:
        """Native handles of other ranges: open each, copy the key groups of this range (RDB-3, KB-RESTORE-2)."""
        for handle in handles:
            if handle is self._fast_path:
                continue
            if not isinstance(handle, IncrementalKeyedStateHandle) or handle.snapshot_format != ROCKSDB_NATIVE_FORMAT:
                super().restore_foreign_handles([handle])
                continue
            common = handle.key_group_range.intersection(self.key_group_range)
            if common.is_empty:
                continue
            key_serializer, metas = read_native_meta(handle)
            self._key_serializer = check_key_serializer(self._key_serializer, key_serializer)
            temp = self.instance_dir / f"restore-{uuid.uuid4().hex}"
            families = [column_family_name(m.name) for m in metas]
            source = open_native_files(handle, temp, self._options, read_only=families)
            name = describe(handle.meta_state)
            try:
                validator = EntryValidator(metas, self._key_serializer, self._params.max_parallelism, name)
                for meta in metas:
                    self._check_restored_meta(meta, name)
                self.prepare_stores([m for m in metas if m.name not in self._stores])  # as a canonical restore does
                for meta in metas:
                    target = self._restored_store(meta, name)
                    try:
                        column_family = source.get_column_family(column_family_name(meta.name))
                    except Exception as exc:  # rocksdict: bare Exception for a missing column family
                        raise CheckpointFormatError(name, f"state {meta.name!r} has no column family: {exc}") from None
                    copy_key_groups(column_family, target, common, validator, metas.index(meta))
            finally:
                source.cancel_all_background(True)  # nothing writes into `temp` as it is deleted
                del source
                shutil.rmtree(temp, ignore_errors=True)

    # -- snapshots -------------------------------------------------------------------------------------------------
    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: CheckpointStreamFactory,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> AsyncSnapshotTask[KeyedStateHandle]:
        """Synchronous part: a RocksDB checkpoint (flush, then hard links) of the live database (KB-SNAP-2)."""
        self.check_open()
        for store in self._stores.values():
            if isinstance(store, HeapTimerStore):
                store.write_through()  # heap timers are snapshotted synchronously (RDB-12)
        names = sorted(n for n, s in self._stores.items() if not s.is_empty())
        if not names:
            return self.track_snapshot(AsyncSnapshotTask(lambda cancelled: None, self._pending.discard))
        local = self._snapshot_dir / f"chk-{checkpoint_id}-{uuid.uuid4().hex}"
        self._snapshot_dir.mkdir(parents=True, exist_ok=True)
        rocksdict.Checkpoint(self._database()).create_checkpoint(str(local))
        metas = [self._stores[n].meta for n in names]
        key_serializer = self._key_serializer.snapshot_configuration()
        canonical = options.snapshot_type is SnapshotType.SAVEPOINT_CANONICAL or (
            options.snapshot_type is SnapshotType.CHECKPOINT and not self._settings.incremental
        )
        streams = WrittenStreams(stream_factory)
        if canonical:
            write = self._canonical_writer(local, metas, key_serializer, streams)
        else:
            incremental = options.snapshot_type is SnapshotType.CHECKPOINT
            # A full checkpoint (KB-SNAP-10) uploads every file; later ones may build on it once it completes.
            base = dict(self._base_uploads) if incremental and not options.full else {}
            write = self._native_writer(checkpoint_id, local, metas, key_serializer, streams, base, incremental)
        return self.track_snapshot(AsyncSnapshotTask(write, self._pending.discard, streams.discard))

    def _canonical_writer(
        self,
        local: Path,
        metas: list[StateMetaInfo],
        key_serializer: SerializerSnapshot,
        factory: CheckpointStreamFactory,
    ) -> Callable[[Callable[[], bool]], KeyedStateHandle | None]:
        header = CanonicalHeader(self.backend_name, key_serializer, tuple(metas))
        key_group_range = self.key_group_range

        def write(cancelled: Callable[[], bool]) -> KeyedStateHandle | None:
            try:
                db = open_read_only(local, self._options, [column_family_name(m.name) for m in metas])
                try:
                    cfs = [db.get_column_family(column_family_name(m.name)) for m in metas]
                    cursors = [
                        KeyGroupCursor(cf, meta.kind, key_group_range, f"RocksDB checkpoint of state {meta.name!r}")
                        for cf, meta in zip(cfs, metas, strict=True)
                    ]

                    def blocks(key_group: int) -> list[Entry]:
                        return [
                            [index, key, ns, payload]
                            for index, cursor in enumerate(cursors)
                            for key, ns, payload in cursor.take(key_group)
                        ]

                    handle = write_canonical_snapshot(factory, header, key_group_range, blocks, cancelled)
                    cursors.clear()  # drop the iterators and column family handles before closing the database
                    cfs.clear()
                finally:
                    db.close()
                    del db
                return handle
            finally:
                shutil.rmtree(local, ignore_errors=True)

        return write

    def _native_writer(
        self,
        checkpoint_id: int,
        local: Path,
        metas: list[StateMetaInfo],
        key_serializer: SerializerSnapshot,
        factory: CheckpointStreamFactory,
        base: dict[str, StreamStateHandle],
        incremental: bool,
    ) -> Callable[[Callable[[], bool]], KeyedStateHandle | None]:
        """Upload SST files not in `base` to the shared scope, the rest of the files to the exclusive scope (RDB-2)."""

        def write(cancelled: Callable[[], bool]) -> KeyedStateHandle | None:
            shared: dict[str, StreamStateHandle] = {}
            private: dict[str, StreamStateHandle] = {}
            try:
                for path in sorted(local.iterdir()):
                    if path.suffix == SST_SUFFIX:
                        reused = base.get(path.name)
                        shared[path.name] = reused or upload_file(
                            path, factory, CheckpointedStateScope.SHARED, cancelled
                        )
                    else:
                        private[path.name] = upload_file(path, factory, CheckpointedStateScope.EXCLUSIVE, cancelled)
                plain = {"key_serializer": key_serializer.to_plain(), "states": [m.to_plain() for m in metas]}
                with factory.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
                    out.write(msgpack.packb(plain, use_bin_type=True))
                    meta_handle = out.close_and_get_handle()
                assert meta_handle is not None
                if incremental:
                    self._uploaded[checkpoint_id] = shared
                return IncrementalKeyedStateHandle(
                    self._backend_id, self.key_group_range, checkpoint_id, shared, private, meta_handle
                )
            finally:  # a failed or cancelled part's uploads are deleted by its task (WrittenStreams, KB-SNAP-6)
                shutil.rmtree(local, ignore_errors=True)

        return write

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """The completed checkpoint's files become the base of the next incremental one (RDB-2)."""
        if checkpoint_id in self._uploaded:
            self._base_uploads = self._uploaded[checkpoint_id]
        for done in [c for c in self._uploaded if c <= checkpoint_id]:
            del self._uploaded[done]

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """An aborted checkpoint's uploads are never a base (RDB-2)."""
        self._uploaded.pop(checkpoint_id, None)

    def compact(self) -> None:
        """Run a full manual compaction of every column family (rewrites SST files; state is unchanged)."""
        self.check_open()
        for store in self._stores.values():
            store.compact()

    def native_metrics(self) -> dict[str, int]:
        """The enabled native metrics (`state.backend.rocksdb.metrics.*`), each summed over the default and every
        state's column family, as Flink reports them per column family (RDB-11)."""
        self.check_open()
        db = self._database()
        families = [db, *(db.get_column_family(column_family_name(n)) for n in self._stores)]
        metrics = {}
        for name in sorted(self._settings.metrics):
            values = [family.property_int_value(f"rocksdb.{name}") for family in families]
            total = sum(v for v in values if v is not None)
            # cache properties describe the one shared cache, not a column family each
            metrics[name] = max((v for v in values if v is not None), default=0) if "block-cache" in name else total
        return metrics

    @property
    def options_file(self) -> Path | None:
        """The newest OPTIONS file RocksDB wrote for this instance's database: what RocksDB was opened with."""
        files = sorted(self._db_dir.glob("OPTIONS-*"))
        return files[-1] if files else None

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def release_resources(self) -> None:
        """Close the database and delete every local directory of this instance (RDB-4): background compactions and
        flushes are stopped first, and every column family reference dropped, so that nothing writes into the
        directory as it is deleted (rocksdict's `close()` alone leaves RocksDB open while any is held)."""
        if self._db is not None:
            for store in self._column_families:
                store.release()
            self._column_families.clear()
            db, self._db = self._db, None
            db.cancel_all_background(True)  # no flush either: the files are deleted next
            del db  # the last reference: RocksDB closes
        shutil.rmtree(self.instance_dir, ignore_errors=True)


def copy_key_groups(
    source: Any, target: ColumnFamilyStore, key_groups: KeyGroupRange, validator: EntryValidator, index: int
) -> None:
    """Copy the raw entries of `key_groups` from a source column family (the key layout keeps them contiguous),
    each validated like a canonical entry (FMT-8)."""
    for key_group, key, ns, payload in iterate_entries(
        source,
        target.meta.kind,
        key_group_prefix(key_groups.start),
        key_group_prefix(key_groups.end + 1),
        where=f"restored RocksDB files of state {target.meta.name!r}",
    ):
        validator.check(key_group, index, key, ns, payload)
        target.put_payload(key_group, (key, ns), payload)
