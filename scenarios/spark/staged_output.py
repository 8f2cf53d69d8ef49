"""A keyed subtask's sink output of one epoch, in columns, staged until its checkpoint completes (SCN-6).

Each output row is (key, position, total): the record's key, its offset (or a window's start) and the key's
running total after it (or the window's sum). An epoch's output crosses from the Python worker to the driver as
three arrays and its distinct keys, a few copies per epoch where one pickled tuple per record cost a pickle in
the worker and an unpickle in the driver; the driver makes the rows only when the output is checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Row = tuple[Any, int, int]


def keys_at(distinct: list[Any], index: npt.NDArray[np.intp]) -> list[Any]:
    """`distinct[i]` for each i of `index`: the very key objects, none converted (an object array gathers them)."""
    keys = np.empty(len(distinct), dtype=object)
    keys[:] = distinct
    return list(keys[index].tolist())


@dataclass(frozen=True)
class StagedOutput:
    """Row i is (`keys[index[i]]`, `positions[i]`, `totals[i]`), in the order the subtask emitted the rows."""

    keys: list[Any]
    index: npt.NDArray[np.intp]
    positions: npt.NDArray[np.int64]
    totals: npt.NDArray[np.int64]

    def __post_init__(self) -> None:
        if not len(self.index) == len(self.positions) == len(self.totals):
            raise ValueError(
                f"staged output columns differ in length: {len(self.index)} keys, {len(self.positions)} positions, "
                f"{len(self.totals)} totals"
            )

    @classmethod
    def from_rows(cls, rows: Sequence[Row]) -> StagedOutput:
        """From rows; every row keeps its own key object (no two keys merged, however equal they compare)."""
        return cls(
            [key for key, _, _ in rows],
            np.arange(len(rows), dtype=np.intp),
            np.array([p for _, p, _ in rows], dtype=np.int64),
            np.array([t for _, _, t in rows], dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.index)

    def rows(self) -> list[Row]:
        return list(zip(keys_at(self.keys, self.index), self.positions.tolist(), self.totals.tolist(), strict=True))
