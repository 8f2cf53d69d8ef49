"""Checkpoint storage (spec chapter CS): where checkpoint state and `_metadata` go, and how a pointer to a
completed checkpoint is resolved."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from statecert.spec.handles import StreamStateHandle
from statecert.spec.metadata import CheckpointMetadata

METADATA_FILE_NAME = "_metadata"  # FMT-5
SHARED_STATE_DIR = "shared"  # CS-FS-1
TASK_OWNED_STATE_DIR = "taskowned"  # CS-FS-1
CHECKPOINT_DIR_PREFIX = "chk-"  # CS-FS-1
SAVEPOINT_DIR_PREFIX = "savepoint-"  # CS-FS-2


class CheckpointedStateScope(str, enum.Enum):
    """Exclusive state belongs to one checkpoint; shared state may be referenced by several (CS-3)."""

    EXCLUSIVE = "exclusive"
    SHARED = "shared"


class CheckpointStateOutputStream(Protocol):
    """A stream a task writes one piece of state into; closing it yields the handle (CS-4, CS-5)."""

    def write(self, data: bytes) -> int:
        """Append `data`, of any length, after the bytes written before it (CS-4)."""
        ...

    def tell(self) -> int:
        """The number of bytes written so far (CS-4)."""
        ...

    def close_and_get_handle(self) -> StreamStateHandle | None:
        """Finish the stream: inline bytes below the threshold, else a file handle; None if nothing written."""
        ...

    def discard(self) -> None:
        """Abandon the stream and delete whatever it wrote (CS-6)."""
        ...

    def __enter__(self) -> CheckpointStateOutputStream: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class CheckpointStreamFactory(Protocol):
    """Creates state output streams for one checkpoint location (CS-3)."""

    def create_checkpoint_state_output_stream(self, scope: CheckpointedStateScope) -> CheckpointStateOutputStream: ...


class CheckpointStorageLocation(CheckpointStreamFactory, Protocol):
    """Where checkpoint N (or a savepoint) is written; `pointer` is what restores it later (CS-2)."""

    checkpoint_id: int

    @property
    def pointer(self) -> str: ...

    def write_metadata(self, metadata: CheckpointMetadata) -> str:
        """Write `_metadata` atomically, completing the checkpoint; returns the pointer (FMT-7)."""
        ...

    def dispose_on_failure(self) -> None:
        """Delete the exclusive state of a checkpoint that will not complete (CS-6)."""
        ...


@dataclass(frozen=True)
class CompletedCheckpointLocation:
    """A resolved pointer: the `_metadata` URL and its directory (FMT-5)."""

    metadata_path: str
    directory: str


class CheckpointStorageAccess(Protocol):
    """Checkpoint storage bound to one job (CS-2)."""

    job_id: str

    def initialize_location_for_checkpoint(self, checkpoint_id: int) -> CheckpointStorageLocation: ...

    def initialize_location_for_savepoint(
        self, checkpoint_id: int, target: str | None = None
    ) -> CheckpointStorageLocation:
        """Explicit target, else the storage's default savepoint directory, else IllegalConfigurationError."""
        ...

    def create_task_owned_state_stream(self) -> CheckpointStateOutputStream: ...


class CheckpointStorage(Protocol):
    """A checkpoint storage kind, e.g. job-manager or file system (CS-1). A storage that limits state size also
    has the attribute `max_state_size: int` (bytes, CS-7); it is loaded by name through a factory (CS-8)."""

    def resolve_checkpoint(self, pointer: str) -> CompletedCheckpointLocation:
        """Resolve a directory or `_metadata` pointer; a directory without `_metadata` is incomplete (FMT-5)."""
        ...

    def load_checkpoint(self, pointer: str) -> CheckpointMetadata: ...

    def create_checkpoint_storage(self, job_id: str) -> CheckpointStorageAccess: ...
