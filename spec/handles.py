"""State handles: what a snapshot returns and `_metadata` records (spec chapter FMT, HANDLE requirements).

Handles are immutable values. A stream handle is either inline bytes or a file on any fsspec URL; the typed
handles on top say how to read the stream (key-group offsets, operator state partitions).
"""

from __future__ import annotations

import enum
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO

import crc32c
import fsspec

from statecert.spec.keygroups import KeyGroupRange


@dataclass(frozen=True)
class ByteStreamStateHandle:
    """State small enough to be inlined into `_metadata` (CS-5)."""

    handle_name: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)

    def open(self) -> IO[bytes]:
        return io.BytesIO(self.data)


@dataclass(frozen=True)
class FileStateHandle:
    """State in a file at an fsspec URL. In `_metadata` the path is stored relative to the checkpoint (FMT-9).

    `checksum` is the CRC-32C of the file's bytes, computed by the storage as it writes (CS-9); `open()` refuses a
    file that is missing, not a regular file, of another size, or whose checksum differs (FMT-12).
    """

    path: str
    size: int
    checksum: int | None = None

    def open(self) -> IO[bytes]:
        from statecert.spec.errors import CheckpointCorruptedError, CheckpointFormatError

        fs, path = fsspec.core.url_to_fs(self.path)
        try:
            info = fs.info(path)
        except (OSError, ValueError) as exc:
            raise CheckpointFormatError(self.path, f"state file missing or unreadable: {exc}") from None
        if info.get("islink") or info.get("type") != "file":
            raise CheckpointFormatError(self.path, f"not a regular file (a {info.get('type')}, or a link)")
        if info.get("size") != self.size:
            raise CheckpointCorruptedError(
                self.path, f"size {info.get('size')} bytes, but the checkpoint recorded {self.size}"
            )
        try:
            f: IO[bytes] = fs.open(path, "rb")
        except (OSError, ValueError) as exc:
            raise CheckpointFormatError(self.path, f"cannot open state file: {exc}") from None
        if self.checksum is not None:
            try:
                actual = file_checksum(f)
                f.seek(0)
            except BaseException:
                f.close()
                raise
            if actual != self.checksum:
                f.close()
                raise CheckpointCorruptedError(
                    self.path, f"CRC-32C 0x{actual:08x}, but the checkpoint recorded 0x{self.checksum:08x}"
                )
        return f


CHUNK_SIZE = 1 << 20


def file_checksum(f: IO[bytes]) -> int:
    """The CRC-32C of everything `f` yields from its current position (CS-9)."""
    value = 0
    while chunk := f.read(CHUNK_SIZE):
        value = crc32c.crc32c(chunk, value)
    return value


StreamStateHandle = ByteStreamStateHandle | FileStateHandle

CANONICAL_FORMAT = "canonical"


@dataclass(frozen=True)
class KeyGroupsStateHandle:
    """A stream of key-group blocks with one offset per key group of `key_group_range` (FMT-6).

    `snapshot_format` is `canonical` for the backend-independent format every backend restores (SP-1), or
    `native:<backend>` for a format only that backend type restores (SP-3).
    """

    key_group_range: KeyGroupRange
    offsets: tuple[int, ...]
    delegate: StreamStateHandle
    snapshot_format: str = CANONICAL_FORMAT

    def __post_init__(self) -> None:
        if len(self.offsets) != len(self.key_group_range):
            raise ValueError(
                f"a key-groups handle needs one offset per key group: range {self.key_group_range} has "
                f"{len(self.key_group_range)} key groups, got {len(self.offsets)} offsets"
            )

    @property
    def size(self) -> int:
        return self.delegate.size

    def offset_of(self, key_group: int) -> int:
        return self.offsets[key_group - self.key_group_range.start]

    def intersection(self, key_group_range: KeyGroupRange) -> KeyGroupsStateHandle | None:
        """The part of this handle inside `key_group_range`, or None if they do not overlap (KB-RESTORE-2)."""
        common = self.key_group_range.intersection(key_group_range)
        if common.is_empty:
            return None
        first = common.start - self.key_group_range.start
        offsets = self.offsets[first : first + len(common)]
        return KeyGroupsStateHandle(common, offsets, self.delegate, self.snapshot_format)


ROCKSDB_NATIVE_FORMAT = "native:rocksdb"


@dataclass(frozen=True)
class IncrementalKeyedStateHandle:
    """A RocksDB backend's own files for a key-group range (RDB-2): SST files by name, shared between
    checkpoints when incremental (`shared_state`), the checkpoint's private files (`private_state`), and the
    state meta data. Restorable only by the same backend type (SP-3)."""

    backend_id: str
    key_group_range: KeyGroupRange
    checkpoint_id: int
    shared_state: Mapping[str, StreamStateHandle]
    private_state: Mapping[str, StreamStateHandle]
    meta_state: StreamStateHandle
    snapshot_format: str = ROCKSDB_NATIVE_FORMAT

    @property
    def size(self) -> int:
        return (
            sum(h.size for h in self.shared_state.values())
            + sum(h.size for h in self.private_state.values())
            + self.meta_state.size
        )

    def intersection(self, key_group_range: KeyGroupRange) -> IncrementalKeyedStateHandle | None:
        """This handle if it overlaps `key_group_range` (the restoring backend cuts the rest), else None."""
        return None if self.key_group_range.intersection(key_group_range).is_empty else self


CHANGELOG_FORMAT = "changelog"


@dataclass(frozen=True)
class ChangelogSegmentHandle:
    """One uploaded piece of a changelog: the state changes with sequence numbers in (`from_sequence`,
    `to_sequence`] (CL-3)."""

    delegate: StreamStateHandle
    from_sequence: int
    to_sequence: int

    @property
    def size(self) -> int:
        return self.delegate.size


@dataclass(frozen=True)
class ChangelogStateBackendHandle:
    """A changelog backend's checkpoint (CL-2): the wrapped backend's handles of the latest materialization and the
    changelog segments written since it, which restore replays on top (CL-4). Segments may hold changes of other
    key groups (after rescaling); the reader keeps those of `key_group_range`."""

    key_group_range: KeyGroupRange
    materialization_id: int
    materialized_sequence: int
    """The last change the materialization includes; replay starts after it."""
    materialized: tuple[KeyGroupsStateHandle | IncrementalKeyedStateHandle, ...]
    changelog: tuple[ChangelogSegmentHandle, ...]
    snapshot_format: str = CHANGELOG_FORMAT

    @property
    def size(self) -> int:
        return sum(h.size for h in self.materialized) + sum(s.size for s in self.changelog)

    def intersection(self, key_group_range: KeyGroupRange) -> ChangelogStateBackendHandle | None:
        """The part for `key_group_range`: materialized handles cut to it, every segment kept (KB-RESTORE-2)."""
        common = self.key_group_range.intersection(key_group_range)
        if common.is_empty:
            return None
        parts = tuple(p for p in (h.intersection(common) for h in self.materialized) if p is not None)
        return ChangelogStateBackendHandle(
            common, self.materialization_id, self.materialized_sequence, parts, self.changelog
        )


KeyedStateHandle = KeyGroupsStateHandle | IncrementalKeyedStateHandle | ChangelogStateBackendHandle


class OperatorStateMode(str, enum.Enum):
    """How operator state is redistributed on rescale (OS-1..OS-3)."""

    SPLIT_DISTRIBUTE = "split"
    UNION = "union"
    BROADCAST = "broadcast"


@dataclass(frozen=True)
class OperatorStatePartitions:
    """One operator state inside an operator state stream: its mode and one offset per element."""

    mode: OperatorStateMode
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class OperatorStateHandle:
    """Operator (non-keyed) state: named states, each a list of element offsets into one stream (OS-4)."""

    states: Mapping[str, OperatorStatePartitions]
    delegate: StreamStateHandle
    snapshot_format: str = field(default=CANONICAL_FORMAT)

    @property
    def size(self) -> int:
        return self.delegate.size
