"""The simulator's columnar record path against record-at-a-time models: the sink checker over columns gives the
row checker's verdict (SIM-2, SIM-3), and appending a batch to the network buffers leaves them as appending its
records one at a time would (SIM-14), so the columnar path changes no report (SIM-1)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.reference.simulator.checkers import check_output_columns, check_outputs
from statecert.reference.simulator.keyspace import Keyspace
from statecert.reference.simulator.output_buffers import OutputBuffers
from statecert.reference.simulator.record import Record
from statecert.reference.simulator.record_batch import RecordBatch


@st.composite
def sink_runs(draw: Any) -> tuple[dict[int, list[int]], list[tuple[int, int, int]], dict[int, int], str]:
    """Expected records per key, and a committed output made from them with losses, duplicates, swaps, wrong
    totals and keys nobody expected."""
    operator = draw(st.sampled_from(["count", "sum"]))
    weight = KeyedAggregate(operator=operator).weight
    keys = draw(st.integers(1, 5))
    expected = {k: sorted(draw(st.sets(st.integers(0, 40), max_size=12))) for k in range(keys)}
    initial = {k: draw(st.integers(0, 5)) for k in range(keys) if draw(st.booleans())}
    committed: list[tuple[int, int, int]] = []
    totals = dict(initial)
    for k, offsets in expected.items():
        for o in offsets:
            totals[k] = totals.get(k, 0) + weight(o)
            committed.append((k, o, totals[k]))
    edits = draw(st.lists(st.tuples(st.sampled_from(["drop", "dup", "swap", "total", "stray"]), st.integers(0, 99))))
    for edit, at in edits:
        if not committed:
            break
        i = at % len(committed)
        k, o, t = committed[i]
        if edit == "drop":
            committed.pop(i)
        elif edit == "dup":
            committed.insert(draw(st.integers(i, len(committed))), (k, o, t))
        elif edit == "swap" and i + 1 < len(committed):
            committed[i], committed[i + 1] = committed[i + 1], committed[i]
        elif edit == "total":
            committed[i] = (k, o, t + 1)
        elif edit == "stray":
            committed.insert(i, (keys, o, 1))  # a key with no expected records: unexpected
    return expected, committed, initial, operator


@pytest.mark.requirement("SIM-2", "SIM-3")
@settings(max_examples=300, deadline=None)
@given(run=sink_runs(), spread=st.sampled_from([1, 7, 10_000]))
def test_the_columnar_sink_check_gives_the_row_checks_verdict(
    run: tuple[dict[int, list[int]], list[tuple[int, int, int]], dict[int, int], str], spread: int
) -> None:
    """`spread` places key k at index k * spread: 10,000 makes a key space past 16-bit indexes."""
    expected, committed, initial, operator = run
    aggregate = KeyedAggregate(operator=operator)
    want = check_outputs(expected, committed, initial, aggregate.weight)  # type: ignore[arg-type]
    key_count = (len(expected) + 1) * spread
    columns = (
        np.array([row[0] * spread for row in committed], dtype=np.int64),
        *(np.array([row[i] for row in committed], dtype=np.int64) for i in (1, 2)),
    )
    got = check_output_columns(
        np.array([k * spread for k, offsets in expected.items() for _ in offsets], dtype=np.int64),
        np.array([o for offsets in expected.values() for o in offsets], dtype=np.int64),
        columns,  # type: ignore[arg-type]
        np.array([initial.get(k // spread, 0) if k % spread == 0 else 0 for k in range(key_count)], dtype=np.int64),
        aggregate.weights,
    )
    assert got == want, f"check_output_columns gave {got}, check_outputs {want} for committed={committed}"


class RecordAtATimeBuffers:
    """The network buffers' definition, one record at a time (SIM-14): the model the batched buffers must match."""

    def __init__(self, channels: int, size: int) -> None:
        self.size, self.open = size, [[] for _ in range(channels)]  # type: list[list[Record]]
        self.full: dict[int, None] = {}
        self.filled: dict[int, None] = {}
        self.oldest, self.count = 0.0, 0

    def add(self, index: int, record: Record, now: float) -> None:
        if not self.count:
            self.oldest = now
        self.open[index].append(record)
        self.count += 1
        if len(self.open[index]) == 1:
            self.filled[index] = None
        if len(self.open[index]) == self.size:
            self.full[index] = None

    def take(self, index: int) -> list[Record]:
        records, self.open[index] = self.open[index][: self.size], self.open[index][self.size :]
        self.count -= len(records)
        if len(self.open[index]) < self.size:
            self.full.pop(index, None)
        if not self.open[index]:
            self.filled.pop(index, None)
        return records


def keyspace() -> Keyspace:
    return Keyspace(lambda r: r.key, lambda r: r.key, lambda r: 0, lambda r: 0)


@pytest.mark.requirement("SIM-14")
@settings(max_examples=200, deadline=None)
@given(
    channels=st.integers(1, 6),
    size=st.integers(1, 8),
    batches=st.lists(st.lists(st.integers(0, 5), max_size=20), max_size=8),
    takes=st.lists(st.integers(0, 5), max_size=8),
)
def test_a_batch_appended_to_the_buffers_leaves_them_as_appending_its_records_one_at_a_time(
    channels: int, size: int, batches: list[list[int]], takes: list[int]
) -> None:
    space = keyspace()
    batched = OutputBuffers([None] * channels, size, 5.0)  # type: ignore[list-item]
    single = RecordAtATimeBuffers(channels, size)
    offset = 0
    for step, owners in enumerate(batches):
        owners = [o % channels for o in owners]
        records = [Record(f"k{offset + i}", 0, offset + i) for i in range(len(owners))]
        offset += len(owners)
        batched.add_batch(np.array(owners, dtype=np.int64), RecordBatch.of_records(records, space), float(step))
        for owner, record in zip(owners, records, strict=True):
            single.add(owner, record, float(step))
        if step < len(takes) and (index := batched.due(float(step), flush=bool(takes[step] % 2))) is not None:
            assert index == next(iter(single.full or single.filled)), "another buffer is due"
            assert list(batched.take(index)) == single.take(index)
        assert list(batched.full) == list(single.full), "buffers became full in another order"
        assert list(batched.filled) == list(single.filled), "buffers got their first record in another order"
        assert (batched.count, batched.oldest) == (single.count, single.oldest)
        assert batched.pending() == [r for buffer in single.open for r in buffer]
