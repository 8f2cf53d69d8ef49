"""A correct backend on Python's own `sqlite3`, the embedded database a Python author reaches for first where a Java
author reaches for RocksDB: the suite must certify it too.

`in_sqlite` is a backend built on the authoring kit (`statecert.reference.authoring`, the dict example's route)
whose states live in one SQLite database per keyed backend, a table per state, in a directory of its own under
`local_dir` (KB-LOCAL-1). Where the reference backends isolate a snapshot by copy-on-write (heap) or a RocksDB
snapshot, this one opens a read transaction on a second connection in the synchronous part: SQLite's write-ahead
log keeps what that transaction sees fixed while the task thread goes on writing, and the asynchronous part reads
the key groups through it in another thread. Map entries come back ordered by their user keys' bytes, and keys by
their bytes; a list is a row per element.
"""

from __future__ import annotations

import itertools
import shutil
import sqlite3
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from statecert.reference.authoring import (
    AsyncSnapshotTask,
    CanonicalHeader,
    DefaultOperatorStateBackend,
    EntryKey,
    KeyedStateBackendBase,
    Payload,
    StateMetaInfo,
    WrittenStreams,
    write_canonical_snapshot,
)
from statecert.spec.backend import BackendCapabilities
from statecert.spec.handles import KeyedStateHandle
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, CheckpointOptions, KeyedBackendParameters
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.state import StateKind
from statecert.spec.storage import CheckpointStreamFactory

_COLUMNS = {StateKind.LIST: "pos INTEGER NOT NULL, ", StateKind.MAP: "uk BLOB NOT NULL, "}
_PRIMARY = {StateKind.LIST: ", pos", StateKind.MAP: ", uk"}  # beside (kg, k, ns): a row's key, and its order


def _rows(connection: sqlite3.Connection, table: str, kind: StateKind, key_group: int | None) -> Iterator[Any]:
    """A table's rows in key-group order (one key group's when `key_group` is given), each entry's rows together:
    list elements in their order, map entries by user key."""
    order = _PRIMARY.get(kind, "")
    where = "" if key_group is None else " WHERE kg = ?"
    query = f"SELECT kg, k, ns{order}, v FROM {table}{where} ORDER BY kg, k, ns{order}"
    return iter(connection.execute(query, () if key_group is None else (key_group,)))


def payloads(rows: Iterator[Any], kind: StateKind) -> Iterator[tuple[int, bytes, bytes, Payload]]:
    """(key group, key, namespace, canonical payload) of rows `_rows` gave."""
    for (kg, k, ns), group in itertools.groupby(rows, key=lambda row: (row[0], row[1], row[2])):
        if kind is StateKind.LIST:
            yield kg, k, ns, [row[4] for row in group]
        elif kind is StateKind.MAP:
            yield kg, k, ns, [[row[3], row[4]] for row in group]
        else:
            yield kg, k, ns, next(group)[3]


class SqliteStore:
    """One state in one table of the backend's database; implements the kit's `StateStore`."""

    def __init__(self, connection: sqlite3.Connection, table: str, meta: StateMetaInfo) -> None:
        self._db = connection
        self.table = table
        self.meta = meta
        kind = meta.kind
        connection.execute(
            f"CREATE TABLE {table} (kg INTEGER NOT NULL, k BLOB NOT NULL, ns BLOB NOT NULL, "
            f"{_COLUMNS.get(kind, '')}v BLOB NOT NULL, PRIMARY KEY (kg, k, ns{_PRIMARY.get(kind, '')}))"
        )

    def get(self, key_group: int, key: EntryKey) -> bytes | None:
        row = self._db.execute(f"SELECT v FROM {self.table} WHERE kg = ? AND k = ? AND ns = ?", (key_group, *key))
        found = row.fetchone()
        return None if found is None else bytes(found[0])

    def put(self, key_group: int, key: EntryKey, value: bytes) -> None:
        self._db.execute(f"INSERT OR REPLACE INTO {self.table} VALUES (?, ?, ?, ?)", (key_group, *key, value))

    def delete(self, key_group: int, key: EntryKey) -> None:
        self._db.execute(f"DELETE FROM {self.table} WHERE kg = ? AND k = ? AND ns = ?", (key_group, *key))

    def get_list(self, key_group: int, key: EntryKey) -> list[bytes] | None:
        rows = self._db.execute(
            f"SELECT v FROM {self.table} WHERE kg = ? AND k = ? AND ns = ? ORDER BY pos", (key_group, *key)
        ).fetchall()
        return [bytes(row[0]) for row in rows] or None

    def set_list(self, key_group: int, key: EntryKey, elements: list[bytes]) -> None:
        with self._db:
            self.delete(key_group, key)
            self._insert_elements(key_group, key, 0, elements)

    def append_list(self, key_group: int, key: EntryKey, elements: list[bytes]) -> None:
        row = self._db.execute(
            f"SELECT MAX(pos) FROM {self.table} WHERE kg = ? AND k = ? AND ns = ?", (key_group, *key)
        ).fetchone()
        with self._db:
            self._insert_elements(key_group, key, 0 if row[0] is None else row[0] + 1, elements)

    def _insert_elements(self, key_group: int, key: EntryKey, first: int, elements: list[bytes]) -> None:
        self._db.executemany(
            f"INSERT INTO {self.table} VALUES (?, ?, ?, ?, ?)",
            [(key_group, *key, first + i, element) for i, element in enumerate(elements)],
        )

    def map_get(self, key_group: int, key: EntryKey, user_key: bytes) -> bytes | None:
        row = self._db.execute(
            f"SELECT v FROM {self.table} WHERE kg = ? AND k = ? AND ns = ? AND uk = ?", (key_group, *key, user_key)
        ).fetchone()
        return None if row is None else bytes(row[0])

    def map_put(self, key_group: int, key: EntryKey, entries: Mapping[bytes, bytes]) -> None:
        with self._db:
            self._db.executemany(
                f"INSERT OR REPLACE INTO {self.table} VALUES (?, ?, ?, ?, ?)",
                [(key_group, *key, user_key, value) for user_key, value in entries.items()],
            )

    def map_remove(self, key_group: int, key: EntryKey, user_key: bytes) -> None:
        self._db.execute(
            f"DELETE FROM {self.table} WHERE kg = ? AND k = ? AND ns = ? AND uk = ?", (key_group, *key, user_key)
        )

    def map_items(self, key_group: int, key: EntryKey) -> list[tuple[bytes, bytes]]:
        rows = self._db.execute(
            f"SELECT uk, v FROM {self.table} WHERE kg = ? AND k = ? AND ns = ? ORDER BY uk", (key_group, *key)
        ).fetchall()
        return [(bytes(uk), bytes(v)) for uk, v in rows]

    def entries(self) -> Iterator[tuple[int, bytes, bytes, Payload]]:
        return payloads(_rows(self._db, self.table, self.meta.kind, None), self.meta.kind)

    def put_payload(self, key_group: int, key: EntryKey, payload: Payload) -> None:
        if self.meta.kind is StateKind.LIST:
            self.set_list(key_group, key, list(payload))
        elif self.meta.kind is StateKind.MAP:
            with self._db:
                self.delete(key_group, key)
                self.map_put(key_group, key, {user_key: value for user_key, value in payload})
        else:
            self.put(key_group, key, payload)

    def __len__(self) -> int:
        row = self._db.execute(f"SELECT COUNT(*) FROM (SELECT DISTINCT kg, k, ns FROM {self.table})").fetchone()
        return int(row[0])


def _connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode, usable from the snapshot's thread."""
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)


class SqliteKeyedStateBackend(KeyedStateBackendBase):
    backend_name = "sqlite"

    def __init__(self, params: KeyedBackendParameters[Any]) -> None:
        super().__init__(params)
        base = Path(params.local_dir or tempfile.gettempdir())
        self.instance_dir = base / f"statecert-sqlite-{params.job_id}-{params.operator_id}-{uuid.uuid4().hex}"
        self.instance_dir.mkdir(parents=True)
        self._path = self.instance_dir / "state.db"
        self._db: sqlite3.Connection | None = _connect(self._path)
        self._db.execute("PRAGMA journal_mode=WAL")  # readers keep their view while the task thread writes
        self._db.execute("PRAGMA synchronous=OFF")  # a working copy: checkpoints make state durable
        self._tables = itertools.count()
        self._readers: set[sqlite3.Connection] = set()
        self._readers_lock = threading.Lock()
        try:
            self.restore_handles(params.restore_state)
        except BaseException:
            self.dispose()  # KB-LOCAL-2: nothing of a failed creation stays under local_dir
            raise

    def create_store(self, meta: StateMetaInfo) -> SqliteStore:
        assert self._db is not None
        return SqliteStore(self._db, f"s{next(self._tables)}", meta)

    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: CheckpointStreamFactory,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> AsyncSnapshotTask[KeyedStateHandle]:
        """Synchronous part: a read transaction on a connection of the snapshot's own fixes what it holds;
        asynchronous part: the key groups read through it into the canonical stream."""
        self.check_open()
        stores = [store for _, store in sorted(self._stores.items()) if len(store)]
        if not stores:
            return self.snapshot_task(lambda cancelled: None)
        reader = _connect(self._path)
        reader.execute("BEGIN")
        reader.execute(f"SELECT 1 FROM {stores[0].table} LIMIT 1").fetchall()  # the first read fixes the view
        with self._readers_lock:
            self._readers.add(reader)
        header = CanonicalHeader(
            self.backend_name, self._key_serializer.snapshot_configuration(), tuple(s.meta for s in stores)
        )
        tables = [(store.table, store.meta.kind) for store in stores]

        def blocks(key_group: int) -> list[Any]:
            return [
                [index, key, ns, payload]
                for index, (table, kind) in enumerate(tables)
                for _, key, ns, payload in payloads(_rows(reader, table, kind, key_group), kind)
            ]

        streams = WrittenStreams(stream_factory)

        def write(cancelled: Callable[[], bool]) -> KeyedStateHandle | None:
            try:
                return write_canonical_snapshot(streams, header, self.key_group_range, blocks, cancelled)
            finally:
                self._release(reader)

        return self.snapshot_task(write, streams)

    def _release(self, reader: sqlite3.Connection) -> None:
        with self._readers_lock:
            if reader not in self._readers:
                return
            self._readers.discard(reader)
        reader.close()

    def release_resources(self) -> None:
        """Close the database, and the read connections of snapshots never run, and delete the instance's
        directory."""
        with self._readers_lock:
            readers, self._readers = list(self._readers), set()
        for reader in readers:
            reader.close()
        if self._db is not None:
            self._db.close()
            self._db = None
        shutil.rmtree(self.instance_dir, ignore_errors=True)


class SqliteStateBackend:
    """Keyed state in SQLite, operator state as the kit keeps it; no native format (savepoints are canonical)."""

    name = "sqlite"
    capabilities = BackendCapabilities(incremental_checkpoints=False, native_savepoint_format=None, timers=True)

    def create_keyed_state_backend(self, params: KeyedBackendParameters[Any]) -> SqliteKeyedStateBackend:
        return SqliteKeyedStateBackend(params)

    def create_operator_state_backend(self, params: OperatorBackendParameters) -> DefaultOperatorStateBackend:
        return DefaultOperatorStateBackend(params)


def in_sqlite(config: Mapping[str, object]) -> SqliteStateBackend:
    return SqliteStateBackend()
