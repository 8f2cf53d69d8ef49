"""The Spark runner's mini-batch mode (SCN-11), in process: per key one state read and one write per epoch, with the
same outputs and the same final state as processing every record alone."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecert.reference.checkpointing import create_keyed_backend
from statecert.reference.key_types import KEY_TYPES, KeyType
from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.reference.loader import load_state_backend
from statecert.scenarios.spark import worker
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, KeyedBackendParameters
from statecert.spec.keygroups import KeyGroupRange

aggregates = st.builds(
    KeyedAggregate,
    operator=st.sampled_from(["count", "sum"]),
    key_selector=st.sampled_from(["key", "split"]),
    serializer_version=st.sampled_from([1, 2]),
    key_type=st.builds(KeyType, name=st.sampled_from(KEY_TYPES)),
)
# per source split, the keys of its records in offset order (a few keys, so that keys repeat within an epoch)
splits = st.lists(st.lists(st.integers(0, 5), max_size=40), min_size=1, max_size=3)


class CountingState:
    """A value state that counts its reads and writes."""

    def __init__(self, state: Any, counts: dict[str, int]) -> None:
        self._state, self._counts = state, counts

    def value(self) -> Any:
        self._counts["reads"] += 1
        return self._state.value()

    def update(self, value: Any) -> None:
        self._counts["writes"] += 1
        self._state.update(value)


class CountingKeyed:
    """A keyed backend whose states count their accesses; everything else goes to the real backend."""

    def __init__(self, keyed: Any) -> None:
        self._keyed = keyed
        self.counts = {"reads": 0, "writes": 0}

    def get_or_create_state(self, descriptor: Any) -> CountingState:
        return CountingState(self._keyed.get_or_create_state(descriptor), self.counts)

    def set_current_key(self, key: Any) -> None:
        self._keyed.set_current_key(key)


def epoch_task(aggregate: KeyedAggregate, mini_batch: bool) -> worker.EpochTask:
    return worker.EpochTask(
        job_id="job",
        checkpoint_id=1,
        storage_access=None,
        options=DEFAULT_CHECKPOINT_OPTIONS,
        restore_pointer=None,
        restore_id=None,
        backend_config={"state.backend.type": "hashmap"},
        parallelism=1,
        max_parallelism=16,
        aggregate=aggregate,
        inputs=worker.InputSpec(0, 1, 1, 1, 1.0),
        ranges={},
        mini_batch=mini_batch,
    )


def keyed_backend(aggregate: KeyedAggregate) -> Any:
    params = KeyedBackendParameters("job", worker.OPERATOR, aggregate.key_type.serializer(), 16, KeyGroupRange(0, 15))
    return create_keyed_backend(load_state_backend(job_config={"state.backend.type": "hashmap"}), params)


def rows_of(keys_per_split: list[list[int]], first_offset: int) -> list[tuple[str, int, int]]:
    """An epoch's records as (key, source, offset): per split in offset order, splits in order."""
    return [
        (f"s{source}-k{k}", source, first_offset + offset)
        for source, keys in enumerate(keys_per_split)
        for offset, k in enumerate(keys)
    ]


def records_of(aggregate: KeyedAggregate, keys_per_split: list[list[int]], first_offset: int) -> worker.EpochRecords:
    """The same records as a subtask gets them, shuffled first: the subtask restores (split, offset) order."""
    rows = rows_of(keys_per_split, first_offset)
    return worker.EpochRecords.from_rows(aggregate, rows[::-1])


def per_key(outputs: list[tuple[Any, int, int]]) -> dict[Any, list[tuple[int, int]]]:
    grouped: dict[Any, list[tuple[int, int]]] = defaultdict(list)
    for key, offset, total in outputs:
        grouped[key].append((offset, total))
    return dict(grouped)


def final_values(keyed: Any, aggregate: KeyedAggregate, keys: set[Any]) -> dict[Any, Any]:
    state = keyed.get_or_create_state(aggregate.descriptor)
    values = {}
    for key in sorted(keys, key=str):
        keyed.set_current_key(key)
        values[key] = state.value()
    return values


@pytest.mark.requirement("SCN-11")
@settings(max_examples=60, deadline=None)
@given(aggregate=aggregates, before=splits, epoch=splits)
def test_mini_batch_reads_and_writes_each_keys_state_once_with_the_per_record_results(
    aggregate: KeyedAggregate, before: list[list[int]], epoch: list[list[int]]
) -> None:
    """After an earlier epoch left state behind, the same epoch processed per record and as a mini-batch gives the
    same outputs in the same (split, offset) order and the same final values; the mini-batch reads and writes each
    key's state exactly once."""
    backends = {mode: keyed_backend(aggregate) for mode in (False, True)}
    outputs = {}
    counts = {}
    for mini_batch, keyed in backends.items():
        worker._process(epoch_task(aggregate, False), 0, 1, keyed, records_of(aggregate, before, 0))
        counting = CountingKeyed(keyed)
        records = records_of(aggregate, epoch, 100)
        outputs[mini_batch] = worker._process(epoch_task(aggregate, mini_batch), 0, 1, counting, records).rows()
        counts[mini_batch] = counting.counts
    arrival = [(aggregate.key(k, s), o) for k, s, o in rows_of(epoch, 100)]
    assert [(k, o) for k, o, _ in outputs[False]] == arrival, "per record: records not in (split, offset) order"
    assert outputs[True] == outputs[False], "mini-batch outputs differ from per-record outputs"
    keys = {k for k, _ in arrival}
    assert counts[True] == {"reads": len(keys), "writes": len(keys)}, f"expected one read and write per key of {keys}"
    assert counts[False] == {"reads": len(arrival), "writes": len(arrival)}
    touched = keys | {aggregate.key(k, s) for k, s, _ in rows_of(before, 0)}
    got = {mode: final_values(keyed, aggregate, touched) for mode, keyed in backends.items()}
    assert got[True] == got[False], f"final state: per record {got[False]}, mini-batch {got[True]}"
    for keyed in backends.values():
        keyed.dispose()


@pytest.mark.requirement("SCN-11")
@given(
    aggregate=aggregates,
    starts=st.lists(st.none() | st.integers(0, 10**6), min_size=1, max_size=6),
    data=st.data(),
)
def test_fold_equals_adding_each_record_in_order(
    aggregate: KeyedAggregate, starts: list[int | None], data: st.DataObject
) -> None:
    """Folding many keys' records at once gives each key the value, and each record the running total, that
    `add` one record at a time gives."""
    keys = len(starts)
    index = data.draw(st.permutations(range(keys))) + data.draw(st.lists(st.integers(0, keys - 1)))
    offsets = data.draw(st.lists(st.integers(0, 10**9), min_size=len(index), max_size=len(index)))
    values = [None if start is None else aggregate.add(None, start) for start in starts]
    expected = list(values)
    expected_totals = []
    for key, offset in zip(index, offsets, strict=True):
        expected[key] = aggregate.add(expected[key], offset)
        expected_totals.append(aggregate.total(expected[key]))
    after, totals = aggregate.fold(values, np.array(index, dtype=np.intp), np.array(offsets, dtype=np.int64))
    got = (after, totals.tolist())
    assert got == (expected, expected_totals), f"fold({values}, {index}, {offsets})"


@pytest.mark.requirement("SCN-11", "SCN-6")
def test_a_processing_fault_in_a_mini_batch_fires_half_way_through_the_keys() -> None:
    """The injected processing failure still fires on the first attempt, after half the keys were written, so a
    Spark retry has partly updated state to throw away."""
    aggregate = KeyedAggregate()
    task = epoch_task(aggregate, True)
    task = worker.EpochTask(**{**task.__dict__, "faults": (worker.TaskFault(0, "exception", "processing"),)})
    keyed = keyed_backend(aggregate)
    counting = CountingKeyed(keyed)
    with pytest.raises(worker.InjectedTaskFailure):
        worker._process(task, 0, 0, counting, records_of(aggregate, [[0, 1, 2, 3, 0, 1]], 0))
    assert counting.counts == {"reads": 4, "writes": 2}, counting.counts
    retry = worker._process(task, 0, 1, CountingKeyed(keyed), records_of(aggregate, [[0]], 10))
    assert len(retry) == 1, f"the retry attempt's output: expected one row, got {retry.rows()}"
    keyed.dispose()
