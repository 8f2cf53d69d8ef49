"""The checkpoint format: `_metadata` versions, atomicity, bad input, relocation, path safety (chapters FMT, SP)."""

from __future__ import annotations

import struct
import uuid
import zlib
from dataclasses import fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import fsspec
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.conformance.helpers import savepoint
from statecert.conformance.metadata_strategies import NAMES, checkpoint_metadata, inline_streams
from statecert.reference.format.metadata_codec import CURRENT_VERSION, MAGIC, decode_metadata, encode_metadata
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.faulty_fs import faulty_url
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.spec.errors import (
    CheckpointFormatError,
    CheckpointNotFoundError,
    IncompleteCheckpointError,
    StateCertError,
    UnknownFormatVersionError,
    UnsafePathError,
)
from statecert.spec.handles import (
    ByteStreamStateHandle,
    ChangelogStateBackendHandle,
    FileStateHandle,
    KeyGroupsStateHandle,
)
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata, OperatorState, OperatorSubtaskState
from statecert.spec.state import ValueStateDescriptor

GOLDEN = Path(__file__).resolve().parent.parent / "scenarios" / "golden" / "v1-savepoint"
DIRECTORY = "file:///ckpt/job/chk-5"
KEYS = StringSerializer()
COUNT = ValueStateDescriptor("count", serializer=LongSerializer())


# -- generated metadata ------------------------------------------------------------------------------------------
def streams(directory: str) -> st.SearchStrategy[Any]:
    """A stream handle: inline, a file of the checkpoint, or a shared file (with a checksum or without)."""
    checksums = st.none() | st.integers(0, 2**32 - 1)
    sizes = st.sampled_from([4096, 2**40])
    return st.one_of(
        st.builds(lambda n, s, c: FileStateHandle(f"{directory}/{n}", s, c), NAMES, sizes, checksums),
        st.builds(lambda n, s, c: FileStateHandle(f"file:///ckpt/job/shared/{n}", s, c), NAMES, sizes, checksums),
        inline_streams(),
    )


def metadata(kind: CheckpointKind = CheckpointKind.CHECKPOINT, changelog: bool = True) -> Any:
    """Valid metadata of a checkpoint in `DIRECTORY` (the suite's generator over made-up files)."""
    return checkpoint_metadata(streams(DIRECTORY), kind, changelog=changelog)


def without_checksums(meta: CheckpointMetadata) -> CheckpointMetadata:
    """`meta` as a format that records no checksums (V1, V2) decodes it: every file handle, at any depth of a
    handle, without its checksum."""

    def plain(value: Any) -> Any:
        if isinstance(value, FileStateHandle):
            return FileStateHandle(value.path, value.size)
        if isinstance(value, tuple):
            return tuple(plain(v) for v in value)
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if is_dataclass(value) and not isinstance(value, type):
            return replace(value, **{f.name: plain(getattr(value, f.name)) for f in fields(value) if f.init})
        return value

    result: CheckpointMetadata = plain(meta)
    return result


@pytest.mark.requirement("FMT-4", "FMT-2")
@given(metadata())
def test_metadata_round_trips(meta: CheckpointMetadata) -> None:
    data = encode_metadata(meta, DIRECTORY)
    assert struct.unpack(">II", data[:8]) == (MAGIC, CURRENT_VERSION)
    assert decode_metadata(data, "mem", DIRECTORY) == meta


@pytest.mark.requirement("FMT-3")
@given(metadata(changelog=False))
def test_version_3_encoding_stays_readable(meta: CheckpointMetadata) -> None:
    data = encode_metadata(meta, DIRECTORY, version=3)
    assert struct.unpack(">II", data[:8]) == (MAGIC, 3)
    assert decode_metadata(data, "mem", DIRECTORY) == meta


@pytest.mark.requirement("FMT-3", "CL-2")
@given(metadata())
def test_changelog_handles_need_version_4(meta: CheckpointMetadata) -> None:
    has_changelog = any(
        isinstance(h, ChangelogStateBackendHandle)
        for op in meta.operators
        for s in op.subtask_states.values()
        for h in s.managed_keyed_state
    )
    if has_changelog:
        with pytest.raises(ValueError, match="changelog handles need _metadata format version 4"):
            encode_metadata(meta, DIRECTORY, version=3)


@pytest.mark.requirement("FMT-3")
@given(metadata(changelog=False))
def test_version_2_encoding_stays_readable(meta: CheckpointMetadata) -> None:
    data = encode_metadata(meta, DIRECTORY, version=2)
    assert decode_metadata(data, "mem", DIRECTORY) == without_checksums(meta)


@pytest.mark.requirement("FMT-3")
@given(metadata(CheckpointKind.SAVEPOINT_CANONICAL, changelog=False))
def test_version_1_encoding_stays_readable(meta: CheckpointMetadata) -> None:
    shared = [
        h
        for op in meta.operators
        for st_ in op.subtask_states.values()
        for h in (*st_.managed_keyed_state, *st_.managed_operator_state)
        if isinstance(h.delegate, FileStateHandle) and "/shared/" in h.delegate.path
    ]
    if shared:
        return  # savepoints reference nothing outside their directory
    data = encode_metadata(meta, DIRECTORY, version=1)
    decoded = decode_metadata(data, "mem", DIRECTORY)
    assert decoded == CheckpointMetadata(meta.checkpoint_id, without_checksums(meta).operators, meta.kind, 0)


@pytest.mark.requirement("FMT-3", "FMT-8")
@pytest.mark.parametrize("damage", ["!", " ", "*", "="])
def test_version_1_inline_bytes_outside_base64_are_refused(damage: str) -> None:
    """Version 1 keeps inline state as base64 text: a character outside the alphabet in it is a corrupt `_metadata`,
    never decoded by dropping the character (which would restore other bytes than were written)."""
    inline = ByteStreamStateHandle("inline", b"0123456789")
    handle = KeyGroupsStateHandle(KeyGroupRange(0, 0), (0,), inline)
    meta = CheckpointMetadata(1, (OperatorState("op", 1, 1, {0: OperatorSubtaskState((handle,))}),))
    data = encode_metadata(meta, DIRECTORY, version=1)
    encoded = b'"MDEyMzQ1Njc4OQ=="'
    assert encoded in data, f"the inline bytes' base64 is not in the version 1 payload: {data!r}"
    damaged = data.replace(encoded, b'"MDEy' + damage.encode() + b'MzQ1Njc4OQ=="')
    with pytest.raises(CheckpointFormatError, match=r"^sp/_metadata: "):
        decode_metadata(damaged, "sp/_metadata", DIRECTORY)


# -- bad input -----------------------------------------------------------------------------------------------------
def sample_bytes() -> bytes:
    handle = KeyGroupsStateHandle(KeyGroupRange(0, 1), (0, 5), FileStateHandle(f"{DIRECTORY}/f", 10))
    meta = CheckpointMetadata(5, (OperatorState("op", 2, 128, {0: OperatorSubtaskState((handle,))}),))
    return encode_metadata(meta, DIRECTORY)


@pytest.mark.requirement("FMT-1", "FMT-8")
def test_foreign_magic_is_rejected() -> None:
    with pytest.raises(CheckpointFormatError, match=r"^some/_metadata: not a statecert _metadata file"):
        decode_metadata(b"\x49\x60\x67\x2d" + sample_bytes()[4:], "some/_metadata", DIRECTORY)


@pytest.mark.requirement("FMT-3")
def test_unknown_version_is_rejected() -> None:
    data = sample_bytes()
    with pytest.raises(UnknownFormatVersionError, match="unknown _metadata format version 5"):
        decode_metadata(data[:4] + struct.pack(">I", 5) + data[8:], "m", DIRECTORY)


@pytest.mark.requirement("FMT-2", "FMT-8")
def test_every_truncation_is_a_format_error() -> None:
    data = sample_bytes()
    for length in range(len(data)):
        with pytest.raises(CheckpointFormatError, match=r"^m: (truncated|corrupt)"):
            decode_metadata(data[:length], "m", DIRECTORY)


@pytest.mark.requirement("FMT-2", "FMT-8")
@given(st.data())
def test_every_bit_flip_is_a_format_error(data: st.DataObject) -> None:
    raw = bytearray(sample_bytes())
    position = data.draw(st.integers(0, len(raw) - 1), label="byte")
    raw[position] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    with pytest.raises(CheckpointFormatError):
        decode_metadata(bytes(raw), "m", DIRECTORY)


def craft(plain: Any) -> bytes:
    """Well-framed V2 bytes around an arbitrary payload: only the decoder's validation stands in the way."""
    payload = msgpack.packb(plain, use_bin_type=True)
    return struct.pack(">IIQ", MAGIC, 2, len(payload)) + payload + struct.pack(">I", zlib.crc32(payload))


def plain_with_path(path: str, kind: str = "savepoint-canonical") -> dict[str, Any]:
    stream = {"type": "file", "path": path, "size": 1}
    keyed = {
        "type": "key-groups",
        "start": 0,
        "end": 0,
        "offsets": [0],
        "format": "canonical",
        "stream": stream,
    }
    return {
        "checkpoint_id": 1,
        "kind": kind,
        "timestamp_ms": 0,
        "operators": [
            {
                "id": "op",
                "parallelism": 1,
                "max_parallelism": 1,
                "subtasks": [{"index": 0, "keyed": [keyed], "operator": []}],
            }
        ],
    }


@pytest.mark.requirement("FMT-10")
@pytest.mark.parametrize(
    "path",
    [
        "../other/file",
        "../../etc/passwd",
        "/etc/passwd",
        "file:///etc/passwd",
        "a/../../b",
        "s3://bucket/key",
    ],
)
def test_paths_escaping_the_savepoint_are_refused(path: str) -> None:
    with pytest.raises(UnsafePathError, match=r"escapes|not a relative path"):
        decode_metadata(craft(plain_with_path(path)), "sp/_metadata", "file:///data/sp")


@pytest.mark.requirement("FMT-10")
def test_checkpoint_may_reference_its_jobs_shared_state_only() -> None:
    meta = decode_metadata(craft(plain_with_path("../shared/x", "checkpoint")), "m", "file:///c/job/chk-1")
    assert meta.operators[0].subtask_states[0].managed_keyed_state[0].delegate.path == "file:///c/job/shared/x"
    with pytest.raises(UnsafePathError):
        decode_metadata(craft(plain_with_path("../../other-job/shared/x", "checkpoint")), "m", "file:///c/job/chk-1")


@pytest.mark.requirement("FMT-8")
@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p.update(checkpoint_id="one"),
        lambda p: p.update(kind="weird"),
        lambda p: p["operators"][0].update(parallelism=0),
        lambda p: p["operators"][0]["subtasks"][0]["keyed"][0].update(type="quantum"),
        lambda p: p["operators"][0]["subtasks"][0]["keyed"][0].update(offsets=[0, 1, 2]),
        lambda p: p["operators"][0]["subtasks"][0]["keyed"][0].update(offsets=[-4]),
        lambda p: p["operators"][0]["subtasks"][0].update(index=9),
        lambda p: p.pop("operators"),
    ],
)
def test_malformed_payload_is_a_format_error(mutate: Any) -> None:
    plain = plain_with_path("x")
    mutate(plain)
    with pytest.raises(CheckpointFormatError, match=r"^sp/_metadata: "):
        decode_metadata(craft(plain), "sp/_metadata", "file:///data/sp")


def _operator(parallelism: int, max_parallelism: int) -> Any:
    """A payload mutation: the operator at these parallelisms, its subtask 0 keeping its handle of key group 0."""
    return lambda p: p["operators"][0].update(parallelism=parallelism, max_parallelism=max_parallelism)


def _stateless_subtask(index: int) -> Any:
    """A payload mutation: a subtask `index` without state beside subtask 0, at parallelism 4 (max parallelism 8)."""

    def mutate(p: Any) -> None:
        p["operators"][0].update(parallelism=4, max_parallelism=8)
        p["operators"][0]["subtasks"].append({"index": index, "keyed": [], "operator": []})

    return mutate


# (mutation, whether the edge is inside the range): each range's last value decodes, the one past it is refused
EDGES = {
    "checkpoint id 2^63 - 1 (Long.MAX_VALUE)": (lambda p: p.update(checkpoint_id=2**63 - 1), True),
    "checkpoint id 2^63": (lambda p: p.update(checkpoint_id=2**63), False),
    "timestamp 2^63 - 1": (lambda p: p.update(timestamp_ms=2**63 - 1), True),
    "timestamp 2^63": (lambda p: p.update(timestamp_ms=2**63), False),
    "max parallelism 32768": (_operator(1, 32768), True),
    "max parallelism 32769": (_operator(1, 32769), False),
    "parallelism equal to the max parallelism": (_operator(4, 4), True),
    "parallelism above the max parallelism": (_operator(5, 4), False),
    "subtask index parallelism - 1": (_stateless_subtask(3), True),
    "subtask index equal to the parallelism": (_stateless_subtask(4), False),
}


@pytest.mark.requirement("FMT-11", "KG-4")
@pytest.mark.parametrize("edge", sorted(EDGES))
def test_integers_decode_up_to_the_end_of_their_range_and_not_one_past(edge: str) -> None:
    """Each bounded integer of `_metadata` at its largest value and one past it. A subtask index equal to the
    parallelism, in a subtask without keyed handles (which no key-group check meets), would restore its operator state
    as an extra subtask's."""
    mutate, inside = EDGES[edge]
    plain = plain_with_path("x")
    mutate(plain)
    if not inside:
        with pytest.raises(CheckpointFormatError, match=r"^sp/_metadata: "):
            decode_metadata(craft(plain), "sp/_metadata", "file:///data/sp")
        return
    meta = decode_metadata(craft(plain), "sp/_metadata", "file:///data/sp")
    operator = meta.operators[0]
    got = (meta.checkpoint_id, meta.timestamp_ms, operator.parallelism, operator.max_parallelism)
    want = (
        plain["checkpoint_id"],
        plain["timestamp_ms"],
        *(plain["operators"][0][k] for k in ("parallelism", "max_parallelism")),
    )
    assert got == want, f"{edge}: decoded (checkpoint id, timestamp, parallelism, max parallelism) {got}, not {want}"
    assert sorted(operator.subtask_states) == sorted(s["index"] for s in plain["operators"][0]["subtasks"]), edge


# -- on storage ------------------------------------------------------------------------------------------------------


@pytest.mark.requirement("FMT-5")
def test_pointer_forms_and_incomplete_checkpoints(storage: Any, tmp_path: Path) -> None:
    pointer, _ = savepoint(storage, HashMapStateBackend(), keys=20)
    assert load_checkpoint_metadata(pointer) == load_checkpoint_metadata(pointer + "/_metadata")
    (tmp_path / "job" / "chk-3").mkdir(parents=True)
    (tmp_path / "job" / "chk-3" / "state-file").write_bytes(b"half a checkpoint")
    with pytest.raises(IncompleteCheckpointError, match="no _metadata"):
        load_checkpoint_metadata(str(tmp_path / "job" / "chk-3"))
    with pytest.raises(CheckpointNotFoundError):
        load_checkpoint_metadata(str(tmp_path / "nothing-here"))


@pytest.mark.requirement("FMT-7")
def test_failed_metadata_write_leaves_no_checkpoint(tmp_path: Path, faulty_fs: Any) -> None:
    storage = FileSystemCheckpointStorage(f"faulty://{tmp_path}")
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    faulty_fs.fail_writes("*_metadata*", after_bytes=10)
    with pytest.raises(OSError, match="injected"):
        location.write_metadata(CheckpointMetadata(1, ()))
    with pytest.raises(IncompleteCheckpointError):
        storage.load_checkpoint(location.pointer)
    assert list((tmp_path / "job" / "chk-1").iterdir()) == [], "a half-written metadata file was left behind"
    faulty_fs.fail_moves("*/_metadata")
    with pytest.raises(OSError, match="injected"):
        location.write_metadata(CheckpointMetadata(1, ()))
    assert list((tmp_path / "job" / "chk-1").iterdir()) == []
    location.write_metadata(CheckpointMetadata(1, ()))
    with pytest.raises(StateCertError, match="refusing to overwrite"):
        location.write_metadata(CheckpointMetadata(2, ()))
    assert storage.load_checkpoint(location.pointer).checkpoint_id == 1


@pytest.mark.requirement("FMT-7", "CS-6")
@pytest.mark.parametrize("root", ["memory://statecert-faulty", "file"])
def test_the_fault_injecting_wrapper_reaches_any_file_system(tmp_path: Path, faulty_fs: Any, root: str) -> None:
    """`faulty+<protocol>://` passes every call to the wrapped file system and injects the same faults: a
    checkpoint whose metadata write fails there leaves nothing that looks complete."""
    # over the local file system: the wrapper, not the `faulty://` that faulty_url gives for local paths
    url = faulty_url(root) if root != "file" else f"faulty+file://{tmp_path}"
    storage = FileSystemCheckpointStorage(f"{url}/{uuid.uuid4().hex}")
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    fs, directory = fsspec.core.url_to_fs(location.pointer)
    assert type(fs).__name__ == "FaultInjectingWrapper"
    faulty_fs.fail_writes("*_metadata*", after_bytes=10)
    with pytest.raises(OSError, match="injected"):
        location.write_metadata(CheckpointMetadata(1, ()))
    with pytest.raises(IncompleteCheckpointError):
        storage.load_checkpoint(location.pointer)
    assert fs.ls(directory, detail=False) == [], "a half-written metadata file was left behind"
    location.write_metadata(CheckpointMetadata(1, ()))
    assert storage.load_checkpoint(location.pointer).checkpoint_id == 1
    wrapped = fsspec.filesystem("memory") if root.startswith("memory") else fsspec.filesystem("file")
    assert wrapped.exists(f"{directory}/_metadata"), "the checkpoint is on the wrapped file system"


@pytest.mark.requirement("CS-6")
def test_faulty_url_wraps_supported_protocols_and_names_the_others() -> None:
    assert faulty_url("/tmp/x") == "faulty:///tmp/x"
    assert faulty_url("file:///tmp/x") == "faulty:///tmp/x"
    assert faulty_url("s3://bucket/x") == "faulty+s3://bucket/x"
    assert faulty_url("faulty+gs://b/x") == "faulty+gs://b/x"
    with pytest.raises(ValueError, match="no fault-injecting wrapper for ftp://"):
        faulty_url("ftp://host/x")


def _large_heap_backend(keys: int) -> Any:
    """A heap backend whose key groups are large enough (> 64 KiB each) for the background writer."""
    from statecert.spec.keyed_backend import KeyedBackendParameters
    from statecert.spec.state import ListStateDescriptor

    params = KeyedBackendParameters("job", "op", StringSerializer(), 8, KeyGroupRange(0, 7))
    backend = HashMapStateBackend().create_keyed_state_backend(params)
    state = backend.get_or_create_state(ListStateDescriptor("l", element_serializer=StringSerializer()))
    for i in range(keys):
        backend.set_current_key(f"k{i}")
        state.add(f"{i:>6}" * 200)  # 1.2 KB per element
    return backend


@pytest.mark.requirement("FMT-6", "KB-SNAP-6")
@given(fail_after=st.integers(0, 2_000_000))  # the state file has about 2.4 MB
def test_a_large_snapshot_failing_mid_write_raises_and_leaves_no_file(tmp_path_factory: Any, fail_after: int) -> None:
    """A write failing at any byte of a large snapshot reaches the caller, and the half-written state file is gone.
    Without the failure the snapshot restores to the same state."""
    from statecert.spec.keyed_backend import KeyedBackendParameters
    from statecert.spec.state import VOID_NAMESPACE, ListStateDescriptor

    def contents(b: Any) -> dict[str, list[str]]:
        state = b.get_or_create_state(ListStateDescriptor("l", element_serializer=StringSerializer()))
        found = {}
        for key in b.get_keys("l", VOID_NAMESPACE):
            b.set_current_key(key)
            found[key] = list(state.get())
        return found

    root = tmp_path_factory.mktemp("large")
    backend = _large_heap_backend(2_000)  # about 2.4 MB in 8 key groups
    faulty = fsspec.filesystem("faulty")
    storage = FileSystemCheckpointStorage(f"faulty://{root}")
    access = storage.create_checkpoint_storage("job")
    rule = faulty.fail_writes(f"{root}/job/chk-1/*", after_bytes=fail_after, times=-1)
    try:
        with pytest.raises(OSError, match="injected"):
            backend.snapshot(1, 0, access.initialize_location_for_checkpoint(1)).run()
    finally:
        faulty.rules.remove(rule)
    assert [p for p in (root / "job" / "chk-1").rglob("*") if p.is_file()] == [], "a half-written file was left"
    handle = backend.snapshot(2, 0, access.initialize_location_for_checkpoint(2)).run()
    params = KeyedBackendParameters("job", "op", StringSerializer(), 8, KeyGroupRange(0, 7), restore_state=(handle,))
    restored = HashMapStateBackend().create_keyed_state_backend(params)
    assert contents(restored) == contents(backend)
