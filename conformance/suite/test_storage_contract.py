"""The checkpoint storage contract (chapters CS and FMT), runnable against any storage: the reference storage a
backend certification uses, or the storage under test (`statecert certify --storage-under-test NAME`)."""

from __future__ import annotations

import hashlib
import os
import struct
import uuid
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import crc32c
import fsspec
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from statecert.conformance.interleaving import Interleaving
from statecert.conformance.metadata_strategies import checkpoint_metadata, inline_streams
from statecert.reference.storage.faulty_fs import InjectedFault, faulty_url
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.spec.errors import (
    CheckpointCorruptedError,
    CheckpointFormatError,
    CheckpointNotFoundError,
    IllegalConfigurationError,
    IncompleteCheckpointError,
    StateCertError,
    StateSizeLimitError,
    UnsafePathError,
)
from statecert.spec.handles import ByteStreamStateHandle, FileStateHandle, KeyGroupsStateHandle
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata, OperatorState, OperatorSubtaskState
from statecert.spec.storage import CheckpointedStateScope

# Two jobs as Flink names them, 32 hex digits, differing only in the last: a storage tells jobs apart by the whole id
# (CS-2), not by a prefix (the savepoint directory's name takes the first 6 digits, CS-FS-2)
JOB_A, JOB_B = "c0ffee" + "0" * 25 + "a", "c0ffee" + "0" * 25 + "b"

pytestmark = pytest.mark.subject("storage")


@pytest.mark.requirement("CS-3", "CS-4")
@pytest.mark.parametrize("scope", list(CheckpointedStateScope))
@pytest.mark.parametrize("size", [1, 1000, 100_000])
def test_every_scope_reads_back_what_was_written(storage: Any, scope: CheckpointedStateScope, size: int) -> None:
    payload = os.urandom(size)
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    with location.create_checkpoint_state_output_stream(scope) as out:
        for i in range(0, size, 4096):
            out.write(payload[i : i + 4096])
        assert out.tell() == size, "CS-3, CS-4: out.tell(): expected size"
        handle = out.close_and_get_handle()
    with handle.open() as f:
        assert f.read() == payload, f"CS-3, CS-4: {scope.value} stream of {size} bytes read back differently"


def _handle_when_asked(out: Any) -> Any:
    """What `close_and_get_handle()` gives a stream that should give nothing more: its handle, or None when it gives
    none or raises (either is nothing)."""
    try:
        return out.close_and_get_handle()
    except Exception:
        return None


@pytest.mark.requirement("CS-4")
@pytest.mark.parametrize("size", [10, 100_000])
def test_a_stream_gives_its_handle_once(storage: Any, size: int) -> None:
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    out = location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE)
    out.write(b"x" * size)
    out.close_and_get_handle()
    again = _handle_when_asked(out)
    assert again is None, (
        f"CS-4: close_and_get_handle() again on a closed stream of {size} bytes: expected an error or None, got a "
        f"second {type(again).__name__}"
    )


WRITE_SIZES = st.one_of(
    st.integers(0, 64),
    st.sampled_from([2**k + d for k in range(10, 18) for d in (-1, 0, 1)]),  # around any buffer's size
    st.integers(0, 100_000),
)


@pytest.mark.requirement("CS-4")
@given(scope=st.sampled_from([*CheckpointedStateScope, "task-owned"]), sizes=st.lists(WRITE_SIZES, max_size=8))
@example(scope=CheckpointedStateScope.EXCLUSIVE, sizes=[1, 4095, 4096, 4097, 100, 70_000, 0, 3])
def test_a_stream_written_in_writes_of_any_sizes_reads_back_its_bytes_in_order(
    storage: Any, scope: CheckpointedStateScope | str, sizes: list[int]
) -> None:
    """Writes smaller than a write buffer, filling it past its end, as large as it, or larger (Flink's is 4,096 bytes,
    `execution.checkpointing.write-buffer-size`), mixed in one stream, with `tell()` after each. A storage declaring
    a maximum state size (CS-7) gets the writes up to it."""
    sizes = _within(sizes, getattr(storage, "max_state_size", None))
    stream = hashlib.shake_128(repr(sizes).encode()).digest(sum(sizes))  # a piece moved or repeated reads differently
    kind = scope if isinstance(scope, str) else scope.value
    out = _stream_of(storage.create_checkpoint_storage(f"job-{uuid.uuid4().hex}"), scope)
    written = 0
    for i, size in enumerate(sizes):
        out.write(stream[written : written + size])
        written += size
        told = out.tell()
        assert told == written, f"CS-4: tell() after writes of {sizes[: i + 1]} bytes: {told}, expected {written}"
    handle = out.close_and_get_handle()
    if handle is None:
        assert written == 0, f"CS-4: close_and_get_handle() gave None after writing {written} bytes in {sizes}"
        return
    with handle.open() as f:
        got = f.read()
    first = next((i for i, (a, b) in enumerate(zip(got, stream, strict=False)) if a != b), min(len(got), written))
    assert got == stream, (
        f"CS-4: a {kind} stream written in writes of {sizes} bytes read back {len(got)} bytes, expected "
        f"{written}; first difference at byte {first}"
    )


def _stream_of(access: Any, scope: CheckpointedStateScope | str) -> Any:
    """A stream of `scope` in checkpoint 1 of the storage access `access`, or its task-owned stream."""
    if scope == "task-owned":
        return access.create_task_owned_state_stream()
    return access.initialize_location_for_checkpoint(1).create_checkpoint_state_output_stream(scope)


def _within(sizes: list[int], limit: int | None) -> list[int]:
    """The first of `sizes` while they add up to at most `limit` (None: no limit), the last one cut to fit."""
    if limit is None:
        return sizes
    kept: list[int] = []
    for size in sizes:
        kept.append(min(size, limit - sum(kept)))
    return kept


def _under(pointer: str, directory: str, prefix: str = "") -> bool:
    """Whether `pointer` names an entry of `directory` whose name starts with `prefix`, however the storage spells
    its URLs (`file:///x` or `/x`)."""
    path: str = fsspec.core.url_to_fs(pointer)[1].rstrip("/")
    return path.startswith(f"{fsspec.core.url_to_fs(directory)[1].rstrip('/')}/{prefix}")


def _write_every_scope(access: Any, location: Any, payloads: dict[str, bytes]) -> dict[str, Any]:
    """Write `payloads[scope.value]` through a stream of each scope of `location`, and `payloads["task-owned"]` as
    the job's task-owned state; their handles under the same names."""
    handles = {}
    for scope in CheckpointedStateScope:
        with location.create_checkpoint_state_output_stream(scope) as out:
            out.write(payloads[scope.value])
            handles[scope.value] = out.close_and_get_handle()
    task_owned = access.create_task_owned_state_stream()
    task_owned.write(payloads["task-owned"])
    handles["task-owned"] = task_owned.close_and_get_handle()
    return handles


def _misread(handle: Any, payload: bytes) -> str | None:
    """None when `handle` reads back `payload`; else what it gave: other bytes, or the error opening it raised (a
    size or checksum check noticing other bytes, or the file gone)."""
    try:
        with handle.open() as f:
            return None if f.read() == payload else "other bytes"
    except StateCertError as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.requirement("CS-3", "CS-4")
def test_streams_of_every_checkpoint_job_and_scope_never_overwrite_each_other(storage: Any) -> None:
    """Streams of two checkpoints of one job, a checkpoint of another job, a savepoint and task-owned state, three
    per scope and two of them written interleaved, all read back after all were written; and the same job's
    checkpoint 2 and task-owned state written through a second storage access, as each task of a job (or the job
    restarted) has its own. A storage that names its files by a counter per checkpoint (so checkpoint 2's first
    shared file replaces checkpoint 1's, still referenced by an incremental checkpoint), per access, or by the time
    fails here."""
    job, other = storage.create_checkpoint_storage(JOB_A), storage.create_checkpoint_storage(JOB_B)
    again = storage.create_checkpoint_storage(JOB_A)
    locations = {
        "job-a chk-1": job.initialize_location_for_checkpoint(1),
        "job-a chk-2": job.initialize_location_for_checkpoint(2),
        "job-b chk-1": other.initialize_location_for_checkpoint(1),
        "job-a savepoint 3": job.initialize_location_for_savepoint(3),
        "job-a chk-2 (a second access)": again.initialize_location_for_checkpoint(2),
    }
    written: list[tuple[str, Any, bytes]] = []
    for where, location in locations.items():
        for scope in CheckpointedStateScope:
            first = location.create_checkpoint_state_output_stream(scope)
            second = location.create_checkpoint_state_output_stream(scope)
            payloads = [os.urandom(50_000) for _ in range(3)]
            for i in range(0, 50_000, 10_000):  # interleaved: both open at once
                first.write(payloads[0][i : i + 10_000])
                second.write(payloads[1][i : i + 10_000])
            written += [(f"{where} {scope.value} #1", first.close_and_get_handle(), payloads[0])]
            written += [(f"{where} {scope.value} #2", second.close_and_get_handle(), payloads[1])]
            with location.create_checkpoint_state_output_stream(scope) as third:
                third.write(payloads[2])
                written.append((f"{where} {scope.value} #3", third.close_and_get_handle(), payloads[2]))
    for name, owner in (("job-a", job), ("job-b", other), ("job-a (a second access)", again)):
        out = owner.create_task_owned_state_stream()
        payload = os.urandom(50_000)
        out.write(payload)
        written.append((f"{name} task-owned", out.close_and_get_handle(), payload))
    changed = [f"{what} ({problem})" for what, handle, payload in written if (problem := _misread(handle, payload))]
    assert not changed, f"CS-4: after all {len(written)} streams were written, these read back other bytes: {changed}"


@pytest.mark.requirement("CS-4")
def test_streams_created_and_written_by_two_threads_at_once_each_read_back_their_own_bytes(
    certification: Any, storage: Any
) -> None:
    """Two threads, as the asynchronous parts of two checkpoints of one task run side by side, each create and write
    24 streams of every scope, task-owned ones included, through one storage access and its two checkpoint
    locations, taking turns at points the run's seed chooses (`Interleaving`): every stream reads back its own
    bytes. A storage naming its files by the first name with no file yet gives two streams one file."""
    access = storage.create_checkpoint_storage("job")
    locations = [access.initialize_location_for_checkpoint(1), access.initialize_location_for_checkpoint(2)]
    scopes = list(CheckpointedStateScope)
    written: list[tuple[str, Any, bytes]] = []

    def write(thread: str) -> None:
        for n in range(24):
            payload = os.urandom(30_000)
            out = (
                access.create_task_owned_state_stream()
                if n % 4 == 3
                else locations[n % 2].create_checkpoint_state_output_stream(scopes[n % len(scopes)])
            )
            for i in range(0, 30_000, 10_000):
                out.write(payload[i : i + 10_000])
            written.append((f"{thread} stream {n}", out.close_and_get_handle(), payload))

    Interleaving(certification.settings.seed).run(lambda: write("this thread's"), lambda: write("the other thread's"))
    changed = [f"{what} ({problem})" for what, handle, payload in written if (problem := _misread(handle, payload))]
    assert not changed, (
        f"CS-4: of {len(written)} streams written by two threads at once, these read back other bytes: {changed}"
    )


@pytest.mark.requirement("CS-9", "FMT-12")
def test_file_handles_record_size_and_checksum_and_refuse_changed_bytes(storage: Any) -> None:
    payload = os.urandom(100_000)
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    with location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        out.write(payload[:40_000])
        out.write(payload[40_000:])
        handle = out.close_and_get_handle()
    if not isinstance(handle, FileStateHandle):
        pytest.skip("this storage keeps 100,000 bytes inline: it has no file handles")
    assert handle.size == len(payload), f"CS-9: expected a file handle of size {len(payload)}, got {handle.size}"
    assert handle.checksum is None or handle.checksum == crc32c.crc32c(payload), (
        f"CS-9: expected CRC-32C 0x{crc32c.crc32c(payload):08x} of the bytes written, got 0x{handle.checksum:08x}"
    )
    fs, path = fsspec.core.url_to_fs(handle.path)
    flipped = bytearray(payload)
    flipped[12_345] ^= 0x01
    fs.pipe_file(path, bytes(flipped))
    if handle.checksum is not None:
        with pytest.raises(CheckpointCorruptedError):
            handle.open()
    fs.pipe_file(path, payload[:-1])
    with pytest.raises(CheckpointCorruptedError, match="size"):
        handle.open()


@pytest.mark.requirement("CS-3", "CS-4")
def test_task_owned_stream_reads_back(storage: Any) -> None:
    out = storage.create_checkpoint_storage("job").create_task_owned_state_stream()
    out.write(b"task owned" * 5000)
    with out.close_and_get_handle().open() as f:
        assert f.read() == b"task owned" * 5000, "CS-3, CS-4: f.read(): expected b'task owned' * 5000"


@pytest.mark.requirement("CS-2")
def test_savepoint_location_at_explicit_target(storage: Any, checkpoint_dir: str) -> None:
    location = storage.create_checkpoint_storage("abcdef0123").initialize_location_for_savepoint(
        3, target=f"{checkpoint_dir}-explicit"
    )
    assert _under(location.pointer, f"{checkpoint_dir}-explicit", "savepoint-abcdef-"), (
        f"CS-2: initialize_location_for_savepoint(3, target=...-explicit): expected a savepoint-abcdef-* directory "
        f"under the target, got {location.pointer}"
    )


@pytest.mark.requirement("CS-2", "SP-2")
def test_savepoints_go_to_new_directories_under_their_target_or_the_default(
    storage_factory: Callable[..., Any], checkpoint_dir: str
) -> None:
    """Without a target a savepoint goes to the default savepoint directory, never into the job's checkpoint
    directory, where retention and job cleanup reach; each savepoint gets a new directory, so a job's second
    savepoint at one target neither fails on the first one's `_metadata` nor mixes with its files; and without
    a target or a default directory there is no savepoint, rather than one in another directory."""
    storage = storage_factory(checkpoint_dir)
    access = storage.create_checkpoint_storage("abcdef0123")
    default_dir, explicit = f"{checkpoint_dir}-savepoints", f"{checkpoint_dir}-explicit"
    locations = [
        (default_dir, access.initialize_location_for_savepoint(3)),
        (default_dir, access.initialize_location_for_savepoint(4)),
        (explicit, access.initialize_location_for_savepoint(5, target=explicit)),
        (explicit, access.initialize_location_for_savepoint(6, target=explicit)),
    ]
    pointers = [location.pointer for _, location in locations]
    assert len(set(pointers)) == len(pointers), f"CS-2: savepoints of one job share a directory: {pointers}"
    for (under, location), checkpoint_id in zip(locations, (3, 4, 5, 6), strict=True):
        call = f"initialize_location_for_savepoint({checkpoint_id}{'' if under == default_dir else ', target'})"
        assert _under(location.pointer, under), (
            f"CS-2: {call}: expected a directory under {under}, got {location.pointer}"
        )
        assert not _under(location.pointer, checkpoint_dir), (
            f"SP-2: {call} lies in the job's checkpoint directory {checkpoint_dir}: {location.pointer}"
        )
        pointer = location.write_metadata(_metadata(checkpoint_id))
        assert storage.load_checkpoint(pointer) == _metadata(checkpoint_id), f"CS-2: {call} does not read back"
    without = storage_factory(checkpoint_dir, with_savepoint_dir=False).create_checkpoint_storage("abcdef0123")
    try:
        location = without.initialize_location_for_savepoint(7)
    except IllegalConfigurationError:
        pass
    else:
        pytest.fail(
            "CS-2: initialize_location_for_savepoint(7) without a target or a default savepoint directory: "
            f"expected IllegalConfigurationError, got a location at {location.pointer}"
        )
    assert _under(without.initialize_location_for_savepoint(8, target=explicit).pointer, explicit), (
        "CS-2, SP-2: expected _under(without.initialize_location_for_savepoint(8, target=explicit).pointer, explicit)"
    )


@pytest.mark.requirement("CS-3", "CKP-1")
def test_shared_and_task_owned_state_outlive_the_checkpoint_that_wrote_them(storage: Any) -> None:
    """Subsuming a checkpoint deletes its directory (CKP-1): the checkpoint's exclusive state goes with it, while
    the shared-scope state it wrote and the job's task-owned state, which later checkpoints reference, stay. A
    storage that writes either into the checkpoint's directory loses it here; one that writes exclusive state
    elsewhere leaves it behind for good."""
    access = storage.create_checkpoint_storage("job")
    location = access.initialize_location_for_checkpoint(1)
    payloads = {name: os.urandom(100_000) for name in ("exclusive", "shared", "task-owned")}
    handles = _write_every_scope(access, location, payloads)
    directory = storage.resolve_checkpoint(location.write_metadata(_metadata(1))).directory
    fs, path = fsspec.core.url_to_fs(directory)
    fs.rm(path, recursive=True)  # what the completed checkpoint store does to a subsumed checkpoint
    for name in ("shared", "task-owned"):
        problem = _misread(handles[name], payloads[name])
        assert problem is None, (
            f"CS-3: deleting checkpoint 1's directory {directory}, as its subsumption does (CKP-1), changed the "
            f"{name} state it wrote: {problem}"
        )
    exclusive = handles["exclusive"]
    if isinstance(exclusive, FileStateHandle):
        assert _misread(exclusive, payloads["exclusive"]) is not None, (
            f"CS-3: checkpoint 1's exclusive state {exclusive.path} outlived the deletion of its directory "
            f"{directory}: nothing would ever delete it"
        )


@pytest.mark.requirement("CS-6")
def test_discarded_and_abandoned_streams_leave_nothing(storage: Any) -> None:
    """Discarded and abandoned streams leave nothing; a failed checkpoint's `dispose_on_failure` deletes its own
    directory and nothing else: the completed checkpoint before it stays readable, its shared state included (a
    dispose that deletes the job's or the shared directory loses it), and so does the job's task-owned state."""
    access = storage.create_checkpoint_storage("job")
    completed = access.initialize_location_for_checkpoint(1)
    survivors = []
    for scope in CheckpointedStateScope:
        with completed.create_checkpoint_state_output_stream(scope) as out:
            out.write(scope.value.encode() * 10_000)
            survivors.append((scope, out.close_and_get_handle()))
    completed.write_metadata(_metadata(1))
    task_owned = access.create_task_owned_state_stream()
    task_owned.write(b"task owned" * 5_000)
    task_owned_handle = task_owned.close_and_get_handle()
    location = access.initialize_location_for_checkpoint(2)
    out = location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE)
    out.write(b"a" * 50_000)
    out.discard()
    after = _handle_when_asked(out)  # a task that discarded the stream then asks for its handle
    assert after is None, (
        f"CS-6: close_and_get_handle() after discard() of a stream of 50000 bytes: expected no handle, got a "
        f"{type(after).__name__} of {getattr(after, 'size', '?')} bytes"
    )
    try:  # cleanup that discards again, as a cancelled task's does
        out.discard()
    except Exception as exc:
        pytest.fail(f"CS-6: discard() of a discarded stream: expected nothing to happen, got {exc!r}")
    with (
        pytest.raises(RuntimeError),
        location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as abandoned,
    ):
        abandoned.write(b"b" * 50_000)
        raise RuntimeError("task failed mid-write")
    fs, directory = fsspec.core.url_to_fs(location.pointer)
    assert not fs.exists(directory) or fs.find(directory) == [], (
        "CS-6: expected not fs.exists(directory) or fs.find(directory) == []"
    )
    kept = location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE)
    kept.write(b"c" * 50_000)
    kept.close_and_get_handle()
    calls = (
        ("of checkpoint 2", location),
        ("again", location),
        ("of a location nothing was written to", access.initialize_location_for_checkpoint(3)),
    )
    for what, disposed in calls:
        try:
            disposed.dispose_on_failure()
        except Exception as exc:
            pytest.fail(f"CS-6: dispose_on_failure() {what}: expected it to delete what there is, got {exc!r}")
        if disposed is location:
            assert not fs.exists(directory), f"CS-6: dispose_on_failure() {what} left {directory}"
    for scope, handle in survivors:
        problem = _misread(handle, scope.value.encode() * 10_000)
        assert problem is None, (
            f"CS-6: checkpoint 2's dispose_on_failure() changed checkpoint 1's {scope.value} state: {problem}"
        )
    assert storage.load_checkpoint(completed.pointer) == _metadata(1), "CS-6: checkpoint 2's dispose lost checkpoint 1"
    problem = _misread(task_owned_handle, b"task owned" * 5_000)
    assert problem is None, f"CS-6: checkpoint 2's dispose_on_failure() changed the job's task-owned state: {problem}"


@pytest.mark.requirement("CS-6", "SP-2")
@pytest.mark.parametrize("target", ["explicit", "default"])
def test_a_failed_savepoints_dispose_deletes_its_own_directory_only(
    storage: Any, checkpoint_dir: str, target: str
) -> None:
    """A savepoint's directory is a new one under its target (CS-2), a directory the user chose that may hold other
    savepoints and files of theirs: `dispose_on_failure` of a failed savepoint deletes its own directory, never the
    target. A storage taking the target for the savepoint's exclusive directory deletes every savepoint there."""
    explicit = f"{checkpoint_dir}-explicit" if target == "explicit" else None
    parent = explicit or f"{checkpoint_dir}-savepoints"
    access = storage.create_checkpoint_storage("abcdef0123")
    completed = access.initialize_location_for_savepoint(1, target=explicit)
    with completed.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        out.write(b"kept" * 10_000)
        kept = out.close_and_get_handle()
    completed.write_metadata(_metadata(1))
    fs, parent_path = fsspec.core.url_to_fs(parent)
    users_file = f"{parent_path.rstrip('/')}/README.txt"
    fs.pipe_file(users_file, b"the user's own file")
    failed = access.initialize_location_for_savepoint(2, target=explicit)
    with failed.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        out.write(b"lost" * 10_000)
        out.close_and_get_handle()
    failed.dispose_on_failure()
    call = f"dispose_on_failure() of savepoint 2 at the {target} target {parent}"
    assert storage.load_checkpoint(completed.pointer) == _metadata(1), f"CS-6: {call} lost savepoint 1"
    problem = _misread(kept, b"kept" * 10_000)
    assert problem is None, f"CS-6: {call} changed savepoint 1's state: {problem}"
    assert fs.exists(users_file), f"CS-6: {call} deleted {users_file}, a file of the user's in the target"
    _, failed_path = fsspec.core.url_to_fs(failed.pointer)
    assert not fs.exists(failed_path), f"CS-6: {call} left its directory {failed.pointer}"


ODD_DIRECTORIES = {  # a directory name, and a sibling a storage misreading the name would use or delete instead
    "space": ("a b", "a%20b"),
    "percent": ("a%20b", "a b"),
    "hash": ("a#b", "a"),
    "question-mark": ("a?b", "a"),
    "glob-star": ("a*b", "aXb"),
    "glob-class": ("ck[1]", "ck1"),
    "non-ascii": ("ü", "u"),
}


@pytest.mark.requirement("CS-1", "CS-6")
@pytest.mark.parametrize("odd", sorted(ODD_DIRECTORIES))
def test_a_directory_of_any_name_holds_its_checkpoints_and_nothing_beside_it(
    storage_factory: Callable[[str], Any], checkpoint_dir: str, odd: str
) -> None:
    """A checkpoint directory is named as fsspec takes it (CS-1): spaces, `#`, `?`, `%`, glob characters and
    non-ASCII are part of the name. Checkpoints, a savepoint and task-owned state written under such a directory
    read back, a failed checkpoint's dispose deletes its own directory, and a sibling directory the name would
    become if percent-decoded or -encoded, cut at `#` or `?`, or expanded as a glob pattern gets nothing and loses
    nothing."""
    name, sibling = ODD_DIRECTORIES[odd]
    fs, root = fsspec.core.url_to_fs(checkpoint_dir)
    root = root.rstrip("/")
    users_files = [f"{root}/{sibling}/{d}the-user's-file" for d in ("", "job/chk-1/", "job/chk-3/", "job/shared/")]
    for users_file in users_files:  # beside the directory, and where its checkpoints' files go (CS-FS-1)
        fs.makedirs(users_file.rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(users_file, b"not the storage's")
    storage = storage_factory(f"{checkpoint_dir}/{name}")
    access = storage.create_checkpoint_storage("job")
    completed = access.initialize_location_for_checkpoint(1)
    payloads = {what: what.encode() * 30_000 for what in ("exclusive", "shared", "task-owned", "sp")}
    handles = _write_every_scope(access, completed, payloads)
    completed.write_metadata(_metadata(1))
    savepoint = access.initialize_location_for_savepoint(2)
    with savepoint.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        out.write(payloads["sp"])
        handles["sp"] = out.close_and_get_handle()
    savepoint.write_metadata(_metadata(2))
    failed = access.initialize_location_for_checkpoint(3)
    with failed.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        out.write(b"lost" * 30_000)
        out.close_and_get_handle()
    failed.dispose_on_failure()
    where = f"under the directory {name!r}"
    for pointer, expected in ((completed.pointer, _metadata(1)), (savepoint.pointer, _metadata(2))):
        assert storage.load_checkpoint(pointer) == expected, f"CS-1: {where}, load_checkpoint({pointer!r}) misread"
    for what, handle in handles.items():
        problem = _misread(handle, payloads[what])
        assert problem is None, f"CS-1: {where}, the {what} state {handle} read back {problem}"
    _, failed_path = fsspec.core.url_to_fs(failed.pointer)
    assert not fs.exists(failed_path), f"CS-6: {where}, dispose_on_failure() left {failed.pointer}"
    beside = set(fs.find(f"{root}/{sibling}"))
    written, deleted = sorted(beside - set(users_files)), sorted(set(users_files) - beside)
    assert not written, f"CS-1: {where}, the storage wrote into the sibling directory {sibling!r}: {written}"
    assert not deleted, f"CS-6: {where}, the storage deleted the user's files beside it, in {sibling!r}: {deleted}"


def _metadata(checkpoint_id: int, path: str | None = None) -> CheckpointMetadata:
    """A one-operator checkpoint; with `path`, its single key-group handle is a file at that URL."""
    delegate: Any = FileStateHandle(path, 10) if path else ByteStreamStateHandle("inline", b"0123456789")
    handle = KeyGroupsStateHandle(KeyGroupRange(0, 0), (0,), delegate)
    operator = OperatorState("op", 1, 1, {0: OperatorSubtaskState((handle,))})
    return CheckpointMetadata(checkpoint_id, (operator,))


def _metadata_files(fs: Any, root: str) -> list[str]:
    return sorted(p for p in fs.find(root) if p.rsplit("/", 1)[-1] == "_metadata") if fs.exists(root) else []


@pytest.mark.requirement("FMT-7", "FMT-5")
@pytest.mark.parametrize("fault", ["write", "write of _metadata", "rename"])
def test_a_failed_metadata_write_leaves_no_metadata(
    storage_factory: Callable[[str], Any], checkpoint_dir: str, fault: str
) -> None:
    """A write of `_metadata` that fails, in place or while it is copied or moved into place, leaves no `_metadata`
    (a torn one would look complete) and no temporary file, on the run's own file system under the fault-injecting
    wrapper: off the local disk a move copies, and a copy failing part way leaves part of the file unless the storage
    deletes it."""
    faulty = fsspec.filesystem("faulty")
    url = faulty_url(f"{checkpoint_dir}/c")
    storage = storage_factory(url)
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    fs, root = fsspec.core.url_to_fs(url)
    root = root.rstrip("/")
    before = set(fs.find(root)) if fs.exists(root) else set()
    if fault == "write":
        faulty.fail_writes(f"{root}/*", after_bytes=6, times=-1)
    elif fault == "write of _metadata":  # what a storage writing it in place, or copying it into place, does
        faulty.fail_writes(f"{root}/*/_metadata", after_bytes=6, times=-1)
    else:
        faulty.fail_moves(f"{root}/*", times=-1)
    failed = False
    try:
        location.write_metadata(_metadata(1))
    except OSError as exc:
        failed = True
        reported = isinstance(exc, InjectedFault) or isinstance(exc.__cause__, InjectedFault) or "injected" in str(exc)
        assert reported, f"FMT-7: write_metadata() failed ({fault}) and raised {exc!r}: expected the failure itself"
    finally:
        faulty.clear_faults()
    if fault == "write":
        assert failed, "FMT-7: a write failure while writing _metadata was not reported"
    if not failed:
        return  # the storage does not rename: its write was already complete
    left = _metadata_files(fs, root)
    assert left == [], f"FMT-7: a failure ({fault}) while writing _metadata left {left}: a torn file looks complete"
    litter = sorted((set(fs.find(root)) if fs.exists(root) else set()) - before)
    assert litter == [], f"FMT-7: write_metadata() failed ({fault}) and left {litter}: expected nothing of the attempt"
    with pytest.raises(StateCertError):
        storage.load_checkpoint(location.pointer)


@pytest.mark.requirement("FMT-7")
def test_existing_metadata_is_never_overwritten(storage: Any) -> None:
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    pointer = location.write_metadata(_metadata(1))
    with pytest.raises(Exception):  # noqa: B017 - the spec names no type; what matters is below
        location.write_metadata(_metadata(99))
    loaded = storage.load_checkpoint(pointer)
    assert loaded.checkpoint_id == 1, f"FMT-7: _metadata was overwritten (checkpoint id {loaded.checkpoint_id})"


@pytest.mark.requirement("FMT-4", "FMT-5", "CS-2", "CS-8")
def test_locations_are_distinct_and_resolve(storage: Any) -> None:
    a, b = storage.create_checkpoint_storage(JOB_A), storage.create_checkpoint_storage(JOB_B)
    locations = [a.initialize_location_for_checkpoint(1), a.initialize_location_for_checkpoint(2)]
    locations += [b.initialize_location_for_checkpoint(1), a.initialize_location_for_savepoint(3)]
    pointers = [loc.pointer for loc in locations]
    assert len(set(pointers)) == 4, f"CS-2: locations of different checkpoints and jobs coincide: {pointers}"
    with pytest.raises((IncompleteCheckpointError, CheckpointNotFoundError)):
        storage.resolve_checkpoint(locations[0].pointer)
    for i, location in enumerate(locations, start=1):
        pointer = location.write_metadata(_metadata(i))
        resolved = storage.resolve_checkpoint(pointer)
        assert resolved.metadata_path.endswith("/_metadata"), f"FMT-5: {pointer} resolved to {resolved}"
        assert storage.load_checkpoint(pointer) == _metadata(i), "FMT-4: _metadata does not read back equal"


@pytest.mark.requirement("FMT-4", "FMT-1", "FMT-2", "CS-11")
@pytest.mark.parametrize("kind", list(CheckpointKind), ids=lambda kind: kind.value)
@given(data=st.data())
def test_metadata_of_every_shape_reads_back_equal(storage: Any, kind: CheckpointKind, data: st.DataObject) -> None:
    """Generated metadata of `kind` (any checkpoint id and trigger timestamp, up to three operators of any parallelism
    and max parallelism, canonical, native, changelog and operator handles over inline bytes and streams this
    storage wrote) reads back equal through the storage, and a savepoint through the reference reader too (CS-11:
    its `_metadata` is the format chapter's, whoever wrote it; a checkpoint's layout beside its directory is the
    storage's). A storage with its own encoder that drops or narrows a field (the timestamp, the kind, a handle's
    format) would pass a round trip of one fixed checkpoint."""
    access = storage.create_checkpoint_storage(f"job-{uuid.uuid4().hex}")  # the storage outlives the examples
    checkpoint_id = data.draw(st.integers(1, 2**62), label="checkpoint_id")
    location = (
        access.initialize_location_for_savepoint(checkpoint_id)
        if kind.is_savepoint
        else access.initialize_location_for_checkpoint(checkpoint_id)
    )
    written, limit = [], getattr(storage, "max_state_size", None) or 30_000  # within a declared limit (CS-7)
    for scope, size in ((CheckpointedStateScope.EXCLUSIVE, 400), (CheckpointedStateScope.SHARED, 30_000)):
        with location.create_checkpoint_state_output_stream(scope) as out:
            out.write(hashlib.shake_128(scope.value.encode()).digest(min(size, limit)))
            written.append(out.close_and_get_handle())
    meta = data.draw(checkpoint_metadata(st.sampled_from(written) | inline_streams(), kind, checkpoint_id))
    pointer = location.write_metadata(meta)
    readers = [("the storage", "FMT-4", storage.load_checkpoint)]
    if kind.is_savepoint:
        readers.append(("the reference reader", "CS-11, FMT-4", load_checkpoint_metadata))
    for reader, cites, loaded in readers:
        got = loaded(pointer)
        assert got == meta, (
            f"{cites}: _metadata of {kind.value} {checkpoint_id} read back through {reader} differs: "
            f"{_metadata_difference(meta, got)}"
        )


def _metadata_difference(expected: CheckpointMetadata, got: CheckpointMetadata) -> str:
    """Where `got` differs from `expected`: the first differing field, or the first differing operator."""
    for name in ("checkpoint_id", "kind", "timestamp_ms"):
        if getattr(expected, name) != getattr(got, name):
            return f"{name}: expected {getattr(expected, name)!r}, got {getattr(got, name)!r}"
    ids = ([op.operator_id for op in expected.operators], [op.operator_id for op in got.operators])
    if ids[0] != ids[1]:
        return f"operators: expected {ids[0]}, got {ids[1]}"
    for want, have in zip(expected.operators, got.operators, strict=True):
        if want != have:
            return f"operator {want.operator_id!r}: expected {want!r}, got {have!r}"
    return f"expected {expected!r}, got {got!r}"


@pytest.mark.requirement("FMT-5")
def test_a_pointer_names_the_directory_or_its_metadata_file(storage: Any, checkpoint_dir: str) -> None:
    """A checkpoint resolves and loads from its directory and from its `_metadata` file alike (Flink takes either
    for `--fromSavepoint`); a directory without `_metadata` is incomplete and a path with nothing there is not found,
    for `resolve_checkpoint` and `load_checkpoint` both."""
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    with location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        out.write(os.urandom(100_000))
        out.close_and_get_handle()
    fs, directory = fsspec.core.url_to_fs(location.pointer)
    before = IncompleteCheckpointError if fs.isdir(directory) else CheckpointNotFoundError  # inlined: no directory
    missing = f"{checkpoint_dir}/job/chk-99"
    for pointer, expected in ((location.pointer, before), (missing, CheckpointNotFoundError)):
        for call in ("resolve_checkpoint", "load_checkpoint"):
            try:
                got = getattr(storage, call)(pointer)
            except StateCertError as exc:
                assert isinstance(exc, expected), (
                    f"FMT-5: {call}({pointer!r}): expected {expected.__name__}, got {type(exc).__name__}: {exc}"
                )
            else:
                pytest.fail(f"FMT-5: {call}({pointer!r}): expected {expected.__name__}, got {got!r}")
    resolved = storage.resolve_checkpoint(location.write_metadata(_metadata(1)))
    for pointer in (resolved.directory, resolved.metadata_path):
        try:
            again, loaded = storage.resolve_checkpoint(pointer), storage.load_checkpoint(pointer)
        except StateCertError as exc:
            pytest.fail(f"FMT-5: checkpoint 1 named by {pointer!r} does not resolve: {type(exc).__name__}: {exc}")
        assert again.metadata_path.endswith("_metadata"), f"FMT-5: resolve_checkpoint({pointer!r}) gave {again}"
        assert loaded == _metadata(1), f"FMT-5: load_checkpoint({pointer!r}): expected checkpoint 1, got {loaded}"


@pytest.mark.requirement("FMT-8", "FMT-2")
@pytest.mark.parametrize("damage", ["a changed byte", "truncated", "another magic number", "empty"])
def test_a_damaged_metadata_file_is_refused_naming_it(storage: Any, damage: str) -> None:
    """A `_metadata` file with one payload byte changed (so it still decodes, to other handle bytes), cut short,
    of another format or empty is refused with CheckpointFormatError naming it, never read as another checkpoint."""
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    pointer = location.write_metadata(_metadata(1))
    fs, metadata_path = fsspec.core.url_to_fs(storage.resolve_checkpoint(pointer).metadata_path)
    data = fs.cat_file(metadata_path)
    at = data.find(b"0123456789")  # the inline handle's bytes
    damaged = {
        "a changed byte": data[:at] + b"X" + data[at + 1 :] if at >= 0 else data[:-5] + b"X" + data[-4:],
        "truncated": data[: len(data) // 2],
        "another magic number": b"XXXX" + data[4:],
        "empty": b"",
    }[damage]
    with fs.open(metadata_path, "wb") as f:
        f.write(damaged)
    try:
        loaded = storage.load_checkpoint(pointer)
    except CheckpointFormatError as exc:
        name = metadata_path.rsplit("/", 1)[0].rsplit("/", 1)[-1]
        assert name in str(exc) and "_metadata" in str(exc), (
            f"FMT-8: a _metadata file ({damage}): the error does not name {metadata_path}: {exc}"
        )
        return
    except Exception as exc:
        pytest.fail(
            f"FMT-8: load_checkpoint of a _metadata file ({damage}): expected CheckpointFormatError, got {exc!r}"
        )
    pytest.fail(f"FMT-8: load_checkpoint of a _metadata file ({damage}): expected CheckpointFormatError, got {loaded}")


@pytest.mark.requirement("FMT-10", "FMT-9")
def test_handle_paths_outside_the_checkpoint_are_refused(storage: Any) -> None:
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    inside = "state-file-0123456789"
    pointer = location.write_metadata(_metadata(1, f"{location.pointer.rstrip('/')}/{inside}"))
    fs, metadata_path = fsspec.core.url_to_fs(storage.resolve_checkpoint(pointer).metadata_path)
    data = fs.cat_file(metadata_path)
    magic, version, length = struct.unpack_from(">IIQ", data)
    payload = data[16 : 16 + length]
    assert inside.encode() in payload, f"FMT-9: the handle path is not stored relative in {metadata_path}"
    hostile_paths = [  # each as long as the path it replaces, so the msgpack payload stays well formed
        "../../../../outside01",
        "../../../../../../../../etc/passwd"[: len(inside)].ljust(len(inside), "x"),
        "/etc/passwd".ljust(len(inside), "x"),  # absolute
        "file:///etc/passwd".ljust(len(inside), "x"),  # a URL
        "./" * 10 + ".",  # the checkpoint directory itself
        f"{inside[:-1]}/",  # a directory
    ]
    if "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        # A directory of the checkpoint that is a symbolic link to one outside it (FMT-10: the real path counts).
        directory = metadata_path.rsplit("/", 1)[0]
        outside = f"{directory.rsplit('/', 2)[0]}-outside"
        os.makedirs(outside, exist_ok=True)
        Path(outside, "secret-012345").write_bytes(b"0123456789")
        os.symlink(outside, f"{directory}/linkdir")
        hostile_paths.append("linkdir/secret-012345")
    for hostile in hostile_paths:
        patched = payload.replace(inside.encode(), hostile.encode())
        crafted = struct.pack(">IIQ", magic, version, len(patched)) + patched + struct.pack(">I", zlib.crc32(patched))
        with fs.open(metadata_path, "wb") as f:
            f.write(crafted)
        try:
            storage.load_checkpoint(pointer)
        except UnsafePathError:
            continue
        except Exception as exc:
            pytest.fail(f"FMT-10: a handle path {hostile!r}: expected UnsafePathError, got {exc!r}")
        pytest.fail(f"FMT-10: load_checkpoint followed the handle path {hostile!r} out of the checkpoint")


@pytest.mark.requirement("FMT-9", "CS-2")
def test_a_savepoint_directory_moved_elsewhere_restores(storage: Any) -> None:
    """A savepoint is self-contained: its exclusive and its shared-scope state lie in its directory, referenced
    relative to `_metadata`, so the directory moved elsewhere loads and reads back every byte (a storage that sends
    a savepoint's shared state to the job's shared directory fails here)."""
    location = storage.create_checkpoint_storage("job").initialize_location_for_savepoint(1)
    payloads, handles = [], []
    for index, scope in enumerate(CheckpointedStateScope):
        payloads.append(os.urandom(50_000))
        with location.create_checkpoint_state_output_stream(scope) as out:
            out.write(payloads[index])
            handles.append(KeyGroupsStateHandle(KeyGroupRange(index, index), (0,), out.close_and_get_handle()))
    subtask = OperatorSubtaskState(tuple(handles))
    pointer = location.write_metadata(CheckpointMetadata(1, (OperatorState("op", 1, 128, {0: subtask}),)))
    fs, metadata_path = fsspec.core.url_to_fs(storage.resolve_checkpoint(pointer).metadata_path)
    source = metadata_path.rsplit("/", 1)[0]
    moved = f"{source.rsplit('/', 1)[0]}-moved-elsewhere/{source.rsplit('/', 1)[1]}"
    fs.mv(source, moved, recursive=True)
    assert not fs.exists(source), f"FMT-9, CS-2: moving {source} left it in place"
    restored = storage.load_checkpoint(fs.unstrip_protocol(moved))
    handles = restored.operator("op").subtask_states[0].managed_keyed_state
    got = [_misread(handle.delegate, payload) for handle, payload in zip(handles, payloads, strict=True)]
    assert got == [None] * len(payloads), (
        f"FMT-9: the savepoint moved from {source} to {moved}, exclusive and shared state: got {got}"
    )


@pytest.mark.requirement("FMT-5", "FMT-9")
def test_a_retained_checkpoint_under_another_checkpoint_directory_loads(
    storage: Any, storage_factory: Callable[[str], Any], checkpoint_dir: str
) -> None:
    """A job starts from a retained checkpoint of another job whose checkpoint directory was another one (COORD-13;
    Flink's `-s :checkpointMetaDataPath`, as when a job moves to a new bucket): the storage configured with the new
    directory resolves and loads it, named by its directory or its `_metadata`, and every handle it references
    (exclusive, shared and task-owned state) reads back its bytes. A storage that resolves checkpoints only under
    its own directory fails here; the other directory is no string prefix of the run's, nor the run's of it, so
    comparing paths as strings does not pass either."""
    elsewhere = f"{checkpoint_dir.rstrip('/').rsplit('/', 1)[0]}/elsewhere-{uuid.uuid4().hex}"
    names = ("exclusive", "shared", "task-owned")
    payloads = {name: hashlib.shake_128(name.encode()).digest(100_000) for name in names}
    try:
        access = storage_factory(elsewhere).create_checkpoint_storage(JOB_A)
        location = access.initialize_location_for_checkpoint(7)
        handles = _write_every_scope(access, location, payloads)
        keyed = tuple(KeyGroupsStateHandle(KeyGroupRange(i, i), (0,), handles[n]) for i, n in enumerate(payloads))
        operator = OperatorState("op", 1, 128, {0: OperatorSubtaskState(keyed)})
        pointer = location.write_metadata(CheckpointMetadata(7, (operator,)))
        storage.create_checkpoint_storage(JOB_B)  # the new job, with its own directory
        try:
            resolved = storage.resolve_checkpoint(pointer)
            for named in (resolved.directory, resolved.metadata_path):
                loaded = storage.load_checkpoint(named)
                got = loaded.operator("op").subtask_states[0].managed_keyed_state
                problems = [_misread(h.delegate, payload) for h, payload in zip(got, payloads.values(), strict=True)]
                assert loaded.checkpoint_id == 7 and problems == [None] * len(payloads), (
                    f"FMT-5: checkpoint 7 of {elsewhere} loaded through the storage of {checkpoint_dir} as "
                    f"{named!r}: expected id 7 and its exclusive, shared and task-owned bytes, got id "
                    f"{loaded.checkpoint_id} and {dict(zip(payloads, problems, strict=True))}"
                )
        except StateCertError as exc:
            pytest.fail(
                f"FMT-5: checkpoint 7 of {elsewhere} ({pointer!r}), loaded through the storage of {checkpoint_dir}: "
                f"{type(exc).__name__}: {exc}"
            )
    finally:
        fs, path = fsspec.core.url_to_fs(elsewhere)
        if fs.exists(path):
            fs.rm(path, recursive=True)


def _declared_limit(storage: Any) -> int:
    """The storage's `max_state_size` (CS-7); the test is skipped without one of at most 64 MiB to write."""
    limit = getattr(storage, "max_state_size", None)
    if not isinstance(limit, int) or limit > 64 * 1024 * 1024:
        pytest.skip("the storage declares no maximum state size of at most 64 MiB (CS-7)")
    return limit


@pytest.mark.requirement("CS-JM-2", "CS-7")
def test_maximum_state_size_is_enforced(storage: Any) -> None:
    limit = _declared_limit(storage)
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    chunk = b"x" * (1 << 20)
    out = location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE)
    try:  # the limit may bite at any write or at the close
        written = 0
        while written <= limit:
            out.write(chunk[: limit + 1 - written] if limit + 1 - written < len(chunk) else chunk)
            written = out.tell()
        out.close_and_get_handle()
    except StateSizeLimitError:
        handle = _handle_when_asked(out)  # the task, having caught the error, still asks for the stream's handle
        assert handle is None, (
            f"CS-7: close_and_get_handle() after StateSizeLimitError: expected nothing, got a "
            f"{type(handle).__name__} for a stream beyond max_state_size={limit}"
        )
        return
    pytest.fail(f"CS-7: a stream of {limit + 1} bytes was accepted by a storage declaring max_state_size={limit}")


@pytest.mark.requirement("CS-7")
def test_a_stream_of_exactly_the_maximum_state_size_is_accepted(storage: Any) -> None:
    """The limit is the largest size accepted, as Flink's `MemCheckpointStreamFactory.checkSize` refuses only a
    larger one."""
    limit = _declared_limit(storage)
    payload = hashlib.shake_128(b"at the limit").digest(limit)
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    with location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        try:
            for start in range(0, limit, 1 << 20):
                out.write(payload[start : start + (1 << 20)])
            handle = out.close_and_get_handle()
        except StateSizeLimitError as exc:
            pytest.fail(f"CS-7: a stream of exactly max_state_size={limit} bytes was refused: {exc}")
    assert _misread(handle, payload) is None, f"CS-4: a stream of {limit} bytes read back {_misread(handle, payload)}"


INLINE_CAP = 1 << 20
"""The highest inline threshold Flink accepts (`FileSystemCheckpointStorage`, 1 MiB): no larger stream is inlined."""


@pytest.mark.requirement("CS-10")
@pytest.mark.parametrize("scope", [*CheckpointedStateScope, "task-owned"], ids=lambda s: getattr(s, "value", s))
def test_a_stream_larger_than_one_mib_is_never_inlined_into_metadata(storage: Any, scope: Any) -> None:
    if getattr(storage, "max_state_size", None) is not None:
        pytest.skip("the storage declares a maximum state size (CS-7): it may inline all state (CS-JM-1)")
    payload = hashlib.shake_128(b"larger than the cap").digest(INLINE_CAP + 1)
    out = _stream_of(storage.create_checkpoint_storage("job"), scope)
    for start in range(0, len(payload), 1 << 16):
        out.write(payload[start : start + (1 << 16)])
    handle = out.close_and_get_handle()
    assert not isinstance(handle, ByteStreamStateHandle), (
        f"CS-10: a stream of {len(payload)} bytes came back inline ({type(handle).__name__}): it would go into "
        "_metadata, which then grows with the state"
    )
    assert _misread(handle, payload) is None, f"CS-4: the stream read back {_misread(handle, payload)}"


def _write_savepoint(location: Any, sizes: tuple[int, ...]) -> tuple[str, list[bytes]]:
    """A savepoint of one operator at `location` whose subtask holds, per scope and size, a keyed handle of that many
    bytes; its pointer and the payloads in handle order."""
    payloads: list[bytes] = []
    handles: list[KeyGroupsStateHandle] = []
    for scope in CheckpointedStateScope:
        for size in sizes:
            payload = hashlib.shake_128(f"{scope.value}-{size}".encode()).digest(size)
            with location.create_checkpoint_state_output_stream(scope) as out:
                out.write(payload)
                handle = out.close_and_get_handle()
            index = len(payloads)
            handles.append(KeyGroupsStateHandle(KeyGroupRange(index, index), (0,), handle))
            payloads.append(payload)
    subtask = OperatorSubtaskState(tuple(handles))
    operator = OperatorState("op", 1, 128, {0: subtask})
    return location.write_metadata(
        CheckpointMetadata(1, (operator,), kind=CheckpointKind.SAVEPOINT_CANONICAL)
    ), payloads


def _read_savepoint(storage: Any, pointer: str, payloads: list[bytes]) -> list[str | None]:
    """The savepoint at `pointer` loaded through `storage`: per handle, None when it reads back its payload, else what
    it gave (`_misread`)."""
    metadata = storage.load_checkpoint(pointer)
    handles = metadata.operator("op").subtask_states[0].managed_keyed_state
    if len(handles) != len(payloads):
        return [f"{len(handles)} handles, expected {len(payloads)}"]
    return [_misread(handle.delegate, payload) for handle, payload in zip(handles, payloads, strict=True)]


@pytest.mark.requirement("CS-11", "FMT-1", "FMT-2", "FMT-4")
def test_a_savepoint_restores_under_another_storage_both_ways(storage: Any, checkpoint_dir: str) -> None:
    """A savepoint written through the storage under test loads through the reference file-system storage, and one
    written through the reference loads through it: `_metadata` is the format chapter's, as a Flink savepoint
    restores under whatever checkpoint storage the restoring job configures."""
    reference = FileSystemCheckpointStorage(
        f"{checkpoint_dir}/statecert-reference", savepoint_dir=f"{checkpoint_dir}/statecert-reference-savepoints"
    )
    sizes = (10, INLINE_CAP + 1)  # under the default inline threshold, and over what a file storage may inline (CS-10)
    directions = ((storage, reference, "under test -> reference"), (reference, storage, "reference -> under test"))
    for writer, reader, direction in directions:
        location = writer.create_checkpoint_storage("job").initialize_location_for_savepoint(1)
        pointer, payloads = _write_savepoint(location, sizes)
        try:
            got = _read_savepoint(reader, pointer, payloads)
        except StateCertError as exc:
            pytest.fail(f"CS-11 ({direction}): load_checkpoint({pointer!r}) raised {exc!r}")
        assert got == [None] * len(payloads), f"CS-11 ({direction}): the savepoint's handles read back {got}"


@pytest.mark.requirement("CS-2", "CS-1")
def test_a_savepoint_target_on_another_file_system_holds_the_savepoint(
    storage: Any, checkpoint_dir: str, tmp_path: Path
) -> None:
    """A savepoint's explicit target may lie on another file system than the checkpoints, as Flink users checkpoint
    to one store and take savepoints to another: the savepoint (its `_metadata` and its files) is written on the
    target's file system, under the target, and loads back from there. A storage opening every path through its
    checkpoint directory's file system writes it elsewhere (the same path there). The target is `memory://` beside a
    checkpoint directory elsewhere, else a local one, both named by this test's temporary directory."""
    protocols = fsspec.core.url_to_fs(checkpoint_dir)[0].protocol
    on_memory = "memory" in ((protocols,) if isinstance(protocols, str) else protocols)
    in_memory = f"memory://{tmp_path}/other-file-system"
    target = f"file://{tmp_path}/other-file-system" if on_memory else in_memory
    fs, root = fsspec.core.url_to_fs(target)
    try:
        location = storage.create_checkpoint_storage(JOB_A).initialize_location_for_savepoint(1, target=target)
        pointer, payloads = _write_savepoint(location, (10, INLINE_CAP + 1))
        written = _metadata_files(fs, root)
        assert len(written) == 1, (
            f"CS-2: a savepoint at the target {target} (the checkpoints on {checkpoint_dir}): expected one _metadata "
            f"under the target on its file system, found {written} (pointer {pointer})"
        )
        got = _read_savepoint(storage, pointer, payloads)
        assert got == [None] * len(payloads), f"CS-2: the savepoint at {target}: its handles read back {got}"
    finally:  # the memory target, or what a broken storage wrote there for a local one
        memory, path = fsspec.core.url_to_fs(in_memory)
        if memory.exists(path):
            memory.rm(path, recursive=True)
