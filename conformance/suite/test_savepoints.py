"""Savepoints across backends, relocation, reading only owned key groups, bad state files (FMT, SP)."""

from __future__ import annotations

import re
import shutil
import sys
import uuid
from collections.abc import Callable
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import crc32c
import msgpack
import pytest

from statecert.conformance.helpers import (
    KEYS,
    counts,
    create_subtasks,
    first_canonical_entry,
    key_group_of,
    keyed_backend,
    listed_stream_handles,
    location_for,
    rewritten_canonical_stream,
    savepoint,
    stream_handles,
    with_stream_replaced,
)
from statecert.reference.format.canonical import CanonicalHeader
from statecert.reference.serializers import LongSerializer, MsgpackSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.spec.errors import CheckpointFormatError, StateMigrationError
from statecert.spec.handles import ByteStreamStateHandle, FileStateHandle, KeyGroupsStateHandle
from statecert.spec.keyed_backend import CheckpointOptions, SnapshotType
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.metadata import CheckpointKind
from statecert.spec.serializers import SerializerSnapshot
from statecert.spec.state import VOID_NAMESPACE, ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

GOLDEN = Path(str(resources.files("statecert.scenarios").joinpath("golden")))
COUNT = ValueStateDescriptor("count", serializer=LongSerializer())


@pytest.mark.requirement("FMT-9", "SP-4")
@pytest.mark.capability("canonical_savepoints", "rescaling")
def test_moved_savepoint_restores(state_backend: Any, tmp_path: Path) -> None:
    storage = FileSystemCheckpointStorage(
        str(tmp_path / "c"), savepoint_dir=str(tmp_path / "sp"), file_state_size_threshold=100
    )
    pointer, expected = savepoint(storage, state_backend)
    original = Path(pointer.removeprefix("file://"))
    moved = tmp_path / "archive" / "moved-savepoint"
    shutil.copytree(original, moved)
    shutil.rmtree(original)
    metadata = load_checkpoint_metadata(str(moved))
    files = [h.delegate for st_ in metadata.operators[0].subtask_states.values() for h in st_.managed_keyed_state]
    assert files and all(isinstance(f, FileStateHandle) and f.path.startswith(f"file://{moved}/") for f in files), (
        "FMT-9, SP-4: expected files and all((isinstance(f, FileStateHandle) and "
        "f.path.startswith(f'file://{moved}/') for f in files))"
    )
    assert counts(state_backend, metadata.operators[0], 2) == expected, (
        "FMT-9, SP-4: counts(state_backend, metadata.operators[0], 2): expected expected"
    )


@pytest.mark.requirement("FMT-6")
@pytest.mark.capability("canonical_savepoints", "rescaling")
def test_restore_reads_only_its_own_key_groups(state_backend: Any, tmp_path: Path) -> None:
    storage = FileSystemCheckpointStorage(
        str(tmp_path), savepoint_dir=str(tmp_path / "sp"), file_state_size_threshold=0
    )
    pointer, expected = savepoint(storage, state_backend, parallelism=1)
    metadata = load_checkpoint_metadata(pointer)
    handle = metadata.operators[0].subtask_states[0].managed_keyed_state[0]
    path = Path(handle.delegate.path.removeprefix("file://"))
    data = bytearray(path.read_bytes())
    second_half = handle.offset_of(64)
    data[second_half:] = b"\xff" * (len(data) - second_half)  # destroy key groups 64..127
    path.write_bytes(bytes(data))
    # Re-record the file's checksum (CS-9), so that only reading key groups 64..127 could notice the damage.
    assert isinstance(handle, KeyGroupsStateHandle) and isinstance(handle.delegate, FileStateHandle), (
        "FMT-6: expected isinstance(handle, KeyGroupsStateHandle) and isinstance(handle.delegate, FileStateHandle)"
    )
    rerecorded = replace(handle, delegate=replace(handle.delegate, checksum=crc32c.crc32c(bytes(data))))
    first_half_handle = rerecorded.intersection(KeyGroupRange(0, 63))
    assert first_half_handle is not None, "FMT-6: first_half_handle: expected not None"
    with keyed_backend(state_backend, parallelism=2, index=0, restore=[first_half_handle]) as first_half:
        state = first_half.get_or_create_state(COUNT)
        restored = {}
        for key in list(first_half.get_keys("count", VOID_NAMESPACE)):
            first_half.set_current_key(key)
            restored[key] = state.value()
        assert restored == {k: v for k, v in expected.items() if key_group_of(k) < 64}, (
            "FMT-6: restored: expected {k: v for k, v in expected.items() if key_group_of(k) < 64}"
        )
    with pytest.raises(CheckpointFormatError, match=re.escape(path.name)):
        create_subtasks(state_backend, KEYS, 2, 128, restore_from=metadata.operators[0])


def _rewritten_savepoint(
    reference_backend: Any,
    tmp_path: Path,
    change: Callable[[CanonicalHeader, dict[int, list[list[Any]]]], CanonicalHeader],
) -> KeyGroupsStateHandle:
    """A canonical savepoint of the reference backend whose stream is written again as `change(header, blocks)`
    says (it returns the header to write and may change the blocks in place), with its size and checksum recorded
    anew, so that only what the stream holds can give it away."""
    storage = FileSystemCheckpointStorage(
        str(tmp_path / "c"), savepoint_dir=str(tmp_path / "sp"), file_state_size_threshold=0
    )
    pointer, _ = savepoint(storage, reference_backend, parallelism=1)
    handle = load_checkpoint_metadata(pointer).operators[0].subtask_states[0].managed_keyed_state[0]
    assert isinstance(handle, KeyGroupsStateHandle), f"SP-1: a canonical savepoint's keyed handle: got {handle!r}"
    return rewritten_canonical_stream(handle, tmp_path / "hostile-stream", change)


def assert_nothing_left(local_dir: Path, what: str) -> None:
    """KB-LOCAL-2: a backend that failed to be created leaves nothing in its working directory."""
    left = sorted(str(p.relative_to(local_dir)) for p in local_dir.rglob("*"))
    assert left == [], f"KB-LOCAL-2: {what} left {left[:5]} in KeyedBackendParameters.local_dir"


@pytest.mark.requirement("FMT-8", "KB-LOCAL-2")
@pytest.mark.capability("canonical_savepoints")
def test_truncated_state_file_names_the_file(state_backend: Any, tmp_path: Path, local_dir: Path) -> None:
    storage = FileSystemCheckpointStorage(
        str(tmp_path), savepoint_dir=str(tmp_path / "sp"), file_state_size_threshold=0
    )
    pointer, _ = savepoint(storage, state_backend, parallelism=1)
    handle = load_checkpoint_metadata(pointer).operators[0].subtask_states[0].managed_keyed_state[0]
    path = Path(handle.delegate.path.removeprefix("file://"))
    path.write_bytes(path.read_bytes()[: handle.offset_of(100)])
    with pytest.raises(CheckpointFormatError, match=re.escape(path.name)):
        create_subtasks(state_backend, KEYS, 1, 128, restore_from=load_checkpoint_metadata(pointer).operators[0])
    assert_nothing_left(local_dir, "the failed restore of a truncated state file")


TRUNCATED_STATES = (
    ValueStateDescriptor("v", serializer=LongSerializer()),
    ListStateDescriptor("l", element_serializer=LongSerializer()),
    MapStateDescriptor("m", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer()),
)


def _every_entry(backend: Any) -> dict[tuple[str, Any], Any]:
    read = {"v": lambda s: s.value(), "l": lambda s: list(s.get()), "m": lambda s: sorted(s.items())}
    out = {}
    for descriptor in TRUNCATED_STATES:
        state = backend.get_or_create_state(descriptor)
        for key, _ in sorted(backend.get_keys_and_namespaces(descriptor.name)):
            backend.set_current_key(key)
            out[(descriptor.name, key)] = read[descriptor.name](state)
    return out


def _truncated(stream: Any, length: int, directory: Path) -> Any:
    """The stream handle `stream` cut to its first `length` bytes: a file written anew with its size and checksum
    recorded for the cut bytes (so only the content can give the cut away), or inline bytes cut."""
    if isinstance(stream, ByteStreamStateHandle):
        return ByteStreamStateHandle(stream.handle_name, stream.data[:length])
    with stream.open() as f:
        data = f.read(length)
    path = directory / f"{uuid.uuid4().hex}-{stream.path.rsplit('/', 1)[-1]}"
    path.write_bytes(data)
    return FileStateHandle(f"file://{path}", len(data), crc32c.crc32c(data))


@pytest.mark.requirement("FMT-8", "FMT-12", "KB-LOCAL-2")
@pytest.mark.parametrize("where", ["files", "inline"])
def test_a_truncated_stream_of_a_checkpoint_in_any_format_fails_its_restore(
    state_backend: Any, tmp_path: Path, local_dir: Path, where: str
) -> None:
    """Checkpoint 2, built on checkpoint 1, in whatever format the backend writes (canonical, native, changelog):
    each stream it references, cut to nothing, to a third, to half and to all but its last byte, with its size and
    checksum recorded anew. Restoring it raises CheckpointFormatError naming the stream, or restores exactly the
    state written (a stream the restore does not need, such as RocksDB's options file); never a smaller or other
    state, and nothing is left in the working directory."""
    storage = FileSystemCheckpointStorage(
        str(tmp_path / "c"), file_state_size_threshold=0 if where == "files" else 1 << 20
    )
    with keyed_backend(state_backend) as backend:
        for checkpoint_id in (1, 2):
            states = [backend.get_or_create_state(d) for d in TRUNCATED_STATES]
            for i in range(200):
                backend.set_current_key(f"k{i}")
                states[0].update(i * checkpoint_id)
                states[1].add(i)
                states[2].put(f"u{checkpoint_id}", i)
            handle = backend.snapshot(checkpoint_id, 0, location_for(storage, checkpoint_id)).run()
            backend.notify_checkpoint_complete(checkpoint_id)
        expected = _every_entry(backend)
    streams = stream_handles(handle)
    assert streams, "FMT-8, FMT-12, KB-LOCAL-2: the checkpoint references no stream"
    (tmp_path / "cut").mkdir()
    for stream in streams:
        name = stream.handle_name if isinstance(stream, ByteStreamStateHandle) else stream.path.rsplit("/", 1)[-1]
        for length in sorted({0, stream.size // 3, stream.size // 2, stream.size - 1} - {stream.size}):
            cut = _truncated(stream, length, tmp_path / "cut")
            call = f"restore of checkpoint 2 with {name} ({stream.size} bytes) cut to {length} bytes"
            try:
                with keyed_backend(state_backend, restore=[with_stream_replaced(handle, stream, cut)]) as restored:
                    got = _every_entry(restored)
            except CheckpointFormatError as e:
                shown = {name if isinstance(stream, ByteStreamStateHandle) else cut.path.rsplit("/", 1)[-1]}
                shown |= {n for n, s in listed_stream_handles(handle) if s == stream and n is not None}
                assert any(n in str(e) for n in shown), f"FMT-8: {call} raised {e!r}, which names none of {shown}"
            except Exception as e:  # any other type is what FMT-8 forbids
                pytest.fail(f"FMT-8: {call} raised {e!r}, expected CheckpointFormatError naming the stream")
            else:
                assert got == expected, (
                    f"FMT-8: {call} restored {len(got)} entries, {sum(got.get(k) != v for k, v in expected.items())} "
                    f"of the {len(expected)} written missing or other, instead of CheckpointFormatError"
                )
            assert_nothing_left(local_dir, f"the failed {call}")


def _move_first_entry_to_next_key_group(blocks: dict[int, list[Any]]) -> None:
    key_group = min(kg for kg, entries in blocks.items() if entries)
    blocks[key_group + 1].append(blocks[key_group].pop(0))


def _cut_first_value(blocks: dict[int, list[Any]]) -> None:
    key_group = min(kg for kg, entries in blocks.items() if entries)
    blocks[key_group][0][3] = blocks[key_group][0][3][:3]


@pytest.mark.requirement("FMT-15", "FMT-8", "KB-LOCAL-2")
@pytest.mark.capability("canonical_savepoints")
@pytest.mark.parametrize(
    "damage", [_move_first_entry_to_next_key_group, _cut_first_value], ids=["key-in-wrong-key-group", "value-cut"]
)
def test_hostile_canonical_entries_are_refused_on_restore(
    state_backend: Any, reference_backend: Any, tmp_path: Path, local_dir: Path, damage: Any
) -> None:
    """A canonical stream whose size and checksum were re-recorded after an entry was moved into another key
    group's block (no lookup would ever find it) or had its long value cut to 3 bytes: restoring it must raise
    CheckpointFormatError, not restore a smaller state or fail later on access; and leave nothing behind."""

    def damaged(header: CanonicalHeader, blocks: dict[int, list[list[Any]]]) -> CanonicalHeader:
        damage(blocks)
        return header

    hostile = _rewritten_savepoint(reference_backend, tmp_path, damaged)
    with (
        pytest.raises(CheckpointFormatError, match=re.escape(hostile.delegate.path.rsplit("/", 1)[-1])),
        keyed_backend(state_backend, parallelism=1, index=0, restore=[hostile]) as restored,
    ):
        state = restored.get_or_create_state(COUNT)
        for key in list(restored.get_keys("count", VOID_NAMESPACE)):
            restored.set_current_key(key)
            state.value()
        raise AssertionError(f"FMT-15: restored {damage.__name__} without CheckpointFormatError")
    assert_nothing_left(local_dir, f"the refused restore of a stream with {damage.__name__.strip('_')}")


SEEN = ListStateDescriptor("seen", element_serializer=LongSerializer())
TAGS = MapStateDescriptor("tags", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())


def _duplicate_first_entry(header: CanonicalHeader, blocks: dict[int, list[list[Any]]]) -> None:
    key_group = min(kg for kg, entries in blocks.items() if entries)
    blocks[key_group].append(list(blocks[key_group][0]))


def _repeat_first_user_key(pairs: list[list[bytes]]) -> None:
    """The map entry's first user key again, with another value: a reader keeping the last would lose the first."""
    pairs.append([pairs[0][0], LongSerializer().serialize(-1)])


HOSTILE_ENTRIES: dict[str, Callable[[CanonicalHeader, dict[int, list[list[Any]]]], None]] = {
    "key-not-a-string": lambda h, b: first_canonical_entry(h, b, "count").__setitem__(1, b"\xff\xfe\xfd"),
    "namespace-not-void": lambda h, b: first_canonical_entry(h, b, "count").__setitem__(2, b"x"),
    "entry-twice": _duplicate_first_entry,
    "entry-without-payload": lambda h, b: first_canonical_entry(h, b, "count").pop(),
    "state-index-out-of-range": lambda h, b: first_canonical_entry(h, b, "count").__setitem__(0, len(h.states)),
    "key-not-bytes": lambda h, b: first_canonical_entry(h, b, "count").__setitem__(1, "k0"),
    "list-without-elements": lambda h, b: first_canonical_entry(h, b, "seen").__setitem__(3, []),
    "list-element-not-bytes": lambda h, b: first_canonical_entry(h, b, "seen")[3].__setitem__(0, 5),
    "map-pair-without-value": lambda h, b: first_canonical_entry(h, b, "tags")[3][0].pop(),
    "list-element-cut": lambda h, b: first_canonical_entry(h, b, "seen")[3].__setitem__(0, b"abc"),
    "map-user-key-not-a-string": lambda h, b: first_canonical_entry(h, b, "tags")[3][0].__setitem__(0, b"\xff\xfe\xfd"),
    "map-user-value-cut": lambda h, b: first_canonical_entry(h, b, "tags")[3][0].__setitem__(1, b"abc"),
    "map-user-key-twice": lambda h, b: _repeat_first_user_key(first_canonical_entry(h, b, "tags")[3]),
}


@pytest.mark.requirement("FMT-15", "FMT-8", "IF-4")
@pytest.mark.capability("canonical_savepoints")
@pytest.mark.parametrize("damage", sorted(HOSTILE_ENTRIES))
def test_hostile_canonical_entries_of_every_kind_are_refused_on_restore(
    state_backend: Any, reference_backend: Any, tmp_path: Path, damage: str
) -> None:
    """A canonical savepoint of value, list and map state whose stream was written again with one entry damaged, its
    size and checksum recorded anew: a key or map user key that is not a string's encoding, a namespace of
    non-windowed state that is not the void namespace's, an entry given twice, a list element or map value cut to 3
    bytes, a map user key given twice in one entry (FMT-15), or an entry not shaped as IF-4 says (without its
    payload, naming no state of the header, a key that is not bytes, a list without elements or with an element
    that is not bytes, a map pair without its value). Restoring it and reading every state raises
    CheckpointFormatError naming the stream (FMT-8), never a smaller or other state, nor another error."""

    def damaged(header: CanonicalHeader, blocks: dict[int, list[list[Any]]]) -> CanonicalHeader:
        HOSTILE_ENTRIES[damage](header, blocks)
        return header

    _assert_refused(state_backend, _every_kind_savepoint(reference_backend, tmp_path), tmp_path, damaged, damage)


class _PlainHeader:
    """A header written as the plain msgpack value it holds, however malformed."""

    def __init__(self, plain: Any) -> None:
        self._plain = plain

    def to_plain(self) -> Any:
        return self._plain


def _state_of(plain: dict[str, Any], name: str) -> dict[str, Any]:
    return next(state for state in plain["states"] if state["name"] == name)


def _edited(edit: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """A header damage that edits the plain header in place."""

    def apply(plain: dict[str, Any]) -> Any:
        edit(plain)
        return plain

    return apply


HOSTILE_HEADERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "header-not-a-map": lambda plain: [plain],
    "key-serializer-missing": _edited(lambda plain: plain.pop("key_serializer")),
    "state-kind-unknown": _edited(lambda plain: _state_of(plain, "count").update(kind="set")),
    "map-without-user-value-role": _edited(lambda plain: _state_of(plain, "tags")["serializers"].pop("user_value")),
    "list-with-a-value-role-too": _edited(
        lambda plain: _state_of(plain, "seen")["serializers"].update(
            value=_state_of(plain, "seen")["serializers"]["element"]
        )
    ),
    "ttl-not-a-bool": _edited(lambda plain: _state_of(plain, "seen").update(ttl="no")),
    "state-name-twice": _edited(lambda plain: _state_of(plain, "seen").update(name="count")),
}


@pytest.mark.requirement("FMT-8", "IF-3")
@pytest.mark.capability("canonical_savepoints")
@pytest.mark.parametrize("damage", sorted(HOSTILE_HEADERS))
def test_hostile_canonical_headers_are_refused_on_restore(
    state_backend: Any, reference_backend: Any, tmp_path: Path, damage: str
) -> None:
    """The same savepoint with its header not as IF-3 says (not a map, no key serializer, a state of an unknown kind,
    a map state without its user value serializer, a list state with a value serializer beside its element
    serializer, a TTL flag that is not a bool, two states of one name), its entries untouched and size and checksum
    recorded anew: restoring it and reading every state raises CheckpointFormatError naming the stream, never a
    smaller or other state, nor another error. A state's serializer roles are exactly those of its kind: a reader
    that drops a role it does not expect reads a header no writer may write."""

    def damaged(header: CanonicalHeader, blocks: dict[int, list[list[Any]]]) -> Any:
        return _PlainHeader(HOSTILE_HEADERS[damage](header.to_plain()))

    savepoint = _every_kind_savepoint(reference_backend, tmp_path)
    _assert_refused(state_backend, savepoint, tmp_path, damaged, damage, cites="FMT-8, IF-3")


@pytest.mark.requirement("FMT-8", "IF-3")
@pytest.mark.capability("canonical_savepoints")
def test_a_canonical_state_named_with_nul_is_refused_or_restored_whole(
    state_backend: Any, reference_backend: Any, tmp_path: Path
) -> None:
    """KS-2 leaves NUL out of state names (a RocksDB column family cannot hold one), so a canonical header naming a
    state with NUL comes from no backend: restoring it raises CheckpointFormatError naming the stream, or restores
    that state as any other (every key of it there); never another error, such as a storage binding's own."""

    def renamed(header: CanonicalHeader, blocks: dict[int, list[list[Any]]]) -> Any:
        plain = header.to_plain()
        _state_of(plain, "seen")["name"] = "se\x00en"
        return _PlainHeader(plain)

    savepoint = _every_kind_savepoint(reference_backend, tmp_path)
    hostile = rewritten_canonical_stream(savepoint, tmp_path / "hostile-stream", renamed)
    try:
        with keyed_backend(state_backend, restore=[hostile]) as restored:
            keys = sorted(restored.get_keys("se\x00en", VOID_NAMESPACE))
            counts = {}
            for key in sorted(restored.get_keys(COUNT.name, VOID_NAMESPACE)):
                restored.set_current_key(key)
                counts[key] = restored.get_or_create_state(COUNT).value()
    except CheckpointFormatError as e:
        assert "hostile-stream" in str(e), f"FMT-8: the error names the stream {hostile.delegate}: {e}"
        return
    expected = sorted(f"k{i}" for i in range(40))
    assert keys == expected, f"IF-3: the state 'se\\x00en' restored: expected the keys {expected}, got {keys}"
    assert counts == {f"k{i}": i for i in range(40)}, f"IF-3: beside it, 'count' restored: got {counts}"


def _every_kind_savepoint(reference_backend: Any, tmp_path: Path) -> KeyGroupsStateHandle:
    """A canonical savepoint of the reference backend holding value (`count`), list (`seen`) and map (`tags`)
    state of 40 keys."""
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    with keyed_backend(reference_backend) as backend:
        count, seen, tags = (backend.get_or_create_state(d) for d in (COUNT, SEEN, TAGS))
        for i in range(40):
            backend.set_current_key(f"k{i}")
            count.update(i)
            seen.add_all([i, i + 1])
            tags.put(f"t{i}", i)
        handle = backend.snapshot(
            1, 0, location_for(storage), CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)
        ).run()
    assert isinstance(handle, KeyGroupsStateHandle), f"SP-1: snapshot(SAVEPOINT_CANONICAL).run(): got {handle!r}"
    return handle


def _assert_refused(
    state_backend: Any, handle: KeyGroupsStateHandle, tmp_path: Path, change: Any, damage: str, cites: str = "FMT-8"
) -> None:
    """Restore `handle` rewritten by `change` and read every state: CheckpointFormatError naming the stream (a
    failure names the requirements `cites` lists)."""
    hostile = rewritten_canonical_stream(handle, tmp_path / "hostile-stream", change)
    read: dict[str, Any] = {}
    with pytest.raises(CheckpointFormatError, match="hostile-stream"):
        with keyed_backend(state_backend, restore=[hostile]) as restored:
            for descriptor in (COUNT, SEEN, TAGS):
                state = restored.get_or_create_state(descriptor)
                for key in list(restored.get_keys(descriptor.name, VOID_NAMESPACE)):
                    restored.set_current_key(key)
                    read[f"{descriptor.name}[{key!r}]"] = (
                        list(state.items())
                        if descriptor is TAGS
                        else (state.value() if descriptor is COUNT else state.get())
                    )
        raise AssertionError(f"{cites}: a canonical stream with {damage} restored; read {len(read)} entries")


@pytest.mark.requirement("SER-4", "SER-8")
@pytest.mark.capability("canonical_savepoints")
def test_a_serializer_a_snapshot_names_is_never_imported(
    state_backend: Any, reference_backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile savepoint names its value serializer by an importable `module:attr`: restoring it and registering
    the state fails with StateMigrationError (an unknown id, SER-4) and never imports that module, as a backend
    resolving serializers by import path (the way Flink's snapshots name Java classes) would."""
    probe = f"statecert_serializer_probe_{uuid.uuid4().hex}"
    marker = tmp_path / "imported"
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / f"{probe}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\nclass Serializer:\n    pass\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path / "probe"))
    named = SerializerSnapshot(f"{probe}:Serializer", 1, {})

    def renamed(header: CanonicalHeader, blocks: dict[int, list[list[Any]]]) -> CanonicalHeader:
        return replace(header, states=tuple(replace(m, serializers={"value": named}) for m in header.states))

    hostile = _rewritten_savepoint(reference_backend, tmp_path, renamed)
    try:
        with keyed_backend(state_backend, parallelism=1, index=0, restore=[hostile]) as restored:
            restored.get_or_create_state(COUNT)
    except StateMigrationError:
        pass
    else:
        pytest.fail(
            f"SER-4: get_or_create_state(count, long) over state written by {named.serializer_id!r}: expected "
            "StateMigrationError, got the state"
        )
    assert not marker.exists() and probe not in sys.modules, (
        f"SER-4: restoring a savepoint that names the serializer {named.serializer_id!r} imported {probe}"
    )


@pytest.mark.requirement("FMT-3", "SP-1")
@pytest.mark.capability("canonical_savepoints", "rescaling", "operator_state")
@pytest.mark.parametrize("parallelism", [1, 2, 3])
@pytest.mark.parametrize("version", [1, 2, 3])
def test_golden_savepoint_of_every_older_format_version_restores(
    state_backend: Any, tmp_path: Path, parallelism: int, version: int
) -> None:
    copy = tmp_path / "golden"
    shutil.copytree(GOLDEN / f"v{version}-savepoint", copy)  # also proves relocation: it was written elsewhere
    metadata = load_checkpoint_metadata(str(copy))
    assert metadata.checkpoint_id == 7 and metadata.kind is CheckpointKind.SAVEPOINT_CANONICAL, (
        "FMT-3, SP-1: expected metadata.checkpoint_id == 7 and metadata.kind is CheckpointKind.SAVEPOINT_CANONICAL"
    )
    seen: dict[str, Any] = {}
    offsets: list[int] = []
    for s in create_subtasks(
        state_backend,
        KEYS,
        parallelism,
        128,
        operator_id="counts",
        restore_from=metadata.operator("counts"),
    ):
        count = s.keyed.get_or_create_state(COUNT)
        lst = s.keyed.get_or_create_state(ListStateDescriptor("seen", element_serializer=LongSerializer()))
        for key in list(s.keyed.get_keys("count", VOID_NAMESPACE)):
            s.keyed.set_current_key(key)
            seen[key] = (count.value(), lst.get())
        offsets += s.operator.get_list_state(ListStateDescriptor("offsets", element_serializer=LongSerializer())).get()
        s.dispose()
    assert seen == {f"w{i}": (i, [i, i * 2]) for i in range(26)}, (
        "FMT-3, SP-1: seen: expected {f'w{i}': (i, [i, i * 2]) for i in range(26)}"
    )
    assert sorted(offsets) == [0, 1], "FMT-3, SP-1: sorted(offsets): expected [0, 1]"


MSGPACK_KEYS = MsgpackSerializer()
BY_WINDOW = ValueStateDescriptor("by-window", serializer=LongSerializer())
BY_ID = MapStateDescriptor("by-id", user_key_serializer=MsgpackSerializer(), user_value_serializer=LongSerializer())


def _in_a_wider_format(data: bytes) -> bytes:
    """The msgpack value of `data` written in a format msgpack never picks for it (an int as int64, a str as
    str32): bytes that decode to the same value and are not what the serializer writes for it."""
    value: int | str = msgpack.unpackb(data)
    if isinstance(value, int):
        return b"\xd3" + value.to_bytes(8, "big", signed=True)
    encoded = value.encode()
    return b"\xdb" + len(encoded).to_bytes(4, "big") + encoded


def _msgpack_keyed_savepoint(reference_backend: Any, tmp_path: Path) -> tuple[KeyGroupsStateHandle, dict[str, Any]]:
    """A canonical savepoint of the reference backend keyed by msgpack values (ints and texts), with value state in
    msgpack namespaces and map state under msgpack user keys; and what each holds."""
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    expected: dict[str, Any] = {"by-window": {}, "by-id": {}}
    with keyed_backend(reference_backend, key_serializer=MSGPACK_KEYS) as backend:
        ids = backend.get_or_create_state(BY_ID)
        for i, key in enumerate([1, 200, -5, "a", "key"]):
            backend.set_current_key(key)
            for window in (7, "w"):
                backend.get_partitioned_state(window, BY_WINDOW, MsgpackSerializer()).update(i)
                expected["by-window"][(key, window)] = i
            ids.put_all({3: i, "id": -i})
            expected["by-id"][key] = sorted([(3, i), ("id", -i)], key=repr)
        handle = backend.snapshot(
            1, 0, location_for(storage), CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)
        ).run()
    assert isinstance(handle, KeyGroupsStateHandle), f"SP-1: snapshot(SAVEPOINT_CANONICAL).run(): got {handle!r}"
    return handle, expected


def _found_by_lookups(backend: Any, expected: dict[str, Any]) -> dict[str, Any]:
    """What lookups by the written keys, namespaces and user keys find, and how often the listings name each."""
    ids = backend.get_or_create_state(BY_ID)
    got: dict[str, Any] = {"by-window": {}, "by-id": {}}
    for key, window in expected["by-window"]:
        backend.set_current_key(key)
        got["by-window"][(key, window)] = backend.get_partitioned_state(window, BY_WINDOW, MsgpackSerializer()).value()
    for key in expected["by-id"]:
        backend.set_current_key(key)
        got["by-id"][key] = sorted(((u, ids.get(u)) for u in (3, "id")), key=repr)
        got[f"by-id listed for {key!r}"] = sorted(ids.items(), key=repr)
    got["by-window listed"] = sorted(backend.get_keys_and_namespaces("by-window"), key=repr)
    return got


@pytest.mark.requirement("FMT-15", "KB-RESTORE-1")
@pytest.mark.capability("canonical_savepoints")
@pytest.mark.parametrize("field", ["key", "namespace", "map user key"])
def test_a_key_namespace_or_user_key_in_another_encoding_is_refused_or_found(
    state_backend: Any, reference_backend: Any, tmp_path: Path, field: str
) -> None:
    """A canonical stream whose first entry holds its key, namespace or map user key in a msgpack format the
    serializer never writes for that value (an int as int64, a text as str32), in the right key group: the bytes
    decode, and a lookup, which serializes what it looks for, never finds them. Restoring it raises
    CheckpointFormatError naming the stream, or restores the entry where lookups find it; never an entry that is
    listed and not found, which is a smaller state."""
    savepoint, expected = _msgpack_keyed_savepoint(reference_backend, tmp_path)
    state, position = {"key": ("by-window", 1), "namespace": ("by-window", 2), "map user key": ("by-id", 3)}[field]

    def damaged(header: CanonicalHeader, blocks: dict[int, list[list[Any]]]) -> CanonicalHeader:
        entry = first_canonical_entry(header, blocks, state)
        if position == 3:
            entry[3][0][0] = _in_a_wider_format(entry[3][0][0])
        else:
            entry[position] = _in_a_wider_format(entry[position])
        return header

    hostile = rewritten_canonical_stream(savepoint, tmp_path / "hostile-stream", damaged)
    try:
        with keyed_backend(state_backend, key_serializer=MSGPACK_KEYS, restore=[hostile]) as restored:
            got = _found_by_lookups(restored, expected)
    except CheckpointFormatError as e:
        assert "hostile-stream" in str(e), f"FMT-8: the error names the stream {hostile.delegate}: {e}"
        return
    want = {
        **expected,
        **{f"by-id listed for {key!r}": items for key, items in expected["by-id"].items()},
        "by-window listed": sorted(expected["by-window"], key=repr),
    }
    wrong = {what: _differences(want[what], got[what]) for what in want if got[what] != want[what]}
    assert not wrong, (
        f"FMT-15: restored with a {field} in another encoding, neither refused nor found: (expected, got) {wrong}"
    )


def _differences(want: Any, got: Any) -> Any:
    """(expected, got) of the entries of two mappings that differ, or of two values."""
    if isinstance(want, dict) and isinstance(got, dict):
        return {k: (want.get(k), got.get(k)) for k in {**want, **got} if want.get(k) != got.get(k)}
    return (want, got)
