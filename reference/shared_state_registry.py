"""Reference counts of shared state files across retained checkpoints (CKP-2): a shared file is deleted exactly
when the last retained checkpoint referencing it is released, like Flink's SharedStateRegistry."""

from __future__ import annotations

from collections import Counter

import fsspec

from statecert.spec.handles import (
    ChangelogStateBackendHandle,
    FileStateHandle,
    IncrementalKeyedStateHandle,
    KeyedStateHandle,
    StreamStateHandle,
)
from statecert.spec.metadata import CheckpointMetadata


def _shared_streams(keyed: KeyedStateHandle) -> list[StreamStateHandle]:
    """The streams of a keyed handle that live in the shared scope: an incremental handle's shared files; every
    file of a changelog handle (its segments and its materialization, written to the shared scope, CL-2)."""
    if isinstance(keyed, IncrementalKeyedStateHandle):
        return list(keyed.shared_state.values())
    if isinstance(keyed, ChangelogStateBackendHandle):
        streams = [segment.delegate for segment in keyed.changelog]
        for part in keyed.materialized:
            if isinstance(part, IncrementalKeyedStateHandle):
                streams += [*part.shared_state.values(), *part.private_state.values(), part.meta_state]
            else:
                streams.append(part.delegate)
        return streams
    return []


def shared_files(metadata: CheckpointMetadata) -> set[str]:
    """URLs of the shared-scope files a checkpoint references (inline handles are not files)."""
    return {
        handle.path
        for op in metadata.operators
        for subtask in op.subtask_states.values()
        for keyed in subtask.managed_keyed_state
        for handle in _shared_streams(keyed)
        if isinstance(handle, FileStateHandle)
    }


class SharedStateRegistry:
    def __init__(self) -> None:
        self._references: Counter[str] = Counter()
        self._not_owned: set[str] = set()

    def register_not_owned(self, metadata: CheckpointMetadata) -> None:
        """The shared files of a snapshot the job started from without claiming it (NO_CLAIM, COORD-13): never
        deleted by this job, however its own checkpoints reference them."""
        self._not_owned |= shared_files(metadata)

    def register(self, metadata: CheckpointMetadata) -> None:
        self._references.update(shared_files(metadata))

    def release(self, metadata: CheckpointMetadata) -> list[str]:
        """Drop one checkpoint's references; delete and return the files nobody references any more."""
        deleted = []
        for path in sorted(shared_files(metadata)):
            self._references[path] -= 1
            if self._references[path] <= 0:
                del self._references[path]
                if path in self._not_owned:
                    continue
                fs, local = fsspec.core.url_to_fs(path)
                if fs.exists(local):
                    fs.rm_file(local)
                deleted.append(path)
        return deleted

    def referenced(self) -> set[str]:
        return set(self._references)
