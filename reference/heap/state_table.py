"""One state's entries, split by key group, with copy-on-write so snapshots stay isolated (KB-SNAP-3).

A snapshot's synchronous part only bumps `version` and keeps references to the current per-key-group dicts.
A later write to a key group whose dict predates the bump copies that dict first (shallow: stored values are
immutable bytes), and a later write to a list or map entry created before the bump copies that entry. So the
asynchronous part can read what it captured while the task keeps writing, without locks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from statecert.reference.format.state_meta import StateMetaInfo
from statecert.spec.keygroups import KeyGroupRange

C = TypeVar("C")
EntryKey = tuple[bytes, bytes]  # (key bytes, namespace bytes)


class Cell(Generic[C]):
    """A mutable list or map entry, stamped with the table version it was created in."""

    __slots__ = ("data", "version")

    def __init__(self, version: int, data: C) -> None:
        self.version = version
        self.data = data


class StateTable:
    """Entries of one state for the key groups of one backend."""

    def __init__(self, meta: StateMetaInfo, key_group_range: KeyGroupRange) -> None:
        self.meta = meta
        self._start = key_group_range.start
        self._maps: list[dict[EntryKey, Any]] = [{} for _ in key_group_range]
        self._map_versions = [0] * len(key_group_range)
        self.version = 0

    def read_map(self, key_group: int) -> dict[EntryKey, Any]:
        return self._maps[key_group - self._start]

    def write_map(self, key_group: int) -> dict[EntryKey, Any]:
        i = key_group - self._start
        if self._map_versions[i] != self.version:
            self._maps[i] = dict(self._maps[i])
            self._map_versions[i] = self.version
        return self._maps[i]

    def mutable_cell(
        self, entries: dict[EntryKey, Any], key: EntryKey, factory: Callable[[], C], copy: Callable[[C], C]
    ) -> C:
        """The container of a list/map entry, safe to mutate in place (copied if a snapshot may see it)."""
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

    def key_groups(self) -> Iterator[tuple[int, dict[EntryKey, Any]]]:
        for i, entries in enumerate(self._maps):
            yield self._start + i, entries

    def __len__(self) -> int:
        return sum(len(m) for m in self._maps)
