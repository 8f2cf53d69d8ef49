"""The reference changelog backend's count of failed materializations (CL-8, Flink's
`numberOfFailedMaterialization`): none on a new backend, one more per materialization tolerated after a failure,
none again once one succeeds; a failure past the limit fails the checkpoint."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from statecert.conformance.helpers import keyed_backend, location_for
from statecert.conformance.suite.test_changelog import _FailingMaterializations, apply, materialize
from statecert.reference.loader import load_state_backend
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage


@pytest.mark.requirement("CL-8")
def test_failed_materializations_count_from_zero_and_reset_on_success(tmp_path: Path) -> None:
    state_backend = load_state_backend(job_config={"state.changelog.enabled": "true"})
    state_backend = dataclasses.replace(
        state_backend,
        settings=dataclasses.replace(state_backend.settings, materialize_interval_ms=0, max_failures_allowed=2),
    )
    storage = FileSystemCheckpointStorage(f"file://{tmp_path}/checkpoints")
    with keyed_backend(state_backend) as backend:
        counts = [backend.failed_materializations]
        apply(backend, ("append", 0, 1))
        materialize(backend, storage)
        counts.append(backend.failed_materializations)
        for checkpoint_id in (2, 3):
            apply(backend, ("append", 0, checkpoint_id))
            backend.snapshot(checkpoint_id, 0, _FailingMaterializations(location_for(storage, checkpoint_id))).run()
            counts.append(backend.failed_materializations)
        apply(backend, ("append", 0, 4))
        backend.snapshot(4, 0, location_for(storage, 4)).run()
        counts.append(backend.failed_materializations)
    assert counts == [0, 0, 1, 2, 0], (
        "CL-8: failed_materializations on a new backend, after a materialization, after two failed ones and after "
        f"one that succeeds: expected [0, 0, 1, 2, 0], got {counts}"
    )
