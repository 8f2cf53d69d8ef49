"""One state's entries on the heap, split by key group, with copy-on-write so snapshots stay isolated (KB-SNAP-3).

A snapshot's synchronous part only bumps `version` and keeps references to the current per-key-group dicts.
A later write to a key group whose dict predates the bump copies that dict first (shallow: stored values are
immutable bytes), and a later write to a list or map entry created before the bump copies that entry. So the
asynchronous part can read what it captured while the task keeps writing, without locks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.state_store import EntryKey, Payload
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.state import StateKind

C = TypeVar("C")


class Cell(Generic[C]):
    """A mutable list or map entry, stamped with the table version it was created in."""

    __slots__ = ("data", "version")

    def __init__(self, version: int, data: C) -> None:
        self.version = version
        self.data = data


def to_payload(stored: Any) -> Payload:
    """Stored form -> canonical payload."""
    if isinstance(stored, Cell):
        data = stored.data
        return [[k, v] for k, v in data.items()] if isinstance(data, dict) else list(data)
    return stored


class StateTable:
    """Entries of one state for the key groups of one heap backend; implements StateStore."""

    def __init__(self, meta: StateMetaInfo, key_group_range: KeyGroupRange) -> None:
        self.meta = meta
        self._start = key_group_range.start
        self._maps: list[dict[EntryKey, Any]] = [{} for _ in key_group_range]
        self._map_versions = [0] * len(key_group_range)
        self.version = 0

    # -- copy-on-write plumbing ------------------------------------------------------------------------------------
    def _read(self, key_group: int) -> dict[EntryKey, Any]:
        return self._maps[key_group - self._start]

    def _write(self, key_group: int) -> dict[EntryKey, Any]:
        i = key_group - self._start
        if self._map_versions[i] != self.version:
            self._maps[i] = dict(self._maps[i])
            self._map_versions[i] = self.version
        return self._maps[i]

    def _cell(self, key_group: int, key: EntryKey, factory: Callable[[], C], copy: Callable[[C], C]) -> C:
        """The container of a list/map entry, safe to mutate in place (copied if a snapshot may see it)."""
        entries = self._write(key_group)
        cell = entries.get(key)
        if cell is None:
            cell = entries[key] = Cell(self.version, factory())
        elif cell.version != self.version:
            cell = entries[key] = Cell(self.version, copy(cell.data))
        return cell.data  # type: ignore[no-any-return]

    def capture(self) -> list[dict[EntryKey, Any]]:
        """The synchronous part of a snapshot: O(key groups), no copying (KB-SNAP-2)."""
        captured = list(self._maps)
        self.version += 1
        return captured

    # -- StateStore ------------------------------------------------------------------------------------------------
    def get(self, key_group: int, key: EntryKey) -> bytes | None:
        return self._maps[key_group - self._start].get(key)  # `_read` inlined: on every state read's path

    def put(self, key_group: int, key: EntryKey, value: bytes) -> None:
        i = key_group - self._start  # `_write` inlined: on every state write's path
        if self._map_versions[i] != self.version:
            self._maps[i] = dict(self._maps[i])
            self._map_versions[i] = self.version
        self._maps[i][key] = value

    def delete(self, key_group: int, key: EntryKey) -> None:
        if key in self._read(key_group):
            del self._write(key_group)[key]

    def get_list(self, key_group: int, key: EntryKey) -> list[bytes] | None:
        cell = self._read(key_group).get(key)
        return None if cell is None else list(cell.data)

    def set_list(self, key_group: int, key: EntryKey, elements: list[bytes]) -> None:
        if elements:
            self._write(key_group)[key] = Cell(self.version, list(elements))
        else:
            self.delete(key_group, key)

    def append_list(self, key_group: int, key: EntryKey, elements: list[bytes]) -> None:
        cell: list[bytes] = self._cell(key_group, key, list, list)
        cell.extend(elements)

    def map_get(self, key_group: int, key: EntryKey, user_key: bytes) -> bytes | None:
        cell = self._read(key_group).get(key)
        return None if cell is None else cell.data.get(user_key)

    def map_put(self, key_group: int, key: EntryKey, entries: Mapping[bytes, bytes]) -> None:
        cell: dict[bytes, bytes] = self._cell(key_group, key, dict, dict)
        cell.update(entries)

    def map_remove(self, key_group: int, key: EntryKey, user_key: bytes) -> None:
        cell = self._read(key_group).get(key)
        if cell is None or user_key not in cell.data:
            return
        if len(cell.data) == 1:
            del self._write(key_group)[key]
        else:
            data: dict[bytes, bytes] = self._cell(key_group, key, dict, dict)
            del data[user_key]

    def map_items(self, key_group: int, key: EntryKey) -> list[tuple[bytes, bytes]]:
        cell = self._read(key_group).get(key)
        return [] if cell is None else list(cell.data.items())

    def entries(self) -> Iterator[tuple[int, bytes, bytes, Payload]]:
        for i, entries in enumerate(self._maps):
            for (key, ns), stored in list(entries.items()):
                yield self._start + i, key, ns, to_payload(stored)

    def put_payload(self, key_group: int, key: EntryKey, payload: Payload) -> None:
        if self.meta.kind is StateKind.LIST:
            self._write(key_group)[key] = Cell(self.version, list(payload))
        elif self.meta.kind is StateKind.MAP:
            self._write(key_group)[key] = Cell(self.version, {k: v for k, v in payload})
        else:
            self._write(key_group)[key] = payload

    def __len__(self) -> int:
        return sum(len(m) for m in self._maps)
