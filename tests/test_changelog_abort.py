"""The reference changelog backend after an aborted checkpoint (KB-SNAP-9, CL-5), with Flink's default
materialization interval (10 minutes, so checkpoints live on log segments): the aborted checkpoint's segment is
uploaded again rather than referenced, as Flink's `notifyCheckpointAborted` resets its writer, unless a later
snapshot already builds on it; either way every checkpoint taken restores exactly its state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.conformance.helpers import keyed_backend, location_for
from statecert.conformance.suite.test_changelog import STEPS, Step, apply, contents, restored
from statecert.reference.loader import load_state_backend
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage

pytestmark = pytest.mark.requirement("KB-SNAP-9", "CL-5")


def segment_ids(handle: Any) -> set[int]:
    """The segments a checkpoint references, by identity (small ones are inline, without a path)."""
    return {id(segment.delegate) for segment in handle.changelog} if handle is not None else set()


def setup(tmp: Path) -> tuple[Any, Any]:
    return (
        load_state_backend(job_config={"state.changelog.enabled": "true"}),
        FileSystemCheckpointStorage(f"file://{tmp}/checkpoints"),
    )


@given(runs=st.lists(STEPS, min_size=3, max_size=3))
def test_the_checkpoint_after_an_abort_uploads_the_aborted_changes_again(
    tmp_path_factory: pytest.TempPathFactory, runs: list[list[Step]]
) -> None:
    state_backend, storage = setup(tmp_path_factory.mktemp("abort"))
    with keyed_backend(state_backend) as backend:
        handles, expected = {}, {}
        for checkpoint_id, steps in enumerate(runs, 1):
            for step in steps:
                apply(backend, step)
            expected[checkpoint_id] = contents(backend)
            handles[checkpoint_id] = backend.snapshot(checkpoint_id, 0, location_for(storage, checkpoint_id)).run()
            if checkpoint_id == 2:
                backend.notify_checkpoint_aborted(2)
            else:
                backend.notify_checkpoint_complete(checkpoint_id)
    aborted_only = segment_ids(handles[2]) - segment_ids(handles[1])
    assert not aborted_only & segment_ids(handles[3]), (
        f"KB-SNAP-9: checkpoint 3 references {len(aborted_only & segment_ids(handles[3]))} segment(s) uploaded "
        "only for the aborted checkpoint 2"
    )
    for checkpoint_id in (1, 3):
        got = restored(state_backend, handles[checkpoint_id])
        assert got == expected[checkpoint_id], (
            f"checkpoint {checkpoint_id}: expected {expected[checkpoint_id]}, got {got}"
        )


@given(runs=st.lists(STEPS, min_size=3, max_size=3))
def test_an_abort_after_a_later_snapshot_captured_keeps_its_changes(
    tmp_path_factory: pytest.TempPathFactory, runs: list[list[Step]]
) -> None:
    """Checkpoint 3's synchronous part runs before checkpoint 2 is aborted: its changes start after checkpoint 2's
    segment, so that segment must stay in checkpoint 3 (a dropped one would restore a smaller state)."""
    state_backend, storage = setup(tmp_path_factory.mktemp("overlap"))
    with keyed_backend(state_backend) as backend:
        for step in runs[0]:
            apply(backend, step)
        backend.snapshot(1, 0, location_for(storage, 1)).run()
        backend.notify_checkpoint_complete(1)
        for step in runs[1]:
            apply(backend, step)
        backend.snapshot(2, 0, location_for(storage, 2)).run()
        for step in runs[2]:
            apply(backend, step)
        expected = contents(backend)
        third = backend.snapshot(3, 0, location_for(storage, 3))
        backend.notify_checkpoint_aborted(2)
        handle = third.run()
        backend.notify_checkpoint_complete(3)
    got = restored(state_backend, handle)
    assert got == expected, f"checkpoint 3: expected {expected}, got {got}"
