"""Checkpoint locations and per-job storage access shared by both storage kinds (CS-2, CS-3, FMT-7)."""

from __future__ import annotations

import math
import uuid

import fsspec

from statecert.reference.format.metadata_codec import decode_metadata, encode_metadata
from statecert.reference.format.paths import basename_url, join_url, normalize_url, parent_url
from statecert.reference.storage.discard import discard_checkpoint_directory
from statecert.reference.storage.literal_paths import move_file
from statecert.reference.storage.streams import CheckpointStateOutputStreamImpl
from statecert.spec.errors import (
    CheckpointNotFoundError,
    IllegalConfigurationError,
    IncompleteCheckpointError,
    StateCertError,
)
from statecert.spec.metadata import CheckpointMetadata
from statecert.spec.storage import (
    CHECKPOINT_DIR_PREFIX,
    DEFAULT_LOCATION_REFERENCE,
    METADATA_FILE_NAME,
    SAVEPOINT_DIR_PREFIX,
    SHARED_STATE_DIR,
    TASK_OWNED_STATE_DIR,
    CheckpointedStateScope,
    CheckpointStorageLocationReference,
    CompletedCheckpointLocation,
    decode_path_from_reference,
    encode_path_as_reference,
)


class CheckpointStorageLocationImpl:
    """The directory of checkpoint N or of a savepoint; streams go to it (exclusive) or to `shared_dir`."""

    def __init__(
        self,
        checkpoint_id: int,
        directory: str,
        shared_dir: str,
        inline_threshold: float,
        max_state_size: int | None,
        location_reference: CheckpointStorageLocationReference = DEFAULT_LOCATION_REFERENCE,
    ) -> None:
        self.checkpoint_id = checkpoint_id
        self.directory = directory
        self.shared_dir = shared_dir
        self._threshold = inline_threshold
        self._max_state_size = max_state_size
        self._reference = location_reference

    @property
    def pointer(self) -> str:
        return self.directory

    @property
    def location_reference(self) -> CheckpointStorageLocationReference:
        """The default reference for a checkpoint in the job's directory, the encoded directory for a savepoint
        (CS-12)."""
        return self._reference

    def create_checkpoint_state_output_stream(self, scope: CheckpointedStateScope) -> CheckpointStateOutputStreamImpl:
        target = self.shared_dir if scope is CheckpointedStateScope.SHARED else self.directory
        return CheckpointStateOutputStreamImpl(target, self._threshold, self._max_state_size)

    def metadata_bytes(self, metadata: CheckpointMetadata) -> bytes:
        """What `write_metadata` writes: `metadata` in the format chapter's encoding (FMT-1, FMT-2)."""
        return encode_metadata(metadata, self.directory)

    def write_metadata(self, metadata: CheckpointMetadata) -> str:
        """Write to a temporary name, then rename: `_metadata` appears complete or not at all (FMT-7)."""
        data = self.metadata_bytes(metadata)
        fs, directory = fsspec.core.url_to_fs(self.directory)
        final = f"{directory.rstrip('/')}/{METADATA_FILE_NAME}"
        if fs.exists(final):
            raise StateCertError(f"{self.directory}: refusing to overwrite an existing {METADATA_FILE_NAME}")
        temp = f"{directory.rstrip('/')}/.{METADATA_FILE_NAME}.inprogress-{uuid.uuid4().hex}"
        fs.makedirs(directory, exist_ok=True)
        moving = False
        try:
            with fs.open(temp, "wb") as out:
                out.write(data)
            moving = True
            move_file(fs, temp, final)
        except BaseException:
            if fs.exists(temp):
                fs.rm_file(temp)
            if moving and fs.exists(final):  # a move that copies (off the local disk) failed part way
                fs.rm_file(final)
            raise
        return self.pointer

    def dispose_on_failure(self) -> None:
        discard_checkpoint_directory(self.directory)


class CheckpointStorageAccessImpl:
    """Flink's layout under `job_dir`: `chk-N/`, `shared/`, `taskowned/` (CS-FS-1); savepoints go to
    `<target>/savepoint-<job id[:6]>-<random>/` (CS-FS-2)."""

    def __init__(
        self,
        job_id: str,
        job_dir: str,
        default_savepoint_dir: str | None,
        inline_threshold: float,
        max_state_size: int | None,
        highly_available: bool,
    ) -> None:
        self.job_id = job_id
        self.job_dir = job_dir
        self.default_savepoint_dir = default_savepoint_dir
        self._threshold = inline_threshold
        self._max_state_size = max_state_size
        self._highly_available = highly_available

    def supports_highly_available_storage(self) -> bool:
        """Whether completed checkpoints outlive this process (CS-14): given by the storage kind."""
        return self._highly_available

    def has_default_savepoint_location(self) -> bool:
        """Whether a savepoint without a target has a directory to go to (CS-15)."""
        return self.default_savepoint_dir is not None

    def initialize_base_locations(self) -> None:
        """Create the shared and task-owned directories (CS-16, CS-FS-1); those that exist are left as they are.
        Streams inlined whatever their size (the job-manager storage) need none."""
        if math.isinf(self._threshold):
            return
        for directory in (self.shared_dir, self.task_owned_dir):
            fs, path = fsspec.core.url_to_fs(directory)
            fs.makedirs(path, exist_ok=True)

    def resolve_checkpoint_storage_location(
        self, checkpoint_id: int, reference: CheckpointStorageLocationReference
    ) -> CheckpointStorageLocationImpl:
        """The default reference: checkpoint `checkpoint_id`'s location in the job's directory; an encoded one: the
        directory it carries, shared state included (CS-13, SP-4)."""
        if reference.is_default:
            return self.initialize_location_for_checkpoint(checkpoint_id)
        directory = normalize_url(decode_path_from_reference(reference))
        return CheckpointStorageLocationImpl(
            checkpoint_id, directory, directory, self._threshold, self._max_state_size, reference
        )

    @property
    def shared_dir(self) -> str:
        return join_url(self.job_dir, SHARED_STATE_DIR)

    @property
    def task_owned_dir(self) -> str:
        return join_url(self.job_dir, TASK_OWNED_STATE_DIR)

    def initialize_location_for_checkpoint(self, checkpoint_id: int) -> CheckpointStorageLocationImpl:
        if checkpoint_id < 1:
            raise ValueError(f"checkpoint ids start at 1, got {checkpoint_id}")
        directory = join_url(self.job_dir, f"{CHECKPOINT_DIR_PREFIX}{checkpoint_id}")
        return CheckpointStorageLocationImpl(
            checkpoint_id, directory, self.shared_dir, self._threshold, self._max_state_size
        )

    def initialize_location_for_savepoint(
        self, checkpoint_id: int, target: str | None = None
    ) -> CheckpointStorageLocationImpl:
        base = target or self.default_savepoint_dir
        if base is None:
            raise IllegalConfigurationError(
                "execution.checkpointing.savepoint-dir: no savepoint target given and no default savepoint "
                "directory configured"
            )
        directory = join_url(normalize_url(base), f"{SAVEPOINT_DIR_PREFIX}{self.job_id[:6]}-{uuid.uuid4().hex[:12]}")
        # A savepoint is self-contained: even "shared" state goes into its own directory (SP-4).
        return CheckpointStorageLocationImpl(
            checkpoint_id,
            directory,
            directory,
            self._threshold,
            self._max_state_size,
            encode_path_as_reference(directory),
        )

    def create_task_owned_state_stream(self) -> CheckpointStateOutputStreamImpl:
        return CheckpointStateOutputStreamImpl(self.task_owned_dir, self._threshold, self._max_state_size)


def resolve_checkpoint_pointer(pointer: str) -> CompletedCheckpointLocation:
    """A directory or its `_metadata` file; a directory without `_metadata` is an incomplete checkpoint (FMT-5)."""
    url = normalize_url(pointer)
    fs, path = fsspec.core.url_to_fs(url)
    if basename_url(url) == METADATA_FILE_NAME or fs.isfile(path):
        metadata_url, directory = url, parent_url(url)
    else:
        metadata_url, directory = join_url(url, METADATA_FILE_NAME), url
    _, metadata_path = fsspec.core.url_to_fs(metadata_url)
    if fs.isfile(metadata_path):
        return CompletedCheckpointLocation(metadata_url, directory)
    _, dir_path = fsspec.core.url_to_fs(directory)
    if fs.isdir(dir_path):
        raise IncompleteCheckpointError(
            f"{directory}: no {METADATA_FILE_NAME} file: an incomplete checkpoint, or not a checkpoint at all"
        )
    raise CheckpointNotFoundError(f"{pointer}: no such checkpoint or savepoint")


def load_checkpoint_metadata(pointer: str) -> CheckpointMetadata:
    """Resolve `pointer` and decode its `_metadata` (FMT-5, FMT-8)."""
    location = resolve_checkpoint_pointer(pointer)
    with fsspec.open(location.metadata_path, "rb") as f:
        data = f.read()
    return decode_metadata(data, location.metadata_path, location.directory)
