"""The canonical savepoint format: one stream per subtask, key-group ordered, backend independent (SP-1, FMT-6).

Layout: `b"SCKG" | >H version | >I header length | msgpack header | per key group: >I length | msgpack block`.
The header names the key serializer and every state (StateMetaInfo). A block is a list of entries
`[state index, key bytes, namespace bytes, payload]`; the payload is the value's bytes (value, reducing,
aggregating), a list of element bytes (list) or a list of `[user key bytes, value bytes]` pairs (map). Bytes are
the state serializers' output, TTL-wrapped when the state has TTL. The key-groups handle holds one offset per
key group, so a restoring subtask reads only the key groups it owns (KB-RESTORE-2).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import msgpack

from statecert.reference.format.handle_codec import field
from statecert.reference.format.state_meta import StateMetaInfo
from statecert.spec.errors import CheckpointFormatError, SnapshotCancelledError
from statecert.spec.handles import CANONICAL_FORMAT, FileStateHandle, KeyGroupsStateHandle, StreamStateHandle
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.serializers import SerializerSnapshot
from statecert.spec.state import StateKind
from statecert.spec.storage import CheckpointedStateScope, CheckpointStateOutputStream, CheckpointStreamFactory

MAGIC = b"SCKG"
VERSION = 1
_PREFIX = struct.Struct(">4sHI")
_LEN = struct.Struct(">I")
MAX_BLOCK = 1 << 31
MAX_HEADER = 1 << 26
READ_ERRORS = (OSError, ValueError, OverflowError)

Entry = list[Any]  # [state index, key bytes, namespace bytes, payload]


@dataclass(frozen=True)
class CanonicalHeader:
    backend: str
    key_serializer: SerializerSnapshot
    states: tuple[StateMetaInfo, ...]

    def to_plain(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "key_serializer": self.key_serializer.to_plain(),
            "states": [s.to_plain() for s in self.states],
        }


def describe(handle: StreamStateHandle) -> str:
    """How error messages name a stream: its file, or the inline handle."""
    return handle.path if isinstance(handle, FileStateHandle) else f"<inline state {handle.handle_name}>"


class _BlockWriter:
    """Packs each key-group block into one reused msgpack buffer and writes it with its length prefix. The buffer
    stays in the CPU cache between packing, the stream's CRC and the file write, and reusing it spares the kernel
    zeroing fresh pages for every block. (A background writer thread measured slower: packing and the write are
    both memory-bound, and the GIL hand-offs cost more than the overlap gained; see the README's benchmarks.)"""

    def __init__(self, stream: CheckpointStateOutputStream) -> None:
        self._stream = stream
        self._buffers = getattr(stream, "accepts_buffers", False)  # else each block is written as bytes
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=False)

    def write_block(self, entries: list[Entry]) -> int:
        """Pack and write one block with its length prefix; returns the bytes it adds to the stream."""
        packer = self._packer
        packer.reset()
        packer.pack(entries)
        view = packer.getbuffer()
        try:
            size = len(view)
            self._stream.write(_LEN.pack(size))
            self._stream.write(view if self._buffers else view.tobytes())  # type: ignore[arg-type]
        finally:
            view.release()
        return _LEN.size + size


def write_key_groups(
    stream: CheckpointStateOutputStream,
    header: CanonicalHeader,
    key_group_range: KeyGroupRange,
    blocks: Callable[[int], Iterable[Entry]],
    cancelled: Callable[[], bool] = lambda: False,
) -> tuple[int, ...]:
    """Write header and one block per key group of the range; returns the offsets (FMT-6)."""
    head = msgpack.packb(header.to_plain(), use_bin_type=True)
    stream.write(_PREFIX.pack(MAGIC, VERSION, len(head)) + head)
    position = stream.tell()
    writer = _BlockWriter(stream)
    offsets = []
    for key_group in key_group_range:
        if cancelled():
            raise SnapshotCancelledError("snapshot cancelled while writing key groups")
        offsets.append(position)
        position += writer.write_block(list(blocks(key_group)))
    return tuple(offsets)


def write_canonical_snapshot(
    stream_factory: CheckpointStreamFactory,
    header: CanonicalHeader,
    key_group_range: KeyGroupRange,
    blocks: Callable[[int], Iterable[Entry]],
    cancelled: Callable[[], bool] = lambda: False,
) -> KeyGroupsStateHandle:
    """A whole canonical snapshot: one exclusive stream of key groups, returned as its key-groups handle (SP-1)."""
    with stream_factory.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        offsets = write_key_groups(out, header, key_group_range, blocks, cancelled)
        delegate = out.close_and_get_handle()
    if delegate is None:
        raise ValueError("a canonical snapshot stream cannot be empty")
    return KeyGroupsStateHandle(key_group_range, offsets, delegate, CANONICAL_FORMAT)


class CanonicalReader:
    """Reads the header and the key groups of one key-groups handle; every problem names the file (FMT-8)."""

    def __init__(self, handle: KeyGroupsStateHandle) -> None:
        self.handle = handle
        self.name = describe(handle.delegate)
        self._file: IO[bytes] = handle.delegate.open()
        try:
            self.header = self._read_header()
        except BaseException:
            self._file.close()
            raise

    def __enter__(self) -> CanonicalReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()

    def _fail(self, problem: str) -> CheckpointFormatError:
        return CheckpointFormatError(self.name, problem)

    def _read_exact(self, size: int, what: str) -> bytes:
        try:
            data = self._file.read(size)
        except READ_ERRORS as exc:
            raise self._fail(f"cannot read {what}: {exc}") from None
        if len(data) != size:
            raise self._fail(f"truncated: {what} needs {size} bytes, {len(data)} present")
        return bytes(data)

    def _read_header(self) -> CanonicalHeader:
        magic, version, length = _PREFIX.unpack(self._read_exact(_PREFIX.size, "the canonical header"))
        if magic != MAGIC:
            raise self._fail(f"not a canonical key-groups stream (magic {magic!r})")
        if version != VERSION:
            raise self._fail(f"unknown canonical stream version {version}")
        if length > MAX_HEADER:
            raise self._fail(f"implausible canonical header length {length}")
        plain = self._unpack(self._read_exact(length, "the canonical header"))
        try:
            header = CanonicalHeader(
                field(plain, "backend", str),
                SerializerSnapshot.from_plain(field(plain, "key_serializer", dict)),
                tuple(StateMetaInfo.from_plain(s) for s in field(plain, "states", list)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._fail(f"malformed canonical header: {exc}") from None
        names = [s.name for s in header.states]
        if len(set(names)) != len(names):
            raise self._fail("malformed canonical header: a state is described twice")
        return header

    def _unpack(self, data: bytes) -> Any:
        try:
            return msgpack.unpackb(data, raw=False, strict_map_key=True)
        except (ValueError, TypeError, RecursionError, msgpack.UnpackException) as exc:
            raise self._fail(f"corrupt block: {exc!r}") from None

    def key_group(self, key_group: int) -> list[Entry]:
        """The entries of one key group, validated against the header."""
        offset = self.handle.offset_of(key_group)
        try:
            self._file.seek(offset)
        except READ_ERRORS as exc:
            raise self._fail(f"key group {key_group}: cannot seek to offset {offset}: {exc}") from None
        (length,) = _LEN.unpack(self._read_exact(_LEN.size, f"key group {key_group}"))
        if length > MAX_BLOCK:
            raise self._fail(f"key group {key_group}: implausible block length {length}")
        entries = self._unpack(self._read_exact(length, f"key group {key_group}"))
        if not isinstance(entries, list):
            raise self._fail(f"key group {key_group}: block is not a list")
        seen: set[tuple[int, bytes, bytes]] = set()
        for entry in entries:
            self._check_entry(entry, key_group)
            identity = (entry[0], entry[1], entry[2])
            if identity in seen:
                raise self._fail(f"key group {key_group}: the same key and namespace appear twice in one state")
            seen.add(identity)
        return entries

    def _check_entry(self, entry: Any, key_group: int) -> None:
        ok = (
            isinstance(entry, list)
            and len(entry) == 4
            and isinstance(entry[0], int)
            and 0 <= entry[0] < len(self.header.states)
            and isinstance(entry[1], bytes)
            and isinstance(entry[2], bytes)
        )
        if ok:
            kind = self.header.states[entry[0]].kind
            payload = entry[3]
            if kind is StateKind.LIST:  # never empty (IF-4): an empty list is no entry at all
                ok = isinstance(payload, list) and bool(payload) and all(isinstance(e, bytes) for e in payload)
            elif kind is StateKind.MAP:
                ok = (
                    isinstance(payload, list)
                    and bool(payload)
                    and all(
                        isinstance(p, list) and len(p) == 2 and isinstance(p[0], bytes) and isinstance(p[1], bytes)
                        for p in payload
                    )
                    and len({p[0] for p in payload}) == len(payload)
                )
            else:
                ok = isinstance(payload, bytes)
        if not ok:
            raise self._fail(f"key group {key_group}: malformed entry")

    def entries(self, key_group_range: KeyGroupRange) -> Iterator[tuple[int, list[Entry]]]:
        """(key group, entries) for each key group in both this handle's and `key_group_range`."""
        for key_group in self.handle.key_group_range.intersection(key_group_range):
            yield key_group, self.key_group(key_group)
