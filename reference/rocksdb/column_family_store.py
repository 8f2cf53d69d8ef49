"""A StateStore over one RocksDB column family (RDB-1). Lists are one msgpack array per entry; map entries are
one RocksDB key per user key, so a map is the range of its composite-key prefix."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import msgpack
import rocksdict

from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.rocksdb.key_layout import composite_key, key_group_prefix, prefix_end, split_composite_key
from statecert.reference.state_store import EntryKey, Payload
from statecert.spec.errors import CheckpointCorruptedError, StateSizeLimitError
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.state import StateKind

MAX_VALUE_BYTES = 2**31 - 1  # RocksDB's (JNI's, in Flink) limit on one value (RDB-5)


def check_iterator(it: Any, where: str) -> None:
    """An iterator that stops early because of a corrupt block reports it only through `status()`; without this
    check a flipped bit silently truncates iteration (RDB-7)."""
    try:
        it.status()
    except Exception as exc:  # rocksdict raises a bare Exception("Corruption: ...")
        raise CheckpointCorruptedError(
            where, f"RocksDB iteration stopped early: {' '.join(str(exc).split())}"
        ) from None


class ColumnFamilyStore:
    """One state's entries in a column family of the backend's database."""

    def __init__(
        self,
        db: rocksdict.Rdict,
        column_family: rocksdict.Rdict,
        handle: Any,
        meta: StateMetaInfo,
        max_value_bytes: int = MAX_VALUE_BYTES,
    ) -> None:
        self._db = db
        self._cf = column_family
        self._handle = handle
        self.meta = meta
        self._max = max_value_bytes

    def release(self) -> None:
        """Drop this store's references to the database: a column family `Rdict` or handle someone still holds (a
        state object the user kept) would keep RocksDB open, and its background work writing, after the backend
        closed it and deleted its directory (RDB-4)."""
        del self._cf, self._handle, self._db

    def _check(self, value: bytes) -> bytes:
        if len(value) > self._max:
            raise StateSizeLimitError(
                f"state {self.meta.name!r}: a value of {len(value)} bytes exceeds the RocksDB backend's limit of "
                f"{self._max} bytes per value"
            )
        return value

    def _range(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        it = self._cf.iter()
        it.seek(prefix)
        while it.valid():
            raw = it.key()
            if not raw.startswith(prefix):
                break
            yield raw, it.value()
            it.next()
        check_iterator(it, f"RocksDB column family of state {self.meta.name!r}")

    def _delete_prefix(self, prefix: bytes) -> None:
        self._cf.delete_range(prefix, prefix_end(prefix))

    # -- StateStore ------------------------------------------------------------------------------------------------
    def _read(self, raw: bytes) -> bytes | None:
        """A point lookup; RocksDB's bare Exception on a corrupt block becomes CheckpointCorruptedError (RDB-7)."""
        try:
            return self._cf.get(raw)
        except Exception as exc:
            raise CheckpointCorruptedError(f"RocksDB column family of state {self.meta.name!r}", str(exc)) from None

    def get(self, key_group: int, key: EntryKey) -> bytes | None:
        return self._read(composite_key(key_group, *key))

    def put(self, key_group: int, key: EntryKey, value: bytes) -> None:
        self._cf[composite_key(key_group, *key)] = self._check(value)

    def delete(self, key_group: int, key: EntryKey) -> None:
        raw = composite_key(key_group, *key)
        if self.meta.kind is StateKind.MAP:
            self._delete_prefix(raw)
        else:
            del self._cf[raw]

    def get_list(self, key_group: int, key: EntryKey) -> list[bytes] | None:
        stored = self._read(composite_key(key_group, *key))
        return None if stored is None else list(msgpack.unpackb(stored))

    def set_list(self, key_group: int, key: EntryKey, elements: list[bytes]) -> None:
        raw = composite_key(key_group, *key)
        if elements:
            self._cf[raw] = self._check(msgpack.packb(elements, use_bin_type=True))
        else:
            del self._cf[raw]

    def append_list(self, key_group: int, key: EntryKey, elements: list[bytes]) -> None:
        self.set_list(key_group, key, (self.get_list(key_group, key) or []) + elements)

    def map_get(self, key_group: int, key: EntryKey, user_key: bytes) -> bytes | None:
        return self._read(composite_key(key_group, *key) + user_key)

    def map_put(self, key_group: int, key: EntryKey, entries: Mapping[bytes, bytes]) -> None:
        prefix = composite_key(key_group, *key)
        batch = rocksdict.WriteBatch(raw_mode=True)
        for user_key, value in entries.items():
            batch.put(prefix + user_key, self._check(value), self._handle)
        self._db.write(batch)

    def map_remove(self, key_group: int, key: EntryKey, user_key: bytes) -> None:
        del self._cf[composite_key(key_group, *key) + user_key]

    def map_items(self, key_group: int, key: EntryKey) -> list[tuple[bytes, bytes]]:
        prefix = composite_key(key_group, *key)
        return [(raw[len(prefix) :], value) for raw, value in self._range(prefix)]

    def entries(self) -> Iterator[tuple[int, bytes, bytes, Payload]]:
        return iterate_entries(self._cf, self.meta.kind, where=f"RocksDB column family of state {self.meta.name!r}")

    def put_payload(self, key_group: int, key: EntryKey, payload: Payload) -> None:
        if self.meta.kind is StateKind.MAP:
            self._delete_prefix(composite_key(key_group, *key))
            self.map_put(key_group, key, dict((k, v) for k, v in payload))
        elif self.meta.kind is StateKind.LIST:
            self.set_list(key_group, key, list(payload))
        else:
            self.put(key_group, key, payload)

    def __len__(self) -> int:
        return sum(1 for _ in self.entries())

    def compact(self) -> None:
        self._cf.compact_range(None, None)

    def clear(self) -> None:
        """Delete every entry (one write batch)."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        for raw, _ in self._range(b""):
            batch.delete(raw, self._handle)
        self._db.write(batch)

    def is_empty(self) -> bool:
        it = self._cf.iter()
        it.seek_to_first()
        empty = not it.valid()
        if empty:
            check_iterator(it, f"RocksDB column family of state {self.meta.name!r}")
        return empty


def iterate_entries(
    column_family: Any,
    kind: StateKind,
    start: bytes | None = None,
    end: bytes | None = None,
    where: str = "RocksDB column family",
) -> Iterator[tuple[int, bytes, bytes, Payload]]:
    """Entries of a column family in key order, from `start` up to (excluding) `end`, as canonical payloads; a
    corrupt block raises CheckpointCorruptedError naming `where` (RDB-7)."""
    it = column_family.iter()
    if start is None:
        it.seek_to_first()
    else:
        it.seek(start)
    current: tuple[int, bytes, bytes] | None = None
    pairs: list[list[bytes]] = []
    while it.valid():
        raw = it.key()
        if end is not None and raw >= end:
            break
        try:
            key_group, key, ns, user_key = split_composite_key(raw)
            if kind is not StateKind.MAP and user_key:
                raise ValueError("trailing bytes after the namespace of a non-map entry")
            value = it.value()
            if kind is StateKind.LIST:
                elements = msgpack.unpackb(value, raw=False)
                if not isinstance(elements, list) or not elements or not all(isinstance(e, bytes) for e in elements):
                    raise ValueError("a list entry is not a non-empty array of byte strings")
        except (ValueError, TypeError, RecursionError, msgpack.UnpackException) as exc:
            raise CheckpointCorruptedError(where, f"malformed RocksDB entry {raw[:32]!r}: {exc!r}") from None
        if kind is StateKind.MAP:
            if current != (key_group, key, ns):
                if current is not None:
                    yield (*current, pairs)
                current, pairs = (key_group, key, ns), []
            pairs.append([user_key, value])
        elif kind is StateKind.LIST:
            yield key_group, key, ns, elements
        else:
            yield key_group, key, ns, value
        it.next()
    check_iterator(it, where)
    if current is not None:
        yield (*current, pairs)


class KeyGroupCursor:
    """One forward scan of a column family over a key-group range, handing out the entries of one key group at a
    time in increasing key-group order: a snapshot written key group by key group opens one RocksDB iterator per
    state, not one per state and key group."""

    def __init__(self, column_family: Any, kind: StateKind, key_groups: KeyGroupRange, where: str) -> None:
        start, end = key_group_prefix(key_groups.start), key_group_prefix(key_groups.end + 1)
        self._entries = iterate_entries(column_family, kind, start, end, where)
        self._next: tuple[int, bytes, bytes, Payload] | None = next(self._entries, None)
        self._key_group = key_groups.start

    def take(self, key_group: int) -> Iterator[tuple[bytes, bytes, Payload]]:
        """The (key, namespace, payload) entries of `key_group`, which is not below the last one asked for."""
        if key_group < self._key_group:
            raise ValueError(f"key group {key_group} asked for after key group {self._key_group}")
        self._key_group = key_group
        while self._next is not None and self._next[0] <= key_group:
            entry = self._next
            self._next = next(self._entries, None)
            if entry[0] == key_group:
                yield entry[1], entry[2], entry[3]
