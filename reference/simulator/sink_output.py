"""What the simulated exactly-once sink stages and commits: per processed buffer the columns (key ids, source
offsets, running totals) the counters produce, or the rows that fired windows produce. Kept as columns so that a
run of millions of records is checked with array operations (`checkers.check_output_columns`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from statecert.reference.simulator.keyspace import Ids, Keyspace


@dataclass(frozen=True, eq=False)
class OutputColumns:
    """A buffer's records as the counters emit them: record i of key id `ids[i]` at `offsets[i]`, its aggregate
    key's running total after it `totals[i]`."""

    ids: Ids
    offsets: Ids
    totals: Ids

    def rows(self, keyspace: Keyspace) -> list[tuple[Any, int, int]]:
        keys = keyspace.aggregate_keys
        return [
            (keys[i], o, t)
            for i, o, t in zip(self.ids.tolist(), self.offsets.tolist(), self.totals.tolist(), strict=True)
        ]


SinkPart = OutputColumns | list[tuple[Any, ...]]  # columns from counting, rows from fired windows


def output_rows(parts: Sequence[SinkPart], keyspace: Keyspace) -> list[tuple[Any, ...]]:
    """The committed output as rows, in commit order."""
    rows: list[tuple[Any, ...]] = []
    for part in parts:
        rows.extend(part.rows(keyspace) if isinstance(part, OutputColumns) else part)
    return rows


def output_columns(parts: Sequence[SinkPart], keyspace: Keyspace) -> tuple[Ids, Ids, Ids]:
    """The committed counting output as columns (aggregate key index, offset, total), in commit order."""
    columns = [part for part in parts if isinstance(part, OutputColumns)]
    if len(columns) != len(parts):
        raise ValueError("window output has no columns")
    if not columns:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    ids = np.concatenate([c.ids for c in columns])
    return (
        keyspace.column("aggregate_index")[ids],
        np.concatenate([c.offsets for c in columns]),
        np.concatenate([c.totals for c in columns]),
    )
