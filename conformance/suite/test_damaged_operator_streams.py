"""Damaged operator state streams (OS-8, FMT-8): every way an IF-6 stream or its handle can be wrong fails the
restore with `CheckpointFormatError` naming the stream, never restores fewer or other elements."""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c
import msgpack
import pytest

from statecert.conformance.helpers import operator_backend
from statecert.reference.serializers import LongSerializer, MsgpackSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.errors import CheckpointFormatError
from statecert.spec.handles import FileStateHandle, OperatorStateHandle, OperatorStateMode, OperatorStatePartitions
from statecert.spec.state import ListStateDescriptor, MapStateDescriptor

OFFSETS = ListStateDescriptor("offsets", element_serializer=LongSerializer())
NAMES = ListStateDescriptor("names", element_serializer=StringSerializer())
TAIL = ListStateDescriptor("tail", element_serializer=StringSerializer())  # the stream's last state (IF-6 order)
RULES = MapStateDescriptor("rules", user_key_serializer=MsgpackSerializer(), user_value_serializer=StringSerializer())
MSGPACK = MsgpackSerializer()


@dataclass
class Stream:
    """An IF-6 stream built from the chapter's text, so that each test can damage one part of it."""

    magic: bytes = b"SCOP"
    version: int = 1
    header: dict[str, Any] = field(default_factory=dict)
    elements: dict[str, list[bytes]] = field(default_factory=dict)
    raw_header: bytes | None = None
    modes: dict[str, OperatorStateMode] = field(default_factory=dict)

    def add(self, name: str, mode: str, serializer: dict[str, Any], elements: list[bytes]) -> None:
        self.header[name] = {"mode": mode, "serializer": serializer}
        self.elements[name] = elements
        self.modes[name] = OperatorStateMode(mode)  # what the handle says, even where the header is damaged

    def encode(self) -> tuple[bytes, dict[str, OperatorStatePartitions]]:
        head = self.raw_header if self.raw_header is not None else msgpack.packb(self.header, use_bin_type=True)
        out = bytearray(struct.pack(">4sHI", self.magic, self.version, len(head)) + head)
        partitions = {}
        for name in sorted(self.elements):
            offsets = []
            for element in self.elements[name]:
                offsets.append(len(out))
                out += struct.pack(">I", len(element)) + element
            partitions[name] = OperatorStatePartitions(self.modes[name], tuple(offsets))
        return bytes(out), partitions


def _plain(serializer: Any) -> dict[str, Any]:
    return dict(serializer.snapshot_configuration().to_plain())


def _intact(tail: tuple[str, ...] = ("", "xyz")) -> Stream:
    """Every mode, a broadcast entry, and a last state whose last element is text: cut short by a byte it is still
    text, so only checking each element's length against the stream can notice."""
    stream = Stream()
    stream.add("offsets", "split", _plain(LongSerializer()), [LongSerializer().serialize(v) for v in (3, -1, 7)])
    stream.add("names", "union", _plain(StringSerializer()), [b"a", b"bc"])
    tuple_snapshot = {
        "id": "tuple",
        "version": 1,
        "config": {"fields": [_plain(MSGPACK), _plain(StringSerializer())]},
    }
    entries = [msgpack.packb([MSGPACK.serialize(k), v.encode()], use_bin_type=True) for k, v in ((1, "x"), ("k", "y"))]
    stream.add("rules", "broadcast", tuple_snapshot, entries)
    stream.add("tail", "split", _plain(StringSerializer()), [t.encode() for t in tail])
    return stream


Damage = Callable[[Stream, bytes, dict[str, OperatorStatePartitions]], tuple[bytes, dict[str, OperatorStatePartitions]]]


def _rebuilt(change: Callable[[Stream], None]) -> Damage:
    def damage(stream: Stream, _data: bytes, _partitions: dict[str, OperatorStatePartitions]) -> Any:
        change(stream)
        return stream.encode()

    return damage


def _cut_last_element(stream: Stream, data: bytes, partitions: dict[str, OperatorStatePartitions]) -> Any:
    return data[:-1], partitions  # "xyz", the last element of the last state, loses its last byte


def _offset_into_the_header(stream: Stream, data: bytes, partitions: dict[str, OperatorStatePartitions]) -> Any:
    split = partitions["offsets"]
    return data, {**partitions, "offsets": OperatorStatePartitions(split.mode, (0, *split.offsets[1:]))}


def _offset_past_the_end(stream: Stream, data: bytes, partitions: dict[str, OperatorStatePartitions]) -> Any:
    split = partitions["offsets"]
    return data, {**partitions, "offsets": OperatorStatePartitions(split.mode, (*split.offsets, len(data) + 40))}


def _state_not_in_the_header(stream: Stream, data: bytes, partitions: dict[str, OperatorStatePartitions]) -> Any:
    return data, {**partitions, "ghost": partitions["offsets"]}


def _handle_says_union(stream: Stream, data: bytes, partitions: dict[str, OperatorStatePartitions]) -> Any:
    split = partitions["offsets"]
    return data, {**partitions, "offsets": OperatorStatePartitions(OperatorStateMode.UNION, split.offsets)}


def _header_not_msgpack(stream: Stream) -> None:
    stream.raw_header = b"\xc1" * 12  # 0xc1 is never used in msgpack


def _header_not_a_map(stream: Stream) -> None:
    stream.raw_header = msgpack.packb(["offsets", "split"])


def _foreign_magic(stream: Stream) -> None:
    stream.magic = b"SCKG"


def _unknown_version(stream: Stream) -> None:
    stream.version = 2


def _long_of_three_bytes(stream: Stream) -> None:
    stream.elements["offsets"][1] = b"\x00\x00\x01"


def _broadcast_entry_not_a_pair(stream: Stream) -> None:
    stream.elements["rules"][0] = msgpack.packb([MSGPACK.serialize(1)], use_bin_type=True)


def _broadcast_entry_not_msgpack(stream: Stream) -> None:
    stream.elements["rules"][1] = b"\xc1"


def _tuple_snapshot_of_version_2(stream: Stream) -> None:
    stream.header["rules"]["serializer"]["version"] = 2


def _broadcast_state_not_under_the_tuple_serializer(stream: Stream) -> None:
    stream.header["rules"]["serializer"] = _plain(StringSerializer())


def _unknown_mode(stream: Stream) -> None:
    stream.header["names"]["mode"] = "scatter"


DAMAGES: dict[str, Damage] = {
    "last-element-cut": _cut_last_element,
    "offset-past-the-end": _offset_past_the_end,
    "offset-into-the-header": _offset_into_the_header,
    "state-not-in-the-header": _state_not_in_the_header,
    "handle-mode-differs-from-the-header": _handle_says_union,
    "header-not-msgpack": _rebuilt(_header_not_msgpack),
    "header-not-a-map": _rebuilt(_header_not_a_map),
    "foreign-magic": _rebuilt(_foreign_magic),
    "unknown-stream-version": _rebuilt(_unknown_version),
    "unknown-mode-in-the-header": _rebuilt(_unknown_mode),
    "long-element-of-three-bytes": _rebuilt(_long_of_three_bytes),
    "broadcast-entry-not-a-pair": _rebuilt(_broadcast_entry_not_a_pair),
    "broadcast-entry-not-msgpack": _rebuilt(_broadcast_entry_not_msgpack),
    "broadcast-tuple-snapshot-of-version-2": _rebuilt(_tuple_snapshot_of_version_2),
    "broadcast-state-not-under-the-tuple-serializer": _rebuilt(_broadcast_state_not_under_the_tuple_serializer),
}


def _stream_file(path: Path, data: bytes, partitions: dict[str, OperatorStatePartitions]) -> OperatorStateHandle:
    """`data` written to `path`, as the handle of an operator stream with its size and checksum recorded."""
    path.write_bytes(data)
    return OperatorStateHandle(partitions, FileStateHandle(path.as_uri(), len(data), crc32c.crc32c(data)))


def _restore_and_read_everything(state_backend: Any, *handles: OperatorStateHandle) -> tuple[Any, ...]:
    with operator_backend(state_backend, handles) as restored:
        return (
            list(restored.get_list_state(OFFSETS).get()),
            list(restored.get_union_list_state(NAMES).get()),
            sorted(map(repr, restored.get_broadcast_state(RULES).items())),
            list(restored.get_list_state(TAIL).get()),
        )


@pytest.mark.requirement("OS-8", "IF-6")
@pytest.mark.capability("operator_state")
@pytest.mark.parametrize("tail", [("", "xyz"), ("xyz", "")], ids=["text-last", "empty-element-last"])
def test_an_intact_stream_written_from_the_chapter_restores(
    state_backend: Any, tmp_path: Path, tail: tuple[str, ...]
) -> None:
    """The control of the damage tests below: the undamaged stream they start from restores in full, also when
    its last element is empty and ends the stream with its length field."""
    handle = _stream_file(tmp_path / "operator-stream", *_intact(tail).encode())
    got = _restore_and_read_everything(state_backend, handle)
    expected = ([3, -1, 7], ["a", "bc"], sorted(map(repr, [(1, "x"), ("k", "y")])), list(tail))
    assert got == expected, f"IF-6: the stream written from the chapter restored as {got}, expected {expected}"


@pytest.mark.requirement("OS-8", "FMT-8")
@pytest.mark.capability("operator_state")
@pytest.mark.parametrize("name", list(DAMAGES))
def test_a_damaged_operator_stream_is_refused_naming_the_stream(state_backend: Any, tmp_path: Path, name: str) -> None:
    """A stream whose size and checksum were recorded after the damage (so only reading it can tell): creating the
    operator backend, registering the states or reading them raises CheckpointFormatError naming the file."""
    intact = _intact()
    handle = _stream_file(tmp_path / "damaged-operator-stream", *DAMAGES[name](intact, *intact.encode()))
    _assert_refused_naming(state_backend, (handle,), "damaged-operator-stream", f"OS-8: {name}")


def _assert_refused_naming(state_backend: Any, handles: tuple[OperatorStateHandle, ...], file: str, what: str) -> None:
    """Restoring `handles` and reading every state raises CheckpointFormatError naming `file`; `what` starts each
    failure's message (the requirement and the case)."""
    try:
        got = _restore_and_read_everything(state_backend, *handles)
    except CheckpointFormatError as exc:
        assert re.search(re.escape(file), str(exc)), f"{what}: the error does not name the file {file}: {exc}"
        return
    except Exception as exc:
        raise AssertionError(f"{what}: expected CheckpointFormatError, got {exc!r}") from exc
    raise AssertionError(f"{what}: restored {got} without CheckpointFormatError")


@pytest.mark.requirement("OS-8", "FMT-12")
@pytest.mark.capability("operator_state")
@pytest.mark.parametrize("streams", [1, pytest.param(2, marks=pytest.mark.capability("rescaling"))])
def test_an_operator_stream_whose_file_is_gone_is_refused(state_backend: Any, tmp_path: Path, streams: int) -> None:
    """A subtask's stream whose file is gone, restored alone or with another subtask's into one backend (a rescale
    to parallelism 1): CheckpointFormatError naming it, not the other subtask's elements alone or nothing (a
    backend that leaves out what it cannot find restores a smaller state instead of an error)."""
    names = ("first-operator-stream", "second-operator-stream")[2 - streams :]
    handles = tuple(_stream_file(tmp_path / name, *_intact().encode()) for name in names)
    (tmp_path / "second-operator-stream").unlink()
    what = f"FMT-12: {streams} stream(s), the last one's file gone"
    _assert_refused_naming(state_backend, handles, "second-operator-stream", what)


@pytest.mark.requirement("OS-8", "FMT-12")
@pytest.mark.capability("operator_state")
def test_an_operator_stream_with_changed_bytes_is_refused(state_backend: Any, tmp_path: Path) -> None:
    """One byte of an element changed in the file after it was written, size unchanged and the recorded CRC-32C no
    longer matching: the restore (or the read of the state) fails with CheckpointFormatError, never gives another
    element, as a backend reading the file without the handle's checks would."""
    mark = 0x5A17C0DE00000000
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    with operator_backend(state_backend) as backend:
        backend.get_list_state(OFFSETS).add_all([mark + i for i in range(20)])
        handle = backend.snapshot(1, 0, location).run()
    assert isinstance(handle.delegate, FileStateHandle), f"OS-8, FMT-12: threshold 0 gave no file: {handle.delegate}"
    path = Path(handle.delegate.path.removeprefix("file://"))
    data = bytearray(path.read_bytes())
    position = data.find(LongSerializer().serialize(mark + 7))
    position = position + 7 if position >= 0 else len(data) // 2
    data[position] ^= 0x01
    path.write_bytes(bytes(data))
    got: Any = None
    with pytest.raises(CheckpointFormatError):
        with operator_backend(state_backend, (handle,)) as restored:
            got = [v - mark for v in restored.get_list_state(OFFSETS).get()]
        raise AssertionError(f"FMT-12: an operator stream with byte {position} changed restored as {got}")


@pytest.mark.requirement("FMT-15", "OS-3")
@pytest.mark.capability("operator_state")
def test_a_broadcast_user_key_in_another_encoding_is_refused_or_found(state_backend: Any, tmp_path: Path) -> None:
    """The broadcast entry of user key 1 with its key written as msgpack int64, a format msgpack never picks for 1:
    the bytes decode, and `get(1)`, which serializes what it looks for, never finds them. Restoring the stream
    raises CheckpointFormatError naming it, or restores the entry where `get` and `contains` find it; never an entry
    `items()` lists and `get` does not find."""
    stream = _intact()
    wider = b"\xd3" + (1).to_bytes(8, "big", signed=True)
    stream.elements["rules"][0] = msgpack.packb([wider, b"x"], use_bin_type=True)
    handle = _stream_file(tmp_path / "damaged-operator-stream", *stream.encode())
    try:
        with operator_backend(state_backend, (handle,)) as restored:
            rules = restored.get_broadcast_state(RULES)
            got = (rules.get(1), rules.contains(1), sorted(map(repr, rules.items())))
    except CheckpointFormatError as e:
        assert "damaged-operator-stream" in str(e), f"OS-8: the error names the stream: {e}"
        return
    expected = ("x", True, sorted(map(repr, [(1, "x"), ("k", "y")])))
    assert got == expected, (
        f"FMT-15: a broadcast user key in another encoding, neither refused nor found: (get(1), contains(1), items()) "
        f"expected {expected}, got {got}"
    )
