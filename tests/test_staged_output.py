"""The Spark runner's staged output (`scenarios/spark/staged_output.py`): an epoch's sink output in columns gives
back exactly the rows the subtask emitted, in order, through PySpark's pickling from worker to driver (SCN-6)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.serializers import CPickleSerializer

from statecert.scenarios.spark.staged_output import StagedOutput

LONGS = st.integers(-(2**63), 2**63 - 1)
KEYS = st.text(max_size=4) | st.integers(-(2**31), 2**31 - 1) | st.booleans()  # 1 and True: equal, not the same
rows = st.lists(st.tuples(KEYS, LONGS, LONGS), max_size=50)


def same_rows(got: list[tuple[Any, int, int]], expected: list[tuple[Any, int, int]]) -> bool:
    """Equal row by row, each key of the same type (so True never stands in for 1)."""
    return got == expected and all(type(g[0]) is type(e[0]) for g, e in zip(got, expected, strict=True))


@pytest.mark.requirement("SCN-6")
@given(rows=rows)
def test_staged_rows_come_back_as_emitted(rows: list[tuple[Any, int, int]]) -> None:
    staged = CPickleSerializer().loads(CPickleSerializer().dumps(StagedOutput.from_rows(rows)))
    got = staged.rows()
    assert same_rows(got, rows), f"StagedOutput.from_rows({rows!r}).rows(): got {got!r}"
    assert len(staged) == len(rows)


@pytest.mark.requirement("SCN-6")
@given(distinct=st.lists(KEYS, min_size=1, max_size=8), data=st.data())
def test_staged_columns_index_their_distinct_keys(distinct: list[Any], data: st.DataObject) -> None:
    """The per-record and mini-batch outputs index the epoch's distinct keys: row i is keys[index[i]]."""
    index = data.draw(st.lists(st.integers(0, len(distinct) - 1), max_size=40))
    positions = data.draw(st.lists(LONGS, min_size=len(index), max_size=len(index)))
    totals = data.draw(st.lists(LONGS, min_size=len(index), max_size=len(index)))
    staged = StagedOutput(
        distinct, np.array(index, dtype=np.intp), np.array(positions, dtype=np.int64), np.array(totals, dtype=np.int64)
    )
    expected = [(distinct[i], p, t) for i, p, t in zip(index, positions, totals, strict=True)]
    assert same_rows(staged.rows(), expected), f"rows of {staged}: expected {expected!r}, got {staged.rows()!r}"


@pytest.mark.requirement("SCN-6")
def test_staged_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        StagedOutput(["k"], np.zeros(2, dtype=np.intp), np.zeros(2, dtype=np.int64), np.zeros(1, dtype=np.int64))
