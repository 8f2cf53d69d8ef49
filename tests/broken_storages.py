"""Deliberately broken checkpoint storages, one bug each, for checking that `statecert certify
--storage-under-test` catches them. Each is a factory usable as `tests.broken_storages:<name>`; `CAUGHT_BY` names
the requirement whose test must fail."""

from __future__ import annotations

import dataclasses
import io
import struct
import urllib.parse
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import fsspec

from statecert.reference.format import metadata_codec, paths
from statecert.reference.format.metadata_codec import encode_metadata
from statecert.reference.format.paths import join_url, split_url
from statecert.reference.storage.discard import discard_checkpoint_directory
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.jobmanager import JobManagerCheckpointStorage
from statecert.reference.storage.location import CheckpointStorageLocationImpl, load_checkpoint_metadata
from statecert.reference.storage.streams import CheckpointStateOutputStreamImpl
from statecert.spec.errors import (
    CheckpointNotFoundError,
    IncompleteCheckpointError,
    StateCertError,
    StateSizeLimitError,
    UnsafePathError,
)
from statecert.spec.metadata import CheckpointMetadata
from statecert.spec.storage import (
    DEFAULT_LOCATION_REFERENCE,
    METADATA_FILE_NAME,
    TASK_OWNED_STATE_DIR,
    CheckpointedStateScope,
    CompletedCheckpointLocation,
)


def _with_access(patch: Any) -> Any:
    """The file-system storage whose per-job storage access `patch` changes."""

    class Storage(FileSystemCheckpointStorage):
        def create_checkpoint_storage(self, job_id: str) -> Any:
            access = super().create_checkpoint_storage(job_id)
            patch(access)
            return access

    return Storage


def _with_checkpoint_locations(location_class: type[CheckpointStorageLocationImpl]) -> Any:
    """The file-system storage whose checkpoint locations behave as `location_class`."""

    def patch(access: Any) -> None:
        original = access.initialize_location_for_checkpoint

        def initialize(checkpoint_id: int) -> Any:
            location = original(checkpoint_id)
            location.__class__ = location_class
            return location

        access.initialize_location_for_checkpoint = initialize

    return _with_access(patch)


# 1. `_metadata` written in place: a write that fails half way leaves a torn file that looks complete.
class _InPlaceLocation(CheckpointStorageLocationImpl):
    def write_metadata(self, metadata: Any) -> str:
        fs, directory = fsspec.core.url_to_fs(self.directory)
        fs.makedirs(directory, exist_ok=True)
        with fs.open(f"{directory.rstrip('/')}/_metadata", "wb") as out:
            out.write(encode_metadata(metadata, self.directory))
        return self.pointer


_InPlaceStorage = _with_checkpoint_locations(_InPlaceLocation)


# 2. Job-manager storage that declares a maximum state size and never enforces it.
class _UnboundedJobManager(JobManagerCheckpointStorage):
    def create_checkpoint_storage(self, job_id: str) -> Any:
        access = super().create_checkpoint_storage(job_id)
        access._max_state_size = None
        return access


def _resolving_handle_paths(resolve: Any) -> Any:
    """The file-system storage whose `_metadata` reader resolves handle paths with `resolve(relative, directory,
    root, metadata_path)` instead of the reference's confinement (FMT-10)."""

    class Storage(FileSystemCheckpointStorage):
        def load_checkpoint(self, pointer: str) -> Any:
            original = metadata_codec.resolve_relative
            metadata_codec.resolve_relative = resolve
            try:
                return load_checkpoint_metadata(pointer)
            finally:
                metadata_codec.resolve_relative = original

    return Storage


# 3. A `_metadata` reader that resolves handle paths without confining them to the checkpoint directory.
_FollowsAnyPath = _resolving_handle_paths(lambda rel, directory, root, path: paths.join_url(directory, rel))


# 17. A `_metadata` reader that refuses `..` steps but takes an absolute path or a URL as it is (FMT-10).
def _refuse_parent_steps_only(relative: str, directory: str, root: str, metadata_path: str) -> str:
    if ".." in relative.split("/"):
        raise UnsafePathError(metadata_path, f"state handle path {relative!r} escapes the checkpoint directory")
    return relative if relative.startswith("/") or "://" in relative else paths.join_url(directory, relative)


_FollowsAbsolutePaths = _resolving_handle_paths(_refuse_parent_steps_only)


# 18. A `_metadata` reader that confines handle paths by their text only: a directory of the checkpoint that is a
# symbolic link leads outside it (FMT-10: on a local disk the real path counts).
def _confine_by_text_only(relative: str, directory: str, root: str, metadata_path: str) -> str:
    original = paths.check_local_confinement
    paths.check_local_confinement = lambda *args: None
    try:
        return paths.resolve_relative(relative, directory, root, metadata_path)
    finally:
        paths.check_local_confinement = original


_FollowsSymbolicLinks = _resolving_handle_paths(_confine_by_text_only)


# 4. Stream files named by a counter per checkpoint location: checkpoint 2's first shared file replaces checkpoint
# 1's, which an incremental checkpoint still references.
class _CountedStream(CheckpointStateOutputStreamImpl):
    number = 0

    def _spill(self) -> None:
        self._path = join_url(self._directory, f"state-{self.number}")
        self._file = fsspec.open(self._path, "wb", auto_mkdir=True).open()
        self._file.write(self._buffer.getvalue())
        self._buffer = io.BytesIO()


class _CountingLocation(CheckpointStorageLocationImpl):
    def create_checkpoint_state_output_stream(self, scope: CheckpointedStateScope) -> Any:
        stream = super().create_checkpoint_state_output_stream(scope)
        stream.__class__ = _CountedStream
        stream.number = self.__dict__["streams"] = self.__dict__.get("streams", 0) + 1
        return stream


_CountingStorage = _with_checkpoint_locations(_CountingLocation)


# 5. A failed checkpoint's `dispose_on_failure` deletes the job's shared directory with its own: the completed
# checkpoints before it lose the shared state they reference.
class _WideDisposeLocation(CheckpointStorageLocationImpl):
    def dispose_on_failure(self) -> None:
        discard_checkpoint_directory(self.shared_dir)
        super().dispose_on_failure()


_WideDisposeStorage = _with_checkpoint_locations(_WideDisposeLocation)


# 6. A savepoint's shared-scope state goes to the job's shared directory, as a checkpoint's does: the savepoint is
# not self-contained, and moved elsewhere it loses that state.
def _savepoint_shared_in_job_dir(access: Any) -> None:
    original = access.initialize_location_for_savepoint

    def initialize(checkpoint_id: int, target: str | None = None) -> Any:
        location = original(checkpoint_id, target)
        location.shared_dir = access.shared_dir
        return location

    access.initialize_location_for_savepoint = initialize


_SavepointSharedInJob = _with_access(_savepoint_shared_in_job_dir)


# 7. A failed checkpoint's `dispose_on_failure` deletes the job's task-owned directory with its own, as if the
# checkpoint owned it: state the tasks own (and reference from later checkpoints) is lost.
class _DisposesTaskOwnedLocation(CheckpointStorageLocationImpl):
    def dispose_on_failure(self) -> None:
        discard_checkpoint_directory(join_url(paths.parent_url(self.shared_dir), TASK_OWNED_STATE_DIR))
        super().dispose_on_failure()


_DisposesTaskOwnedStorage = _with_checkpoint_locations(_DisposesTaskOwnedLocation)


# 22. A failed savepoint's `dispose_on_failure` deletes its target directory, taken for the savepoint's own: every
# other savepoint there, and the user's files, go with it (CS-6).
class _DisposesSavepointTargetLocation(CheckpointStorageLocationImpl):
    def dispose_on_failure(self) -> None:
        discard_checkpoint_directory(paths.parent_url(self.directory))


def _savepoint_disposes_target(access: Any) -> None:
    original = access.initialize_location_for_savepoint

    def initialize(checkpoint_id: int, target: str | None = None) -> Any:
        location = original(checkpoint_id, target)
        location.__class__ = _DisposesSavepointTargetLocation
        return location

    access.initialize_location_for_savepoint = initialize


_SavepointDisposesTarget = _with_access(_savepoint_disposes_target)


def _savepoints_at(directory: Any) -> Any:
    """A storage access patch: savepoint locations at `directory(access, checkpoint_id, target)` (its shared-scope
    state inside, as SP-4 wants), instead of a new `savepoint-<job>-<random>` directory under the target."""

    def patch(access: Any) -> None:
        def initialize(checkpoint_id: int, target: str | None = None) -> Any:
            where = directory(access, checkpoint_id, target)
            return CheckpointStorageLocationImpl(checkpoint_id, where, where, access._threshold, access._max_state_size)

        access.initialize_location_for_savepoint = initialize

    return patch


# 8. A savepoint without a target goes under the job's checkpoint directory, the default savepoint directory
# ignored: whatever cleans up the job's checkpoints takes it along (CS-2, SP-2).
_SavepointInJobDir = _with_access(
    _savepoints_at(
        lambda access, checkpoint_id, target: join_url(
            target or access.job_dir, f"savepoint-{access.job_id[:6]}-{checkpoint_id:012x}"
        )
    )
)


# 9. A savepoint without a target or a default savepoint directory goes to the checkpoint directory instead of
# failing with IllegalConfigurationError (CS-2).
def _fall_back_to_checkpoint_dir(access: Any) -> None:
    original = access.initialize_location_for_savepoint

    def initialize(checkpoint_id: int, target: str | None = None) -> Any:
        if target is None and access.default_savepoint_dir is None:
            target = access.job_dir
        return original(checkpoint_id, target)

    access.initialize_location_for_savepoint = initialize


_SavepointFallsBack = _with_access(_fall_back_to_checkpoint_dir)


# 10. Savepoint directories named by the job alone: a job's second savepoint at one target lands in its first
# one's directory (CS-2).
_OneSavepointDirectory = _with_access(
    _savepoints_at(
        lambda access, checkpoint_id, target: join_url(
            target or access.default_savepoint_dir, f"savepoint-{access.job_id[:6]}-000000000000"
        )
    )
)


# 11. A checkpoint's shared-scope state written into its own directory: subsuming the checkpoint deletes state that
# later incremental checkpoints reference (CS-3).
class _SharedInOwnDirectoryLocation(CheckpointStorageLocationImpl):
    def create_checkpoint_state_output_stream(self, scope: CheckpointedStateScope) -> Any:
        return super().create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE)


_SharedInOwnDirectory = _with_checkpoint_locations(_SharedInOwnDirectoryLocation)


# 12. Task-owned state written under the job's first checkpoint's directory: subsuming that checkpoint deletes it
# (CS-3).
def _task_owned_in_first_checkpoint(access: Any) -> None:
    access.create_task_owned_state_stream = lambda: CheckpointStateOutputStreamImpl(
        join_url(access.job_dir, "chk-1"), access._threshold, access._max_state_size
    )


_TaskOwnedInFirstCheckpoint = _with_access(_task_owned_in_first_checkpoint)


# 13. Pointers resolve only as directories: a checkpoint named by its `_metadata` file, as Flink users pass it, is
# reported incomplete (FMT-5).
class _DirectoryPointersOnly(FileSystemCheckpointStorage):
    def resolve_checkpoint(self, pointer: str) -> CompletedCheckpointLocation:
        url = pointer.rstrip("/")
        fs, path = fsspec.core.url_to_fs(url)
        if fs.isfile(f"{path}/{METADATA_FILE_NAME}"):
            return CompletedCheckpointLocation(join_url(url, METADATA_FILE_NAME), url)
        if fs.exists(path):
            raise IncompleteCheckpointError(f"{url}: no {METADATA_FILE_NAME}")
        raise CheckpointNotFoundError(f"{url}: no such checkpoint")


def _resolving_as(reported: type[Exception], instead: type[Exception]) -> Any:
    """The file-system storage whose `resolve_checkpoint` reports `reported` as `instead`."""

    class Storage(FileSystemCheckpointStorage):
        def resolve_checkpoint(self, pointer: str) -> CompletedCheckpointLocation:
            try:
                return super().resolve_checkpoint(pointer)
            except reported as exc:
                raise instead(str(exc)) from None

    return Storage


# 14. A path with nothing there is reported as an incomplete checkpoint, not as one not found (FMT-5).
_MissingIsIncomplete = _resolving_as(CheckpointNotFoundError, IncompleteCheckpointError)


# 15. A directory without `_metadata` is reported as not found, not as an incomplete checkpoint (FMT-5).
_IncompleteIsMissing = _resolving_as(IncompleteCheckpointError, CheckpointNotFoundError)


# 16. Stream files named by a counter per storage access: every task of a job has its own access (and a restarted
# job a new one), so a second access's first shared or task-owned file replaces the first access's (CS-4).
def _every_stream(access: Any, adopt: Callable[[Any], Any]) -> None:
    """Passes every stream the storage access and its checkpoint locations create through `adopt`."""
    create_location, create_task_owned = (
        access.initialize_location_for_checkpoint,
        access.create_task_owned_state_stream,
    )

    def initialize(checkpoint_id: int) -> Any:
        location = create_location(checkpoint_id)
        create_stream = location.create_checkpoint_state_output_stream
        location.create_checkpoint_state_output_stream = lambda scope: adopt(create_stream(scope))
        return location

    access.initialize_location_for_checkpoint = initialize
    access.create_task_owned_state_stream = lambda: adopt(create_task_owned())


def _count_streams_per_access(access: Any) -> None:
    streams = 0

    def numbered(stream: Any) -> Any:
        nonlocal streams
        streams += 1
        stream.__class__, stream.number = _CountedStream, streams
        return stream

    _every_stream(access, numbered)


_CountingPerAccess = _with_access(_count_streams_per_access)


# 23. Stream files named `state-<n>` by the first n whose file does not exist yet: unique one stream after another,
# across storage accesses and restarts too, but two streams spilling to a file at once (two checkpoints of one task
# whose asynchronous parts run side by side, as Flink's task thread pool runs them) both find the same name free,
# and the later writer's bytes replace the earlier's (CS-4).
class _FirstFreeNameStream(CheckpointStateOutputStreamImpl):
    def _spill(self) -> None:
        fs, directory = fsspec.core.url_to_fs(self._directory)
        number = 0
        while fs.exists(f"{directory}/state-{number}"):
            number += 1
        self._path = join_url(self._directory, f"state-{number}")
        self._file = fsspec.open(self._path, "wb", auto_mkdir=True).open()
        self._file.write(self._buffer.getvalue())
        self._buffer = io.BytesIO()


def _named_by_first_free_name(stream: Any) -> Any:
    stream.__class__ = _FirstFreeNameStream
    return stream


_FirstFreeNames = _with_access(lambda access: _every_stream(access, _named_by_first_free_name))


# 19. A `_metadata` reader that takes the payload's checksum on trust: a changed byte is read as another checkpoint
# (here: other inline state bytes) instead of refused (FMT-8, FMT-2).
class _MetadataChecksumIgnored(FileSystemCheckpointStorage):
    def load_checkpoint(self, pointer: str) -> Any:
        location = self.resolve_checkpoint(pointer)
        with fsspec.open(location.metadata_path, "rb") as f:
            data = bytearray(f.read())
        if len(data) >= 16:
            (length,) = struct.unpack_from(">Q", data, 8)
            if len(data) == 20 + length:  # the checksum recomputed, whatever the payload became
                data[16 + length :] = struct.pack(">I", zlib.crc32(bytes(data[16 : 16 + length])))
        return metadata_codec.decode_metadata(bytes(data), location.metadata_path, location.directory)


# 20. `dispose_on_failure` removes the checkpoint's directory as if it must exist: a checkpoint aborted before any
# task wrote to it, or disposed twice, fails its abort with FileNotFoundError (CS-6).
class _DisposeExpectsDirectory(CheckpointStorageLocationImpl):
    def dispose_on_failure(self) -> None:
        fs, directory = fsspec.core.url_to_fs(self.directory)
        fs.rm(directory, recursive=True)


_DisposeExpectsDirectoryStorage = _with_checkpoint_locations(_DisposeExpectsDirectory)


# 21. `_metadata` written to a temporary file and then copied into place, as a file system without a rename would: a
# failure during the copy leaves a torn `_metadata` that looks complete (FMT-7).
class _CopiesMetadataIntoPlace(CheckpointStorageLocationImpl):
    def write_metadata(self, metadata: Any) -> str:
        fs, directory = fsspec.core.url_to_fs(self.directory)
        final, temporary = (f"{directory.rstrip('/')}/{name}" for name in (METADATA_FILE_NAME, ".metadata.inprogress"))
        if fs.exists(final):
            raise StateCertError(f"{self.directory}: refusing to overwrite an existing {METADATA_FILE_NAME}")
        fs.makedirs(directory, exist_ok=True)
        with fs.open(temporary, "wb") as out:
            out.write(encode_metadata(metadata, self.directory))
        try:
            fs.copy(temporary, final)
        finally:
            fs.rm_file(temporary)
        return self.pointer


_CopiesMetadataStorage = _with_checkpoint_locations(_CopiesMetadataIntoPlace)


@dataclasses.dataclass(frozen=True)
class _RewritesDirectories(FileSystemCheckpointStorage):
    """The file-system storage whose checkpoint and savepoint directory URLs are first rewritten by `rewrite`."""

    @staticmethod
    def rewrite(url: str) -> str:
        return url

    def __post_init__(self) -> None:
        for name in ("checkpoint_dir", "savepoint_dir"):
            url = getattr(self, name)
            if url is not None:
                object.__setattr__(self, name, self.rewrite(url))
        super().__post_init__()


# 24. Directory URLs cut at `#` and `?`, as a URL parser reads a fragment and a query: a checkpoint directory named
# `a#b` is written as `a`, a sibling directory holding another job's or the user's files (CS-1).
@dataclasses.dataclass(frozen=True)
class _DirectoriesCutAtHash(_RewritesDirectories):
    @staticmethod
    def rewrite(url: str) -> str:
        return url.split("#", 1)[0].split("?", 1)[0]


# 25. Directory URLs percent-decoded, as a URL parser would: a checkpoint directory named `a%20b` is written as `a b`,
# another directory (CS-1).
@dataclasses.dataclass(frozen=True)
class _PercentDecodedDirectories(_RewritesDirectories):
    @staticmethod
    def rewrite(url: str) -> str:
        return urllib.parse.unquote(url)


# 26. A failed checkpoint's directory emptied through `glob`, which takes `*`, `?` and `[...]` in the directory's own
# name as patterns: under a checkpoint directory `a*b`, disposing checkpoint 3 deletes `aXb/job/chk-3/`'s files too
# (CS-6; fsspec's own `rm` does the same on every file system but the local one).
class _DisposesByGlob(CheckpointStorageLocationImpl):
    def dispose_on_failure(self) -> None:
        fs, directory = fsspec.core.url_to_fs(self.directory)
        for path in fs.glob(f"{directory.rstrip('/')}/*"):
            fs.rm(path, recursive=True)
        if fs.exists(directory):
            fs.rmdir(directory)


class WriteBufferedStream(CheckpointStateOutputStreamImpl):
    """A write buffer of 4,096 bytes over the reference stream, written as Flink's `FsCheckpointStateOutputStream`
    writes its own (`execution.checkpointing.write-buffer-size`). Correct as it is (the lenient storage of
    `tests/lenient_backends.py` uses it); the two broken storages below get one step wrong."""

    buffer_size = 4096

    def _pending(self) -> bytearray:
        pending: bytearray = self.__dict__.setdefault("pending", bytearray())  # the class swap runs no __init__
        return pending

    def write(self, data: bytes | bytearray | memoryview) -> int:
        data, pending = bytes(data), self._pending()
        written = len(data)
        if written >= self.buffer_size:
            self.write_past_buffer(data)
            return written
        remaining = self.buffer_size - len(pending)
        if written > remaining:  # fill the buffer, flush it, buffer the rest
            pending += data[:remaining]
            self.flush_pending()
            data = self.rest(data, remaining)
        pending += data
        return written

    def write_past_buffer(self, data: bytes) -> None:
        """A write as large as the buffer or larger: the buffered bytes first, then the write itself."""
        self.flush_pending()
        super().write(data)

    def rest(self, data: bytes, remaining: int) -> bytes:
        """What of `data` is left once its first `remaining` bytes filled the buffer."""
        return data[remaining:]

    def flush_pending(self) -> None:
        pending = self._pending()
        if pending:
            super().write(bytes(pending))
            pending.clear()

    def tell(self) -> int:
        return super().tell() + len(self._pending())

    def close_and_get_handle(self) -> Any:
        if not self._closed:
            self.flush_pending()
        return super().close_and_get_handle()


# 27. A write as large as the write buffer or larger goes straight to the file without flushing the bytes buffered
# before it: they land after it (CS-4). The suite wrote streams in chunks of 4,096 bytes, each one past the buffer
# when the buffer was empty.
class _LargeWritesOvertakeBuffer(WriteBufferedStream):
    def write_past_buffer(self, data: bytes) -> None:
        CheckpointStateOutputStreamImpl.write(self, data)


# 28. A write that fills the buffer past its end flushes the buffer and then buffers the write's first bytes again,
# not its rest: the offset into the write is never advanced, as a `System.arraycopy` with a stale offset (CS-4).
class _OverflowRestFromStart(WriteBufferedStream):
    def rest(self, data: bytes, remaining: int) -> bytes:
        return data[: len(data) - remaining]


# 29. Job-manager storage refusing a stream of exactly its maximum state size, as a `>=` where Flink's
# `MemCheckpointStreamFactory.checkSize` has `>` (CS-7). The suite wrote one byte more than the limit, never the limit.
class _LimitInclusiveStream(CheckpointStateOutputStreamImpl):
    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self._max_size is not None and self._pos + len(data) >= self._max_size:
            self.discard()
            raise StateSizeLimitError(f"state reaches the maximum state size of {self._max_size} bytes")
        return super().write(data)


class _LimitInclusiveJobManager(JobManagerCheckpointStorage):
    def create_checkpoint_storage(self, job_id: str) -> Any:
        access = super().create_checkpoint_storage(job_id)
        _every_stream(access, _adopting(_LimitInclusiveStream))
        return access


# 30. The inline threshold read as KiB where it is bytes (the configured 20 KiB taken as 20 MiB): every stream of up to
# 20 MiB goes into `_metadata`, which every restore reads whole (CS-10). Every stream the suite wrote read back.
class _ThresholdInKiB(FileSystemCheckpointStorage):
    def create_checkpoint_storage(self, job_id: str) -> Any:
        access = super().create_checkpoint_storage(job_id)
        access._threshold *= 1024
        return access


# 31. `_metadata`'s header (magic number and version, FMT-1) written and read little-endian: the storage reads its own
# checkpoints and savepoints, and no other storage reads them (CS-11). Every test read back through the same storage.
def _swap_header(data: bytes) -> bytes:
    return struct.pack("<II", *struct.unpack(">II", data[:8])) + data[8:] if len(data) >= 8 else data


class _LittleEndianHeaderLocation(CheckpointStorageLocationImpl):
    def metadata_bytes(self, metadata: CheckpointMetadata) -> bytes:
        return _swap_header(super().metadata_bytes(metadata))


def _little_endian_locations(initialize: Callable[..., Any]) -> Callable[..., Any]:
    def little_endian(*args: Any, **kwargs: Any) -> Any:
        location = initialize(*args, **kwargs)
        location.__class__ = _LittleEndianHeaderLocation
        return location

    return little_endian


class _LittleEndianHeader(FileSystemCheckpointStorage):
    def create_checkpoint_storage(self, job_id: str) -> Any:
        access = super().create_checkpoint_storage(job_id)
        for name in ("initialize_location_for_checkpoint", "initialize_location_for_savepoint"):
            setattr(access, name, _little_endian_locations(getattr(access, name)))
        return access

    def load_checkpoint(self, pointer: str) -> Any:
        location = self.resolve_checkpoint(pointer)
        with fsspec.open(location.metadata_path, "rb") as f:
            data = f.read()
        return metadata_codec.decode_metadata(_swap_header(data), location.metadata_path, location.directory)


# 32. Each job's directory named by the first 8 characters of its id, as a storage shortening Flink's 32-hex-digit job
# ids for shorter paths might: two jobs whose ids share those characters write the same checkpoint directories, and
# one job's subsumption or disposal deletes the other's checkpoints (CS-2). The contract's job ids ("job-a",
# "job-b") were shorter than any prefix a storage would keep.
class _JobDirectoriesByPrefix(FileSystemCheckpointStorage):
    def create_checkpoint_storage(self, job_id: str) -> Any:
        return super().create_checkpoint_storage(job_id[:8])


# 33. A savepoint target taken as a path on the checkpoint directory's file system, as a storage opening every path
# through the one file system it made for its checkpoints does: a savepoint to `memory://x` beside checkpoints on
# `file://` goes to the local `/x` (CS-2, CS-1). Every target the contract gave lay beside the checkpoint directory.
class _SavepointsOnCheckpointFileSystem(FileSystemCheckpointStorage):
    def create_checkpoint_storage(self, job_id: str) -> Any:
        access = super().create_checkpoint_storage(job_id)
        original, protocol = access.initialize_location_for_savepoint, split_url(str(self.checkpoint_dir))[0]

        def initialize(checkpoint_id: int, target: str | None = None) -> Any:
            return original(checkpoint_id, None if target is None else f"{protocol}://{split_url(target)[1]}")

        access.initialize_location_for_savepoint = initialize
        return access


# 34. `_metadata` written by an encoder of the storage's own that leaves out the trigger timestamp: every checkpoint
# reads back as triggered at 0, through this storage and any other reader (FMT-4). The contract's metadata all had the
# default timestamp 0, so a round trip of it could not tell.
class _MetadataWithoutTimestampLocation(CheckpointStorageLocationImpl):
    def metadata_bytes(self, metadata: Any) -> bytes:
        return encode_metadata(dataclasses.replace(metadata, timestamp_ms=0), self.directory)


_MetadataWithoutTimestamp = _with_checkpoint_locations(_MetadataWithoutTimestampLocation)


# 35. A stream computing its checksum on the writes to its file, but not on the bytes it buffered in memory before
# spilling them there: the handle's CRC-32C covers only what came after the spill (CS-9). Such a stream keeps state of
# up to the inline threshold in memory and writes it out once more arrives.
class _ChecksumSkipsSpilledBufferStream(CheckpointStateOutputStreamImpl):
    def _spill(self) -> None:
        super()._spill()
        self._crc = 0


# 36. Checkpoints resolve only under the storage's own checkpoint directory (savepoints anywhere): a job started from
# a retained checkpoint of another job, or of its own before its directory changed, finds nothing there (FMT-5).
class _OwnCheckpointsOnly(FileSystemCheckpointStorage):
    def resolve_checkpoint(self, pointer: str) -> CompletedCheckpointLocation:
        location = super().resolve_checkpoint(pointer)
        own = fsspec.core.url_to_fs(str(self.checkpoint_dir))[1].rstrip("/") + "/"
        directory = fsspec.core.url_to_fs(location.directory)[1]
        if directory.rsplit("/", 1)[-1].startswith("chk-") and not directory.startswith(own):
            raise CheckpointNotFoundError(f"{pointer}: no checkpoint of this storage")
        return location

    def load_checkpoint(self, pointer: str) -> CheckpointMetadata:
        self.resolve_checkpoint(pointer)
        return super().load_checkpoint(pointer)


# 37. A savepoint's location sends the default reference, as a checkpoint's does: the tasks resolve it to checkpoint
# N's directory in the job's checkpoint directory and write the savepoint's state there, where retention deletes it
# (CS-12).
def _savepoint_reference_is_default(access: Any) -> None:
    original = access.initialize_location_for_savepoint

    def initialize(checkpoint_id: int, target: str | None = None) -> Any:
        location = original(checkpoint_id, target)
        location._reference = DEFAULT_LOCATION_REFERENCE
        return location

    access.initialize_location_for_savepoint = initialize


# 38. Every reference resolved to the storage's own location of the checkpoint id, the encoded savepoint directory
# ignored: a task writes a savepoint's state into the job's checkpoint directory (CS-13).
def _resolves_every_reference_by_id(access: Any) -> None:
    access.resolve_checkpoint_storage_location = lambda checkpoint_id, reference: (
        access.initialize_location_for_checkpoint(checkpoint_id)
    )


# 39. Job-manager storage keeping checkpoints in the process's memory:// while saying it is highly available: a job
# recovered by a new process finds none of them (CS-14).
class _MemoryClaimsHighAvailability(JobManagerCheckpointStorage):
    def create_checkpoint_storage(self, job_id: str) -> Any:
        access = dataclasses.replace(self, checkpoint_dir=None).create_checkpoint_storage_in_memory(job_id)
        access._highly_available = True
        return access

    def create_checkpoint_storage_in_memory(self, job_id: str) -> Any:
        return JobManagerCheckpointStorage.create_checkpoint_storage(self, job_id)


# 40. A storage answering that it has no default savepoint location whatever its configuration, as one reading only
# the 1.x key `state.savepoints.dir` would (CS-15).
def _no_default_savepoint_location(access: Any) -> None:
    access.has_default_savepoint_location = lambda: False


# 41. Base locations initialized by deleting what is there and creating the directories anew: a restarted
# coordinator wipes the shared and task-owned state the retained checkpoints reference (CS-16).
def _base_locations_created_anew(access: Any) -> None:
    def initialize() -> None:
        for directory in (access.shared_dir, access.task_owned_dir):
            fs, path = fsspec.core.url_to_fs(directory)
            if fs.exists(path):
                fs.rm(path, recursive=True)
            fs.makedirs(path, exist_ok=True)

    access.initialize_base_locations = initialize


# 42. A discarded stream still hands out a handle when asked: of the bytes left in its buffer after it spilled (none),
# so a task that discards and then closes registers an empty inline handle for 50,000 bytes (CS-6).
class _HandleAfterDiscardStream(CheckpointStateOutputStreamImpl):
    def discard(self) -> None:
        super().discard()
        self._closed = False


# 43. A closed stream closes again and gives a second handle to the same bytes (CS-4): two handles, two owners of one
# file.
class _SecondHandleStream(CheckpointStateOutputStreamImpl):
    def close_and_get_handle(self) -> Any:
        self._closed = False
        return super().close_and_get_handle()


# 44. `_metadata` written to a temporary name and moved into place, with nothing deleted when the write fails: the
# partial temporary file stays in the checkpoint's directory (FMT-7).
class _TempLeftLocation(CheckpointStorageLocationImpl):
    def write_metadata(self, metadata: Any) -> str:
        fs, directory = fsspec.core.url_to_fs(self.directory)
        fs.makedirs(directory, exist_ok=True)
        temp = f"{directory.rstrip('/')}/.{METADATA_FILE_NAME}.inprogress"
        with fs.open(temp, "wb") as out:
            out.write(encode_metadata(metadata, self.directory))
        fs.mv(temp, f"{directory.rstrip('/')}/{METADATA_FILE_NAME}")
        return self.pointer


# 45. Job-manager storage whose stream, past its maximum state size, raises and keeps its bytes: asked for its handle
# after the error, it returns the over-size state inline (CS-7).
class _KeepsOversizeStream(CheckpointStateOutputStreamImpl):
    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self._max_size is not None and self._pos + len(data) > self._max_size:
            self._buffer.write(data)
            self._pos += len(data)
            raise StateSizeLimitError(f"state exceeds the maximum state size of {self._max_size} bytes")
        return super().write(data)


class _KeepsOversizeJobManager(JobManagerCheckpointStorage):
    def create_checkpoint_storage(self, job_id: str) -> Any:
        access = super().create_checkpoint_storage(job_id)
        _every_stream(access, _adopting(_KeepsOversizeStream))
        return access


def _adopting(stream_class: type[CheckpointStateOutputStreamImpl]) -> Callable[[Any], Any]:
    def adopt(stream: Any) -> Any:
        stream.__class__ = stream_class
        return stream

    return adopt


def _with_streams(stream_class: type[CheckpointStateOutputStreamImpl]) -> Any:
    """The file-system storage whose every stream (checkpoint scopes and task-owned) behaves as `stream_class`."""
    return _with_access(lambda access: _every_stream(access, _adopting(stream_class)))


def metadata_in_place(config: Mapping[str, object]) -> Any:
    return _InPlaceStorage.from_config(config)


def ignores_max_state_size(config: Mapping[str, object]) -> Any:
    return _UnboundedJobManager.from_config(config)


def follows_paths_outside(config: Mapping[str, object]) -> Any:
    return _FollowsAnyPath.from_config(config)


def files_named_by_counter(config: Mapping[str, object]) -> Any:
    return _CountingStorage.from_config(config)


def dispose_deletes_shared(config: Mapping[str, object]) -> Any:
    return _WideDisposeStorage.from_config(config)


def savepoint_shared_in_job_dir(config: Mapping[str, object]) -> Any:
    return _SavepointSharedInJob.from_config(config)


def dispose_deletes_task_owned(config: Mapping[str, object]) -> Any:
    return _DisposesTaskOwnedStorage.from_config(config)


def savepoint_in_job_dir(config: Mapping[str, object]) -> Any:
    return _SavepointInJobDir.from_config(config)


def savepoint_without_directory_falls_back(config: Mapping[str, object]) -> Any:
    return _SavepointFallsBack.from_config(config)


def one_savepoint_directory_per_job(config: Mapping[str, object]) -> Any:
    return _OneSavepointDirectory.from_config(config)


def shared_state_in_checkpoint_dir(config: Mapping[str, object]) -> Any:
    return _SharedInOwnDirectory.from_config(config)


def task_owned_in_checkpoint_dir(config: Mapping[str, object]) -> Any:
    return _TaskOwnedInFirstCheckpoint.from_config(config)


def resolves_directories_only(config: Mapping[str, object]) -> Any:
    return _DirectoryPointersOnly.from_config(config)


def missing_reported_incomplete(config: Mapping[str, object]) -> Any:
    return _MissingIsIncomplete.from_config(config)


def incomplete_reported_missing(config: Mapping[str, object]) -> Any:
    return _IncompleteIsMissing.from_config(config)


def files_named_by_counter_per_access(config: Mapping[str, object]) -> Any:
    return _CountingPerAccess.from_config(config)


def files_named_by_first_free_name(config: Mapping[str, object]) -> Any:
    return _FirstFreeNames.from_config(config)


def follows_absolute_paths(config: Mapping[str, object]) -> Any:
    return _FollowsAbsolutePaths.from_config(config)


def follows_symbolic_links(config: Mapping[str, object]) -> Any:
    return _FollowsSymbolicLinks.from_config(config)


def metadata_checksum_ignored(config: Mapping[str, object]) -> Any:
    return _MetadataChecksumIgnored.from_config(config)


def dispose_expects_directory(config: Mapping[str, object]) -> Any:
    return _DisposeExpectsDirectoryStorage.from_config(config)


def metadata_copied_into_place(config: Mapping[str, object]) -> Any:
    return _CopiesMetadataStorage.from_config(config)


def savepoint_dispose_deletes_target(config: Mapping[str, object]) -> Any:
    return _SavepointDisposesTarget.from_config(config)


def directories_cut_at_hash(config: Mapping[str, object]) -> Any:
    return _DirectoriesCutAtHash.from_config(config)


def directories_percent_decoded(config: Mapping[str, object]) -> Any:
    return _PercentDecodedDirectories.from_config(config)


def disposes_by_glob(config: Mapping[str, object]) -> Any:
    return _with_checkpoint_locations(_DisposesByGlob).from_config(config)


def large_writes_overtake_buffer(config: Mapping[str, object]) -> Any:
    return _with_streams(_LargeWritesOvertakeBuffer).from_config(config)


def overflow_rest_from_start(config: Mapping[str, object]) -> Any:
    return _with_streams(_OverflowRestFromStart).from_config(config)


def limit_inclusive(config: Mapping[str, object]) -> Any:
    return _LimitInclusiveJobManager.from_config(config)


def inline_threshold_in_kib(config: Mapping[str, object]) -> Any:
    return _ThresholdInKiB.from_config(config)


def little_endian_metadata_header(config: Mapping[str, object]) -> Any:
    return _LittleEndianHeader.from_config(config)


def job_directories_by_prefix(config: Mapping[str, object]) -> Any:
    return _JobDirectoriesByPrefix.from_config(config)


def savepoints_on_checkpoint_file_system(config: Mapping[str, object]) -> Any:
    return _SavepointsOnCheckpointFileSystem.from_config(config)


def metadata_without_timestamp(config: Mapping[str, object]) -> Any:
    return _MetadataWithoutTimestamp.from_config(config)


def checksum_skips_spilled_buffer(config: Mapping[str, object]) -> Any:
    return _with_streams(_ChecksumSkipsSpilledBufferStream).from_config(config)


def own_checkpoints_only(config: Mapping[str, object]) -> Any:
    return _OwnCheckpointsOnly.from_config(config)


def savepoint_reference_is_default(config: Mapping[str, object]) -> Any:
    return _with_access(_savepoint_reference_is_default).from_config(config)


def resolves_every_reference_by_id(config: Mapping[str, object]) -> Any:
    return _with_access(_resolves_every_reference_by_id).from_config(config)


def memory_claims_high_availability(config: Mapping[str, object]) -> Any:
    return _MemoryClaimsHighAvailability.from_config(config)


def no_default_savepoint_location(config: Mapping[str, object]) -> Any:
    return _with_access(_no_default_savepoint_location).from_config(config)


def base_locations_created_anew(config: Mapping[str, object]) -> Any:
    return _with_access(_base_locations_created_anew).from_config(config)


def handle_after_discard(config: Mapping[str, object]) -> Any:
    return _with_streams(_HandleAfterDiscardStream).from_config(config)


def second_handle(config: Mapping[str, object]) -> Any:
    return _with_streams(_SecondHandleStream).from_config(config)


def metadata_temp_left(config: Mapping[str, object]) -> Any:
    return _with_checkpoint_locations(_TempLeftLocation).from_config(config)


def keeps_oversize_stream(config: Mapping[str, object]) -> Any:
    return _KeepsOversizeJobManager.from_config(config)


CAUGHT_BY = {
    "metadata_in_place": "FMT-7",
    "ignores_max_state_size": "CS-7",
    "follows_paths_outside": "FMT-10",
    "files_named_by_counter": "CS-4",
    "dispose_deletes_shared": "CS-6",
    "savepoint_shared_in_job_dir": "FMT-9",
    "dispose_deletes_task_owned": "CS-6",
    "savepoint_in_job_dir": "CS-2",
    "savepoint_without_directory_falls_back": "CS-2",
    "one_savepoint_directory_per_job": "CS-2",
    "shared_state_in_checkpoint_dir": "CS-3",
    "task_owned_in_checkpoint_dir": "CS-3",
    "resolves_directories_only": "FMT-5",
    "missing_reported_incomplete": "FMT-5",
    "incomplete_reported_missing": "FMT-5",
    "files_named_by_counter_per_access": "CS-4",
    "files_named_by_first_free_name": "CS-4",
    "follows_absolute_paths": "FMT-10",
    "follows_symbolic_links": "FMT-10",
    "metadata_checksum_ignored": "FMT-8",
    "dispose_expects_directory": "CS-6",
    "metadata_copied_into_place": "FMT-7",
    "savepoint_dispose_deletes_target": "CS-6",
    "directories_cut_at_hash": "CS-1",
    "directories_percent_decoded": "CS-1",
    "disposes_by_glob": "CS-6",
    "large_writes_overtake_buffer": "CS-4",
    "overflow_rest_from_start": "CS-4",
    "limit_inclusive": "CS-7",
    "inline_threshold_in_kib": "CS-10",
    "little_endian_metadata_header": "CS-11",
    "job_directories_by_prefix": "CS-2",
    "savepoints_on_checkpoint_file_system": "CS-2",
    "metadata_without_timestamp": "FMT-4",
    "checksum_skips_spilled_buffer": "CS-9",
    "own_checkpoints_only": "FMT-5",
    "savepoint_reference_is_default": "CS-12",
    "resolves_every_reference_by_id": "CS-13",
    "memory_claims_high_availability": "CS-14",
    "no_default_savepoint_location": "CS-15",
    "base_locations_created_anew": "CS-16",
    "handle_after_discard": "CS-6",
    "second_handle": "CS-4",
    "metadata_temp_left": "FMT-7",
    "keeps_oversize_stream": "CS-7",
}
