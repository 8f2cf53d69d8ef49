"""The reference's operator state assignment (`reference.rescale.operator_handles_for_subtasks`) against a model of
Flink's `RoundRobinOperatorStateRepartitioner`: union state to every subtask on every restore (OS-2), split state
kept per subtask at unchanged parallelism and split evenly otherwise (OS-1, OS-7), broadcast state by copy (OS-3)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.conformance.helpers import location_for, operator_backend, snapshot_now
from statecert.reference.loader import load_state_backend
from statecert.reference.rescale import operator_handles_for_subtasks
from statecert.reference.serializers import IntSerializer, LongSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.errors import CheckpointFormatError
from statecert.spec.handles import (
    ByteStreamStateHandle,
    OperatorStateHandle,
    OperatorStateMode,
    OperatorStatePartitions,
)
from statecert.spec.metadata import OperatorState, OperatorSubtaskState
from statecert.spec.state import ListStateDescriptor

Element = tuple[str, int]  # (the old subtask's stream, an offset in it)
Old = tuple[list[int], list[int], bool]  # an old subtask's split offsets, union offsets, and whether it has broadcast

OFFSETS = st.lists(st.integers(0, 10_000), max_size=5, unique=True)
OLD_SUBTASK = st.tuples(OFFSETS, OFFSETS, st.booleans())


def operator_of(old: list[Old]) -> OperatorState:
    """One stream per old subtask holding its split and union offsets and, where drawn, a broadcast state."""
    subtasks = {}
    for j, (split, union, broadcast) in enumerate(old):
        states = {
            "split": OperatorStatePartitions(OperatorStateMode.SPLIT_DISTRIBUTE, tuple(split)),
            "union": OperatorStatePartitions(OperatorStateMode.UNION, tuple(union)),
        }
        if broadcast:
            states["broadcast"] = OperatorStatePartitions(OperatorStateMode.BROADCAST, (j,))
        handle = OperatorStateHandle(states, ByteStreamStateHandle(f"stream-{j}", b""))
        subtasks[j] = OperatorSubtaskState((), (handle,))
    return OperatorState("op", len(old), 128, subtasks)


def elements(handles: tuple[OperatorStateHandle, ...], name: str) -> list[Element]:
    return [(h.delegate.handle_name, o) for h in handles if name in h.states for o in h.states[name].offsets]


@given(st.lists(OLD_SUBTASK, min_size=1, max_size=5), st.integers(1, 7))
def test_operator_state_is_assigned_as_flinks_repartitioner_assigns_it(old: list[Old], new: int) -> None:
    assigned = operator_handles_for_subtasks(operator_of(old), new)
    assert len(assigned) == new, (
        f"operator_handles_for_subtasks(..., {new}): expected {new} shares, got {len(assigned)}"
    )
    union = Counter((f"stream-{j}", o) for j, (_, offsets, _) in enumerate(old) for o in offsets)
    splits = [[(f"stream-{j}", o) for o in offsets] for j, (offsets, _, _) in enumerate(old)]
    for i, share in enumerate(assigned):
        got = Counter(elements(share, "union"))
        assert got == union, f"OS-2: {len(old)}->{new}: subtask {i} expected union elements {union}, got {got}"
        owner = i % len(old)
        broadcast = [(f"stream-{owner}", owner)] if old[owner][2] else []
        assert elements(share, "broadcast") == broadcast, (
            f"OS-3: {len(old)}->{new}: subtask {i} expected the broadcast state of old subtask {owner} "
            f"{broadcast}, got {elements(share, 'broadcast')}"
        )
    shares = [elements(share, "split") for share in assigned]
    if new == len(old):
        assert shares == splits, (
            f"OS-7: at unchanged parallelism expected each subtask's own split {splits}, got {shares}"
        )
    else:
        everything = [e for split in splits for e in split]
        assert [e for share in shares for e in share] == everything, (
            f"OS-1: {len(old)}->{new}: expected the split elements {everything} in contiguous shares, got {shares}"
        )
        sizes = [len(share) for share in shares]
        assert max(sizes) - min(sizes) <= 1, f"OS-1: {len(old)}->{new}: expected even shares, got sizes {sizes}"


@pytest.mark.requirement("OS-8")
def test_two_handles_giving_a_state_other_serializers_are_refused_when_merged(tmp_path: Any) -> None:
    """Subtask 0 wrote list state `offsets` with the long serializer, subtask 1 (a forged or inconsistent checkpoint)
    with the int serializer: restored into one backend, the elements of one would be read with the other's
    serializer, so the restore refuses naming the stream, whichever handle comes first."""
    backend = load_state_backend(job_config={})
    storage = FileSystemCheckpointStorage(f"file://{tmp_path}/c")
    handles = []
    for index, serializer in enumerate((LongSerializer(), IntSerializer())):
        with operator_backend(backend) as subtask:
            subtask.get_list_state(ListStateDescriptor("offsets", element_serializer=serializer)).update([index])
            handles.append(snapshot_now(subtask, location_for(storage, index + 1)))
    for order in (handles, handles[::-1]):
        with pytest.raises(CheckpointFormatError, match="another handle"):
            merged = operator_backend(backend, restore=order)
            merged.dispose()
            pytest.fail("OS-8: two handles giving 'offsets' the long and the int serializer restored into one backend")
