"""The record keys of a simulated job as dense ids, with what the tasks look up per key computed once per key:
the record key's name and split, its aggregate key, the counters' key, and the subtask each keyed shuffle sends
it to. Records travel as arrays of these ids (`RecordBatch`), so routing, grouping and checking a buffer are array
operations instead of a Python step per record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from statecert.reference.simulator.record import Record

Ids = npt.NDArray[np.int64]


class Keyspace:
    def __init__(
        self,
        aggregate_key: Callable[[Record], Any],
        counter_key: Callable[[Record], Any],
        first_owner: Callable[[Record], int],
        counter_owner: Callable[[Record], int],
    ) -> None:
        self._aggregate_key, self._counter_key = aggregate_key, counter_key
        self._first_owner, self._counter_owner = first_owner, counter_owner
        self.names: list[str] = []
        self.sources: list[int] = []
        self.aggregate_keys: list[Any] = []  # per id: the aggregate key (what the routers and the sink key by)
        self._ids: dict[tuple[str, int], int] = {}
        self._groups: dict[Any, int] = {}  # aggregate key -> its dense index
        self._counter_groups: dict[Any, int] = {}
        self.keys_by_index: dict[str, list[Any]] = {"aggregate_index": [], "counter_index": []}
        self._columns: dict[str, list[int]] = {
            "aggregate_index": [],
            "counter_index": [],
            "first_owner": [],
            "counter_owner": [],
        }
        self._arrays: dict[str, Ids] = {}

    def intern(self, name: str, source: int) -> int:
        """The id of record key `name` of split `source`, made on first sight."""
        known = self._ids.get((name, source))
        if known is not None:
            return known
        new = self._ids[(name, source)] = len(self.names)
        record = Record(name, source, 0)
        key, counter_key = self._aggregate_key(record), self._counter_key(record)
        self.names.append(name)
        self.sources.append(source)
        self.aggregate_keys.append(key)
        columns = self._columns
        for column, groups, group_key in (
            ("aggregate_index", self._groups, key),
            ("counter_index", self._counter_groups, counter_key),
        ):
            index = groups.get(group_key)
            if index is None:
                index = groups[group_key] = len(groups)
                self.keys_by_index[column].append(group_key)
            columns[column].append(index)
        columns["first_owner"].append(self._first_owner(record))
        columns["counter_owner"].append(self._counter_owner(record))
        self._arrays.clear()
        return new

    def ids_of(self, records: list[Record]) -> Ids:
        return np.array([self.intern(r.key, r.source) for r in records], dtype=np.int64)

    def column(self, name: str) -> Ids:
        """A per-id table as an array: `aggregate_index`, `counter_index` (dense indexes of the aggregate and the
        counters' keys), `first_owner`, `counter_owner` (the subtask of the first and the second keyed shuffle)."""
        array = self._arrays.get(name)
        if array is None:
            array = self._arrays[name] = np.array(self._columns[name], dtype=np.int64)
        return array
