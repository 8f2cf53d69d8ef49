"""Checkpoint storage (chapter CS, SP-2, SP-4)."""

from __future__ import annotations

import uuid
from typing import Any

import crc32c
import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from statecert.reference.format.paths import is_within, join_url
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.jobmanager import JobManagerCheckpointStorage
from statecert.spec.errors import IllegalConfigurationError, StateSizeLimitError
from statecert.spec.handles import ByteStreamStateHandle, FileStateHandle
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata
from statecert.spec.storage import (
    CheckpointedStateScope,
    CheckpointStorageLocationReference,
    encode_path_as_reference,
)


def _exists(url: str) -> bool:
    fs, path = fsspec.core.url_to_fs(url)
    return bool(fs.exists(path))


@pytest.mark.requirement("CS-1", "CS-4", "CS-5", "CS-FS-3", "CS-9")
@pytest.mark.parametrize("size", [0, 1, 20 * 1024, 20 * 1024 + 1, 300_000])
def test_stream_reads_back_inline_or_as_file(storage: Any, size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    with location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        for i in range(0, size, 7000):
            out.write(payload[i : i + 7000])
        handle = out.close_and_get_handle()
    if size == 0:
        assert handle is None
        return
    expected_type = ByteStreamStateHandle if size <= 20 * 1024 else FileStateHandle
    assert isinstance(handle, expected_type), f"{size} bytes gave {type(handle).__name__}"
    if isinstance(handle, FileStateHandle):  # the reference storage always records the checksum (CS-9)
        assert handle.checksum == crc32c.crc32c(payload) and handle.size == size
    with handle.open() as f:
        assert f.read() == payload


@pytest.mark.requirement("CS-FS-1", "CS-3")
def test_file_system_layout(storage: Any, checkpoint_dir: str) -> None:
    access = storage.create_checkpoint_storage("job-7")
    location = access.initialize_location_for_checkpoint(3)
    assert location.pointer == join_url(checkpoint_dir, "job-7", "chk-3")
    handles = {}
    for scope in CheckpointedStateScope:
        out = location.create_checkpoint_state_output_stream(scope)
        out.write(b"x" * 30_000)
        handles[scope] = out.close_and_get_handle()
    task_owned = access.create_task_owned_state_stream()
    task_owned.write(b"y" * 30_000)
    owned = task_owned.close_and_get_handle()
    assert handles[CheckpointedStateScope.EXCLUSIVE].path.startswith(join_url(checkpoint_dir, "job-7", "chk-3") + "/")
    assert handles[CheckpointedStateScope.SHARED].path.startswith(join_url(checkpoint_dir, "job-7", "shared") + "/")
    assert owned.path.startswith(join_url(checkpoint_dir, "job-7", "taskowned") + "/")


@pytest.mark.requirement("CS-FS-2", "SP-2", "SP-4", "CS-2")
def test_savepoint_location_is_self_contained_and_outside_checkpoints(storage: Any, checkpoint_dir: str) -> None:
    access = storage.create_checkpoint_storage("abcdef123456")
    location = access.initialize_location_for_savepoint(9)
    assert location.pointer.startswith(join_url(storage.savepoint_dir, "savepoint-abcdef-"))
    assert not is_within(location.pointer, access.job_dir)
    out = location.create_checkpoint_state_output_stream(CheckpointedStateScope.SHARED)
    out.write(b"z" * 30_000)
    handle = out.close_and_get_handle()
    assert is_within(handle.path, location.pointer), "shared state of a savepoint must lie in its directory"
    explicit = access.initialize_location_for_savepoint(10, target=f"{checkpoint_dir}-elsewhere")
    assert explicit.pointer.startswith(f"{checkpoint_dir}-elsewhere/savepoint-abcdef-")


@pytest.mark.requirement("CS-2")
def test_savepoint_without_any_target_is_a_configuration_error() -> None:
    access = JobManagerCheckpointStorage().create_checkpoint_storage("job")
    with pytest.raises(IllegalConfigurationError, match=r"execution\.checkpointing\.savepoint-dir: no savepoint"):
        access.initialize_location_for_savepoint(1)


@pytest.mark.requirement("CS-JM-1", "CS-JM-3")
def test_job_manager_storage_inlines_everything_in_memory() -> None:
    storage = JobManagerCheckpointStorage()
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    assert location.pointer.startswith("memory://")
    out = location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE)
    out.write(b"q" * 1_000_000)
    handle = out.close_and_get_handle()
    assert isinstance(handle, ByteStreamStateHandle) and handle.size == 1_000_000
    pointer = location.write_metadata(CheckpointMetadata(1, ()))
    assert storage.load_checkpoint(pointer) == CheckpointMetadata(1, ())


@pytest.mark.requirement("CS-JM-2")
def test_job_manager_storage_enforces_max_state_size() -> None:
    location = (
        JobManagerCheckpointStorage(max_state_size=1000)
        .create_checkpoint_storage("j")
        .initialize_location_for_checkpoint(1)
    )
    out = location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE)
    out.write(b"x" * 1000)
    with pytest.raises(StateSizeLimitError, match="1001 bytes exceeds the maximum state size of 1000"):
        out.write(b"x")


@pytest.mark.requirement("CS-JM-1")
def test_job_manager_storage_with_directory_is_durable(tmp_path: Any) -> None:
    storage = JobManagerCheckpointStorage(checkpoint_dir=str(tmp_path))
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    pointer = location.write_metadata(CheckpointMetadata(1, (), CheckpointKind.CHECKPOINT))
    assert (tmp_path / "job" / "chk-1" / "_metadata").is_file()
    assert storage.load_checkpoint(pointer).checkpoint_id == 1
    assert _exists(pointer)


def test_memory_urls_are_isolated_per_storage() -> None:
    a = JobManagerCheckpointStorage().create_checkpoint_storage(uuid.uuid4().hex)
    b = JobManagerCheckpointStorage().create_checkpoint_storage(a.job_id)
    assert a.job_dir != b.job_dir, "two non-durable job-manager storages share a directory"


@pytest.mark.requirement("CS-14")
@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda d: JobManagerCheckpointStorage(), False),
        (lambda d: JobManagerCheckpointStorage(checkpoint_dir=f"file://{d}/c"), True),
        (lambda d: FileSystemCheckpointStorage(f"file://{d}/c"), True),
        (lambda d: FileSystemCheckpointStorage(f"memory://statecert-ha-{uuid.uuid4().hex}"), False),
    ],
    ids=["jobmanager in memory", "jobmanager with a directory", "filesystem", "filesystem on memory://"],
)
def test_reference_storages_are_highly_available_as_flinks(tmp_path: Any, make: Any, expected: bool) -> None:
    """Flink's job-manager storage is highly available only with a checkpoint directory, its file-system storage
    always; fsspec's memory:// (no Flink equivalent) ends with the process."""
    got = make(tmp_path).create_checkpoint_storage("job").supports_highly_available_storage()
    assert got is expected, f"CS-14: supports_highly_available_storage(): expected {expected}, got {got}"


@pytest.mark.requirement("CS-16", "CS-FS-1")
def test_file_system_base_locations_are_the_shared_and_task_owned_directories(tmp_path: Any) -> None:
    access = FileSystemCheckpointStorage(f"file://{tmp_path}/c").create_checkpoint_storage("job")
    access.initialize_base_locations()
    for directory in ("shared", "taskowned"):
        assert (tmp_path / "c" / "job" / directory).is_dir(), (
            f"CS-16: initialize_base_locations(): expected the directory job/{directory}, got "
            f"{sorted(p.name for p in (tmp_path / 'c' / 'job').iterdir())}"
        )


@pytest.mark.requirement("CS-13", "CS-JM-1")
def test_job_manager_storage_inlines_whatever_the_reference(tmp_path: Any) -> None:
    """As Flink's, whose `resolveCheckpointStorageLocation` returns its in-memory factory for any reference."""
    access = JobManagerCheckpointStorage(checkpoint_dir=f"file://{tmp_path}/c").create_checkpoint_storage("job")
    for reference in (CheckpointStorageLocationReference.default(), encode_path_as_reference(f"file://{tmp_path}/s")):
        location = access.resolve_checkpoint_storage_location(3, reference)
        with location.create_checkpoint_state_output_stream(CheckpointedStateScope.SHARED) as out:
            out.write(b"x" * 100_000)
            handle = out.close_and_get_handle()
        assert isinstance(handle, ByteStreamStateHandle), (
            f"CS-13, CS-JM-1: a stream of the location resolved from {reference}: expected inline bytes, got {handle}"
        )


class _RecordingMemoryFileSystem(MemoryFileSystem):  # type: ignore[misc]
    """`recmem://`: the in-memory file system, recording every file it deletes, in order."""

    protocol = "recmem"
    store: dict[str, Any] = {}  # its own files, apart from memory://'s
    pseudo_dirs = [""]
    removed: list[str] = []

    def rm_file(self, path: str) -> None:
        type(self).removed.append(self._strip_protocol(path))
        super().rm_file(path)


fsspec.register_implementation("recmem", _RecordingMemoryFileSystem, clobber=True)


@pytest.mark.requirement("FMT-13", "CS-6")
@pytest.mark.parametrize("kind", ["checkpoint", "savepoint"])
def test_a_disposed_location_loses_its_metadata_before_anything_else(kind: str) -> None:
    """`dispose_on_failure` of a location whose `_metadata` was written deletes `_metadata` first: a crash part way
    through then leaves an incomplete checkpoint, never a `_metadata` whose state files are gone (FMT-13)."""
    root = f"recmem://dispose-{uuid.uuid4().hex}"
    storage = FileSystemCheckpointStorage(f"{root}/c", savepoint_dir=f"{root}/sp")
    access = storage.create_checkpoint_storage("job")
    location = (
        access.initialize_location_for_checkpoint(1)
        if kind == "checkpoint"
        else access.initialize_location_for_savepoint(1)
    )
    with location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        out.write(b"x" * 100_000)
        handle = out.close_and_get_handle()
    fs, directory = fsspec.core.url_to_fs(location.pointer)
    fs.pipe_file(f"{directory}/z-left-by-a-task", b"deleted in any order, it would go before _metadata")
    location.write_metadata(
        CheckpointMetadata(
            1, (), CheckpointKind.CHECKPOINT if kind == "checkpoint" else CheckpointKind.SAVEPOINT_CANONICAL
        )
    )
    _RecordingMemoryFileSystem.removed.clear()
    location.dispose_on_failure()
    removed = [p for p in _RecordingMemoryFileSystem.removed if p.startswith(directory)]
    assert removed and removed[0].endswith("/_metadata"), (
        f"FMT-13: dispose_on_failure() of {kind} 1 deleted {removed[:3]} first: expected {directory}/_metadata"
    )
    assert isinstance(handle, FileStateHandle) and not fs.exists(directory), f"CS-6: {directory} is still there"


@pytest.mark.requirement("CS-6")
def test_removing_a_file_removes_it_and_an_absent_one_is_nothing() -> None:
    from statecert.reference.storage.discard import remove_file

    url = f"memory://remove-{uuid.uuid4().hex}/f"
    fs, path = fsspec.core.url_to_fs(url)
    fs.pipe_file(path, b"x")
    remove_file(url)
    assert not fs.exists(path), f"remove_file({url!r}) left the file"
    remove_file(url)  # absent: nothing, no error


@pytest.mark.requirement("CS-5", "CS-10")
@pytest.mark.parametrize(("threshold", "accepted"), [(-1, False), (0, True), (1 << 20, True), ((1 << 20) + 1, False)])
def test_the_inline_threshold_is_taken_from_zero_to_one_mebibyte(tmp_path: Any, threshold: int, accepted: bool) -> None:
    """Flink's `FileSystemCheckpointStorage` takes an inline threshold of 0 to 1 MiB (`MAX_FILE_STATE_THRESHOLD`)."""
    make = lambda: FileSystemCheckpointStorage(tmp_path.as_uri(), file_state_size_threshold=threshold)  # noqa: E731
    if accepted:
        assert make().file_state_size_threshold == threshold
    else:
        with pytest.raises(IllegalConfigurationError, match=str(threshold)):
            make()


@pytest.mark.requirement("LD-2", "CS-5")
def test_a_threshold_set_on_the_storage_wins_over_configuration(tmp_path: Any) -> None:
    storage = FileSystemCheckpointStorage(tmp_path.as_uri(), file_state_size_threshold=100)
    configured = storage.configure({"execution.checkpointing.data-inline-threshold": "200b"})
    location = configured.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    with location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        out.write(b"x" * 150)
        handle = out.close_and_get_handle()
    assert isinstance(handle, FileStateHandle), f"LD-2: a stream of 150 bytes above the set 100 gave {handle!r}"


@pytest.mark.requirement("CS-1")
@pytest.mark.parametrize("kind", ["filesystem", "jobmanager"])
def test_a_bare_local_path_is_taken_as_its_file_url(tmp_path: Any, kind: str) -> None:
    """A directory given as a local path (relative parts, a trailing slash) is the `file://` URL of its absolute
    path: pointers and handles name it one way, whatever way it was given."""
    bare = f"{tmp_path}/a/../c/"
    storage: Any = (
        FileSystemCheckpointStorage(bare, savepoint_dir=bare)
        if kind == "filesystem"
        else JobManagerCheckpointStorage(checkpoint_dir=bare, savepoint_dir=bare)
    )
    expected = f"file://{tmp_path}/c"
    assert (storage.checkpoint_dir, storage.savepoint_dir) == (expected, expected)
    pointer = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1).pointer
    assert pointer.startswith(f"{expected}/job/"), f"CS-1: the pointer {pointer} is not under {expected}"


@pytest.mark.requirement("LD-2")
@pytest.mark.parametrize("kind", ["filesystem", "jobmanager"])
def test_a_storage_is_immutable_once_made(tmp_path: Any, kind: str) -> None:
    """A storage's settings are fixed when it is made (`configure` returns a new one), so an access created from it
    never sees them change."""
    import dataclasses

    storage: Any = (
        FileSystemCheckpointStorage(tmp_path.as_uri()) if kind == "filesystem" else JobManagerCheckpointStorage()
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        storage.checkpoint_dir = "file:///elsewhere"


@pytest.mark.requirement("CS-JM-2")
def test_the_job_manager_storage_holds_5_mib_by_default_and_at_least_one_byte() -> None:
    """Flink's `JobManagerCheckpointStorage`: 5 MiB by default (`DEFAULT_MAX_STATE_SIZE`), any positive maximum."""
    assert JobManagerCheckpointStorage().max_state_size == 5 * 1024 * 1024
    assert JobManagerCheckpointStorage(max_state_size=1).max_state_size == 1
    with pytest.raises(IllegalConfigurationError, match="0"):
        JobManagerCheckpointStorage(max_state_size=0)
