"""Timers of a RocksDB backend configured with `state.backend.rocksdb.timer-service.factory: HEAP` (RDB-12): they
live in a heap table, and the synchronous part of every snapshot writes them into their column family, so that
every snapshot kind (full, incremental, native, canonical) carries them as Flink's heap timers are carried:
snapshotted synchronously, restored with the keyed state."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.heap.state_table import StateTable
from statecert.reference.rocksdb.column_family_store import ColumnFamilyStore
from statecert.reference.state_store import EntryKey, Payload
from statecert.spec.keygroups import KeyGroupRange

TIMER_STATE_PREFIX = "_timer_state/"


class HeapTimerStore:
    """A timer state on the heap, mirrored into `column_family` only by `write_through` (a snapshot's synchronous
    part); opened over restored RocksDB files, it starts with what the column family holds."""

    def __init__(self, column_family: ColumnFamilyStore, key_group_range: KeyGroupRange) -> None:
        self._column_family = column_family
        self._table = StateTable(column_family.meta, key_group_range)
        for key_group, key, namespace, payload in column_family.entries():
            self._table.put_payload(key_group, (key, namespace), payload)

    @property
    def meta(self) -> StateMetaInfo:
        return self._table.meta

    @meta.setter
    def meta(self, meta: StateMetaInfo) -> None:
        self._table.meta = self._column_family.meta = meta

    def write_through(self) -> None:
        """Replace the column family's content with the heap's: called before RocksDB checkpoints the database."""
        self._column_family.clear()
        for key_group, key, namespace, payload in self._table.entries():
            self._column_family.put_payload(key_group, (key, namespace), payload)

    # -- StateStore, on the heap -----------------------------------------------------------------------------------
    def get(self, key_group: int, key: EntryKey) -> bytes | None:
        return self._table.get(key_group, key)

    def put(self, key_group: int, key: EntryKey, value: bytes) -> None:
        self._table.put(key_group, key, value)

    def delete(self, key_group: int, key: EntryKey) -> None:
        self._table.delete(key_group, key)

    def get_list(self, key_group: int, key: EntryKey) -> list[bytes] | None:
        return self._table.get_list(key_group, key)

    def set_list(self, key_group: int, key: EntryKey, elements: list[bytes]) -> None:
        self._table.set_list(key_group, key, elements)

    def append_list(self, key_group: int, key: EntryKey, elements: list[bytes]) -> None:
        self._table.append_list(key_group, key, elements)

    def map_get(self, key_group: int, key: EntryKey, user_key: bytes) -> bytes | None:
        return self._table.map_get(key_group, key, user_key)

    def map_put(self, key_group: int, key: EntryKey, entries: Mapping[bytes, bytes]) -> None:
        self._table.map_put(key_group, key, entries)

    def map_remove(self, key_group: int, key: EntryKey, user_key: bytes) -> None:
        self._table.map_remove(key_group, key, user_key)

    def map_items(self, key_group: int, key: EntryKey) -> list[tuple[bytes, bytes]]:
        return self._table.map_items(key_group, key)

    def entries(self) -> Iterator[tuple[int, bytes, bytes, Payload]]:
        return self._table.entries()

    def put_payload(self, key_group: int, key: EntryKey, payload: Payload) -> None:
        self._table.put_payload(key_group, key, payload)

    def __len__(self) -> int:
        return len(self._table)

    def is_empty(self) -> bool:
        return len(self._table) == 0

    def compact(self) -> None:
        self._column_family.compact()
