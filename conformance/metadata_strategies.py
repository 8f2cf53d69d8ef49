"""Hypothesis strategies of checkpoint metadata (FMT-4): every kind, operators of any parallelism, and every keyed and
operator handle type, built over the stream handles a caller gives. The storage contract writes them through the
storage under test over streams that storage wrote; the repository's format tests encode them with the reference
codec over made-up file handles."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from statecert.spec.handles import (
    ByteStreamStateHandle,
    ChangelogSegmentHandle,
    ChangelogStateBackendHandle,
    FileStateHandle,
    IncrementalKeyedStateHandle,
    KeyGroupsStateHandle,
    OperatorStateHandle,
    OperatorStateMode,
    OperatorStatePartitions,
)
from statecert.spec.keygroups import KeyGroupRange, key_group_range_for_operator
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata, OperatorState, OperatorSubtaskState

NAMES = st.text("abcdef0123456789", min_size=1, max_size=12)


def inline_streams(max_size: int = 4096) -> st.SearchStrategy[ByteStreamStateHandle]:
    """Inline handles (bytes inside `_metadata`) of 1 to `max_size` bytes: storage-independent, as any backend may
    return them."""
    return st.builds(
        lambda name, byte, size: ByteStreamStateHandle(name, bytes([byte]) * size),
        NAMES,
        st.integers(0, 255),
        st.integers(1, max_size),
    )


def stream_size(handle: Any) -> int:
    """The bytes a stream handle holds: a file's recorded size, or an inline handle's data."""
    return handle.size if isinstance(handle, FileStateHandle) else len(handle.data)


def ascending_offsets(draw: st.DrawFn, count: int, size: int) -> tuple[int, ...]:
    """`count` strictly ascending positions inside a stream of `size` bytes (`size` >= `count`)."""
    return tuple(sorted(draw(st.sets(st.integers(0, size - 1), min_size=count, max_size=count))))


@st.composite
def changelog_handles(
    draw: st.DrawFn, materialized: KeyGroupsStateHandle | IncrementalKeyedStateHandle, streams: st.SearchStrategy[Any]
) -> ChangelogStateBackendHandle:
    """A changelog handle (CL-2) over `materialized` (or over no materialization yet): segments with ascending
    sequence ranges after it."""
    materialized_sequence = draw(st.integers(0, 2**40))
    bounds = sorted(draw(st.sets(st.integers(materialized_sequence + 1, 2**41), max_size=4)))
    after = draw(st.integers(0, materialized_sequence))
    segments = []
    for up_to in bounds:
        segments.append(ChangelogSegmentHandle(draw(streams), after, up_to))
        after = up_to
    return ChangelogStateBackendHandle(
        materialized.key_group_range,
        draw(st.integers(0, 2**40)),
        materialized_sequence,
        draw(st.sampled_from([(), (materialized,)])),
        tuple(segments),
    )


@st.composite
def keyed_handles(
    draw: st.DrawFn, owned: KeyGroupRange, streams: st.SearchStrategy[Any], kind: CheckpointKind, changelog: bool
) -> Any:
    """A keyed handle inside the key groups `owned` (FMT-11): canonical key groups (every kind), RocksDB's native
    files (checkpoints and native savepoints), either under a changelog handle (checkpoints, when `changelog`)."""
    start = draw(st.integers(owned.start, owned.end))
    delegate = draw(streams)
    end = draw(st.integers(start, min(owned.end, start + stream_size(delegate) - 1)))
    keyed: KeyGroupsStateHandle | IncrementalKeyedStateHandle = KeyGroupsStateHandle(
        KeyGroupRange(start, end), ascending_offsets(draw, end - start + 1, stream_size(delegate)), delegate
    )
    if kind is not CheckpointKind.SAVEPOINT_CANONICAL and draw(st.booleans()):
        files = st.dictionaries(NAMES.map(lambda n: f"{n}.sst"), streams, max_size=3)
        keyed = IncrementalKeyedStateHandle(
            draw(NAMES), KeyGroupRange(start, end), draw(st.integers(0, 2**40)), draw(files), draw(files), delegate
        )
    if changelog and kind is CheckpointKind.CHECKPOINT and draw(st.booleans()):
        return draw(changelog_handles(keyed, streams))
    return keyed


@st.composite
def operator_handles(draw: st.DrawFn, streams: st.SearchStrategy[Any]) -> OperatorStateHandle:
    """An operator state handle: states of every mode, each with element offsets inside the stream."""
    delegate = draw(streams)
    states = {}
    for name in draw(st.sets(st.text(max_size=8), max_size=3)):
        count = draw(st.integers(0, min(5, stream_size(delegate))))
        mode = draw(st.sampled_from(list(OperatorStateMode)))
        states[name] = OperatorStatePartitions(mode, ascending_offsets(draw, count, stream_size(delegate)))
    return OperatorStateHandle(states, delegate)


@st.composite
def checkpoint_metadata(
    draw: st.DrawFn,
    streams: st.SearchStrategy[Any],
    kind: CheckpointKind = CheckpointKind.CHECKPOINT,
    checkpoint_id: int | None = None,
    changelog: bool = True,
) -> CheckpointMetadata:
    """Valid metadata of `kind` over handles drawn from `streams`: up to three operators of max parallelism up to
    300, some of their subtasks with state (a keyed and an operator handle each), a trigger timestamp; changelog
    handles (CL-2) in checkpoints unless `changelog` is false (formats before version 4)."""
    operators = []
    for op_index in range(draw(st.integers(0, 3))):
        max_parallelism = draw(st.integers(1, 300))
        parallelism = draw(st.integers(1, min(max_parallelism, 8)))
        subtasks = {}
        for i in draw(st.sets(st.integers(0, parallelism - 1))):
            owned = key_group_range_for_operator(max_parallelism, parallelism, i)
            keyed = draw(keyed_handles(owned, streams, kind, changelog))
            subtasks[i] = OperatorSubtaskState((keyed,), (draw(operator_handles(streams)),))
        operators.append(OperatorState(f"op-{op_index}", parallelism, max_parallelism, subtasks))
    identity = draw(st.integers(0, 2**62)) if checkpoint_id is None else checkpoint_id
    return CheckpointMetadata(identity, tuple(operators), kind, draw(st.integers(0, 2**62)))
