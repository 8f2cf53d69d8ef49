"""The shared state files of a job's checkpoints and when they are deleted (CKP-2), as Flink's SharedStateRegistry:
every file a checkpoint's acknowledgement references is registered with that checkpoint's id as its last use, and
whenever a checkpoint is added to the store, the files last used before the oldest retained checkpoint are deleted.
So a file only an aborted or late checkpoint uploaded goes too, which counting references of completed checkpoints
alone would leak."""

from __future__ import annotations

from statecert.reference.storage.discard import remove_file
from statecert.spec.handles import (
    ChangelogStateBackendHandle,
    FileStateHandle,
    IncrementalKeyedStateHandle,
    KeyedStateHandle,
    StreamStateHandle,
)
from statecert.spec.metadata import CheckpointMetadata, OperatorSubtaskState


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


def subtask_shared_files(state: OperatorSubtaskState) -> set[str]:
    """URLs of the shared-scope files one task's acknowledged state references (inline handles are not files)."""
    return {
        handle.path
        for keyed in state.managed_keyed_state
        for handle in _shared_streams(keyed)
        if isinstance(handle, FileStateHandle)
    }


def shared_files(metadata: CheckpointMetadata) -> set[str]:
    """URLs of the shared-scope files a checkpoint references."""
    return {
        path
        for op in metadata.operators
        for state in op.subtask_states.values()
        for path in subtask_shared_files(state)
    }


class SharedStateRegistry:
    """Per shared file, the id of the last checkpoint whose acknowledgement used it (Flink's lastUsedCheckpointID)."""

    def __init__(self) -> None:
        self._last_used: dict[str, int] = {}
        self._not_owned: set[str] = set()

    def register_not_owned(self, metadata: CheckpointMetadata) -> None:
        """The shared files of a snapshot the job started from without claiming it (NO_CLAIM, COORD-13): never
        deleted by this job, however its own checkpoints reference them."""
        self._not_owned |= shared_files(metadata)

    def register_acknowledged(self, checkpoint_id: int, state: OperatorSubtaskState) -> None:
        """A task acknowledged `checkpoint_id` with `state`: its shared files were last used by that checkpoint
        (Flink registers every acknowledgement of a checkpoint, a late one's too, so that nothing it uploaded leaks)."""
        self._use(checkpoint_id, subtask_shared_files(state))

    def register(self, metadata: CheckpointMetadata) -> None:
        """A checkpoint entering the store (completed, recovered or claimed): its shared files were last used by it."""
        self._use(metadata.checkpoint_id, shared_files(metadata))

    def _use(self, checkpoint_id: int, paths: set[str]) -> None:
        for path in paths:
            self._last_used[path] = max(checkpoint_id, self._last_used.get(path, checkpoint_id))

    def unregister_unused(self, lowest_retained_id: int | None) -> list[str]:
        """Delete and return the files last used by a checkpoint older than `lowest_retained_id` (None: no checkpoint
        is retained any more, every file goes); those of a snapshot the job does not own are forgotten, not deleted."""
        deleted = []
        for path in sorted(self._last_used):
            if lowest_retained_id is not None and self._last_used[path] >= lowest_retained_id:
                continue
            del self._last_used[path]
            if path in self._not_owned:
                continue
            remove_file(path)
            deleted.append(path)
        return deleted

    def registered(self) -> set[str]:
        """The files registered and not yet deleted."""
        return set(self._last_used)
