"""The checkpoint storage contract, runnable against any storage the run is given (CS-2, CS-3, CS-4, CS-6)."""

from __future__ import annotations

import os
from typing import Any

import fsspec
import pytest

from statecert.spec.storage import CheckpointedStateScope


@pytest.mark.requirement("CS-3", "CS-4")
@pytest.mark.parametrize("scope", list(CheckpointedStateScope))
@pytest.mark.parametrize("size", [1, 1000, 100_000])
def test_every_scope_reads_back_what_was_written(storage: Any, scope: CheckpointedStateScope, size: int) -> None:
    payload = os.urandom(size)
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    with location.create_checkpoint_state_output_stream(scope) as out:
        for i in range(0, size, 4096):
            out.write(payload[i : i + 4096])
        assert out.tell() == size
        handle = out.close_and_get_handle()
    with handle.open() as f:
        assert f.read() == payload, f"{scope.value} stream of {size} bytes read back differently"


@pytest.mark.requirement("CS-3", "CS-4")
def test_task_owned_stream_reads_back(storage: Any) -> None:
    out = storage.create_checkpoint_storage("job").create_task_owned_state_stream()
    out.write(b"task owned" * 5000)
    with out.close_and_get_handle().open() as f:
        assert f.read() == b"task owned" * 5000


@pytest.mark.requirement("CS-2")
def test_savepoint_location_at_explicit_target(storage: Any, checkpoint_dir: str) -> None:
    location = storage.create_checkpoint_storage("abcdef0123").initialize_location_for_savepoint(
        3, target=f"{checkpoint_dir}-explicit"
    )
    assert location.pointer.startswith(f"{checkpoint_dir}-explicit/savepoint-abcdef-")


@pytest.mark.requirement("CS-6")
def test_discarded_and_abandoned_streams_leave_nothing(storage: Any) -> None:
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    out = location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE)
    out.write(b"a" * 50_000)
    out.discard()
    with (
        pytest.raises(RuntimeError),
        location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as abandoned,
    ):
        abandoned.write(b"b" * 50_000)
        raise RuntimeError("task failed mid-write")
    fs, directory = fsspec.core.url_to_fs(location.pointer)
    assert not fs.exists(directory) or fs.find(directory) == []
    kept = location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE)
    kept.write(b"c" * 50_000)
    kept.close_and_get_handle()
    location.dispose_on_failure()
    assert not fs.exists(directory)
