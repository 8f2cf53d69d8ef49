"""Records as columns: key ids into the job's `Keyspace` and source offsets. Sources emit, buffers carry and keyed
tasks process records in batches; a batch yields `Record` tuples only where one record at a time is needed
(channel state, windows)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from statecert.reference.simulator.keyspace import Ids, Keyspace
from statecert.reference.simulator.record import Record


@dataclass(frozen=True, eq=False)
class RecordBatch:
    ids: Ids
    offsets: Ids
    keyspace: Keyspace

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[Record]:
        names, sources = self.keyspace.names, self.keyspace.sources
        for i, offset in zip(self.ids.tolist(), self.offsets.tolist(), strict=True):
            yield Record(names[i], sources[i], offset)

    def take(self, index: npt.NDArray[np.intp] | slice) -> RecordBatch:
        return RecordBatch(self.ids[index], self.offsets[index], self.keyspace)

    @staticmethod
    def concat(batches: Sequence[RecordBatch]) -> RecordBatch:
        if len(batches) == 1:
            return batches[0]
        return RecordBatch(
            np.concatenate([b.ids for b in batches]), np.concatenate([b.offsets for b in batches]), batches[0].keyspace
        )

    @staticmethod
    def of_records(records: Sequence[Record], keyspace: Keyspace) -> RecordBatch:
        offsets = np.array([r.offset for r in records], dtype=np.int64)
        return RecordBatch(keyspace.ids_of(list(records)), offsets, keyspace)
