"""Checkpoint storage (spec chapter CS): where checkpoint state and `_metadata` go, and how a pointer to a
completed checkpoint is resolved."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from statecert.spec.errors import CheckpointFormatError
from statecert.spec.handles import StreamStateHandle
from statecert.spec.metadata import CheckpointMetadata

METADATA_FILE_NAME = "_metadata"  # FMT-5
SHARED_STATE_DIR = "shared"  # CS-FS-1
TASK_OWNED_STATE_DIR = "taskowned"  # CS-FS-1
CHECKPOINT_DIR_PREFIX = "chk-"  # CS-FS-1
SAVEPOINT_DIR_PREFIX = "savepoint-"  # CS-FS-2
REFERENCE_MAGIC_NUMBER = b"\x05\x5f\x3f\x18"  # CS-12: Flink's, in front of every encoded location reference


class CheckpointedStateScope(str, enum.Enum):
    """Exclusive state belongs to one checkpoint; shared state may be referenced by several (CS-3)."""

    EXCLUSIVE = "exclusive"
    SHARED = "shared"


@dataclass(frozen=True)
class CheckpointStorageLocationReference:
    """Where a task writes the state of a checkpoint, as the coordinator tells it with the checkpoint's options
    (CS-12, Flink's `CheckpointStorageLocationReference`): the default reference (`encoded` None) stands for the
    storage's own location of that checkpoint id; an encoded one carries its location, as for a savepoint."""

    encoded: bytes | None = None

    def __post_init__(self) -> None:
        if self.encoded is not None and not self.encoded:
            raise ValueError("CS-12: an encoded checkpoint storage location reference needs at least one byte")

    @classmethod
    def default(cls) -> CheckpointStorageLocationReference:
        return DEFAULT_LOCATION_REFERENCE

    @property
    def is_default(self) -> bool:
        return self.encoded is None

    @property
    def reference_bytes(self) -> bytes:
        """The encoded bytes; none for the default reference."""
        return self.encoded or b""


DEFAULT_LOCATION_REFERENCE = CheckpointStorageLocationReference()


def encode_path_as_reference(directory: str) -> CheckpointStorageLocationReference:
    """A directory as a location reference: the magic number, then the URL in UTF-8 (CS-12, Flink's
    `AbstractFsCheckpointStorageAccess.encodePathAsReference`)."""
    return CheckpointStorageLocationReference(REFERENCE_MAGIC_NUMBER + directory.encode("utf-8"))


def decode_path_from_reference(reference: CheckpointStorageLocationReference) -> str:
    """The directory an encoded reference carries (CS-12). A default reference, bytes not starting with the magic
    number, nothing after it or bytes that are not UTF-8 raise `CheckpointFormatError`, naming the problem."""
    source = "checkpoint storage location reference"
    if reference.is_default:
        raise CheckpointFormatError(source, "the default reference carries no directory")
    data = reference.reference_bytes
    if not data.startswith(REFERENCE_MAGIC_NUMBER):
        raise CheckpointFormatError(source, f"starts with {data[:4].hex()}, not the magic number 055f3f18")
    if len(data) == len(REFERENCE_MAGIC_NUMBER):
        raise CheckpointFormatError(source, "no directory after the magic number")
    try:
        return data[len(REFERENCE_MAGIC_NUMBER) :].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointFormatError(source, f"the directory is not UTF-8: {exc}") from None


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

    @property
    def location_reference(self) -> CheckpointStorageLocationReference:
        """What the coordinator sends the tasks for this location: the default reference for a checkpoint in the
        storage's own directory, the encoded directory for a savepoint (CS-12)."""
        ...

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
    """Checkpoint storage bound to one job (CS-2): the coordinator's view (locations, base directories, what the
    storage offers) and the tasks' (a location resolved from the reference the coordinator sent, CS-13)."""

    job_id: str

    def supports_highly_available_storage(self) -> bool:
        """Whether completed checkpoints outlive the process that wrote them (CS-14)."""
        ...

    def has_default_savepoint_location(self) -> bool:
        """Whether a savepoint without a target has a directory to go to (CS-15)."""
        ...

    def initialize_base_locations(self) -> None:
        """Create the job's base directories once, before its first checkpoint (CS-16)."""
        ...

    def resolve_checkpoint_storage_location(
        self, checkpoint_id: int, reference: CheckpointStorageLocationReference
    ) -> CheckpointStreamFactory:
        """The stream factory a task writes checkpoint `checkpoint_id` through, from the coordinator's reference
        (CS-13)."""
        ...

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
