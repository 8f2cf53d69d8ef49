"""Flink's `_metadata` file (format versions 3 to 6, Flink 1.11 to 2.3): the operators of a checkpoint or savepoint,
their subtasks and the handles of their keyed state, as `MetadataV3Serializer` and its successors write them.

Paths are confined to the snapshot: a relative handle is read from the snapshot's directory, an absolute one from
the same place relative to the snapshot's folder (its `chk-<n>` or savepoint folder, or the job's `shared/` and
`taskowned/` folders beside a `chk-<n>`), so that a moved snapshot still reads and nothing outside it is ever read.
The checkpoint properties that versions 4 and later append are Java-serialized: they are never read."""

from __future__ import annotations

from dataclasses import dataclass, field

import fsspec

from statecert.reference.flink.java_input import JavaDataInput
from statecert.reference.storage.location import resolve_checkpoint_pointer
from statecert.spec.errors import CheckpointFormatError, UnknownFormatVersionError

MAGIC = 0x4960672D  # Checkpoints.HEADER_MAGIC_NUMBER
SUPPORTED_VERSIONS = (3, 4, 5, 6)
MASTER_STATE_MAGIC = 0xC96B1696 - (1 << 32)
MAX_METADATA_BYTES = 256 * 1024 * 1024

# handle type bytes of MetadataV2V3SerializerBase
NULL, BYTES, FILE, KEY_GROUPS, OPERATOR, INCREMENTAL, RELATIVE, SAVEPOINT_KEY_GROUPS = range(8)
CHANGELOG, CHANGELOG_BYTES, CHANGELOG_FILE, INCREMENTAL_V2, KEY_GROUPS_V2, CHANGELOG_FILE_V2, CHANGELOG_V2 = range(
    8, 15
)


@dataclass(frozen=True)
class FlinkStream:
    """A stream state handle: bytes inline in `_metadata` (`data`), or a file (`url`, confined to the snapshot)."""

    kind: str  # "inline", "file" or "relative"
    size: int
    name: str
    url: str | None = None
    data: bytes | None = None

    def read(self) -> bytes:
        """The stream's bytes; a file whose size is not the recorded one is refused."""
        if self.data is not None:
            return self.data
        assert self.url is not None
        fs, path = fsspec.core.url_to_fs(self.url)
        if not fs.isfile(path):
            raise CheckpointFormatError(self.url, "a state file _metadata refers to is missing")
        actual = fs.size(path)
        if actual != self.size:
            raise CheckpointFormatError(self.url, f"{actual} bytes where _metadata recorded {self.size}")
        with fs.open(path, "rb") as f:
            return bytes(f.read())


@dataclass(frozen=True)
class FlinkKeyGroupsHandle:
    """A full snapshot's keyed state: one stream, and the offset of each key group of `start`..`end` in it."""

    start: int
    end: int
    offsets: tuple[int, ...]
    stream: FlinkStream | None
    savepoint: bool


@dataclass(frozen=True)
class FlinkIncrementalHandle:
    """A native RocksDB snapshot: the meta data stream, and the shared and private files by their local names."""

    checkpoint_id: int
    backend_id: str
    start: int
    end: int
    meta: FlinkStream | None
    shared: tuple[tuple[str, FlinkStream | None], ...]
    private: tuple[tuple[str, FlinkStream | None], ...]


@dataclass(frozen=True)
class FlinkOtherHandle:
    """A keyed handle this reader describes but does not read (the changelog backend's)."""

    kind: str
    start: int
    end: int


FlinkKeyedHandle = FlinkKeyGroupsHandle | FlinkIncrementalHandle | FlinkOtherHandle


@dataclass(frozen=True)
class FlinkSubtaskState:
    index: int
    finished: bool = False
    managed_keyed: FlinkKeyedHandle | None = None
    raw_keyed: FlinkKeyedHandle | None = None
    operator_states: tuple[str, ...] = ()


@dataclass(frozen=True)
class FlinkOperatorState:
    """One operator: its id (Flink's hex form), name and uid (format version 5 on), parallelisms and subtasks."""

    operator_id: str
    name: str
    uid: str
    parallelism: int
    max_parallelism: int
    fully_finished: bool
    subtasks: tuple[FlinkSubtaskState, ...] = field(default_factory=tuple)

    def matches(self, choice: str) -> bool:
        return choice in (self.operator_id, self.uid, self.name) and choice != ""


@dataclass(frozen=True)
class FlinkCheckpoint:
    """A Flink `_metadata` file, decoded."""

    path: str
    version: int
    checkpoint_id: int
    operators: tuple[FlinkOperatorState, ...]


def is_flink_metadata(head: bytes) -> bool:
    """Whether bytes start with Flink's `_metadata` magic number."""
    return len(head) >= 4 and int.from_bytes(head[:4], "big") == MAGIC


class _Paths:
    """Where the files of a snapshot are: every path is read from inside its directory (see the module's text)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory.rstrip("/")
        self.folder = self.directory.rsplit("/", 1)[-1]
        self.job = self.directory.rsplit("/", 1)[0] if self.folder.startswith("chk-") else None

    def relative(self, relative: str, path: str) -> str:
        parts = relative.split("/")
        if relative.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise CheckpointFormatError(path, f"a relative state path {relative!r} that leaves the snapshot")
        return f"{self.directory}/{relative}"

    def absolute(self, url: str, path: str) -> str:
        parts = url.split("/")
        for i in range(len(parts) - 2, -1, -1):
            rest = parts[i + 1 :]
            if any(p in ("", ".", "..") for p in rest):
                break
            if parts[i] == self.folder:
                return "/".join([self.directory, *rest])
            if self.job is not None and parts[i] in ("shared", "taskowned"):
                return "/".join([self.job, parts[i], *rest])
        raise CheckpointFormatError(path, f"a state file {url!r} outside the snapshot's directory")


def _stream(inp: JavaDataInput, paths: _Paths) -> FlinkStream | None:
    kind = inp.read_unsigned_byte()
    if kind == NULL:
        return None
    if kind == FILE:
        size, url = inp.read_long(), inp.read_utf()
        return FlinkStream("file", size, url.rsplit("/", 1)[-1], url=paths.absolute(url, inp.path))
    if kind == BYTES:
        name = inp.read_utf()
        data = inp.read(inp.read_count("inline stream bytes"))
        return FlinkStream("inline", len(data), name, data=data)
    if kind == RELATIVE:
        relative, size = inp.read_utf(), inp.read_long()
        return FlinkStream("relative", size, relative, url=paths.relative(relative, inp.path))
    raise inp.fail(f"a stream state handle of unknown type {kind}")


def _check_size(stream: FlinkStream | None, inp: JavaDataInput) -> None:
    if stream is not None and stream.size < 0:
        raise inp.fail(f"a stream of negative size {stream.size}")


def _range(inp: JavaDataInput, max_parallelism: int) -> tuple[int, int]:
    start, count = inp.read_int(), inp.read_int()
    if start < 0 or count < 0 or start + count > max_parallelism:
        raise inp.fail(f"key groups {start} (+{count}) outside 0..{max_parallelism - 1}")
    return start, start + count - 1


def _local_paths(inp: JavaDataInput, paths: _Paths) -> tuple[tuple[str, FlinkStream | None], ...]:
    items = []
    for _ in range(inp.read_count("files of a native snapshot", 3)):
        local = inp.read_utf()
        if "/" in local or local in ("", ".", ".."):
            raise inp.fail(f"a native file's local name {local!r} is not a plain file name")
        items.append((local, _stream(inp, paths)))
    return tuple(items)


def _keyed(inp: JavaDataInput, paths: _Paths, max_parallelism: int) -> FlinkKeyedHandle | None:
    kind = inp.read_unsigned_byte()
    if kind == NULL:
        return None
    if kind in (KEY_GROUPS, KEY_GROUPS_V2, SAVEPOINT_KEY_GROUPS):
        start, end = _range(inp, max_parallelism)
        offsets = tuple(inp.read_long() for _ in range(end - start + 1))
        stream = _stream(inp, paths)
        _check_size(stream, inp)
        if kind == KEY_GROUPS_V2:
            inp.read_utf()  # the handle's id
        return FlinkKeyGroupsHandle(start, end, offsets, stream, kind == SAVEPOINT_KEY_GROUPS)
    if kind in (INCREMENTAL, INCREMENTAL_V2):
        checkpoint_id, backend_id = inp.read_long(), inp.read_utf()
        start, end = _range(inp, max_parallelism)
        if kind == INCREMENTAL_V2:
            inp.read_long()  # checkpointed size
        meta = _stream(inp, paths)
        shared, private = _local_paths(inp, paths), _local_paths(inp, paths)
        if kind == INCREMENTAL_V2:
            inp.read_utf()
        return FlinkIncrementalHandle(checkpoint_id, backend_id, start, end, meta, shared, private)
    if kind in (CHANGELOG, CHANGELOG_V2):
        start, end = _range(inp, max_parallelism)
        inp.read_long()
        for _ in range(inp.read_count("materialized handles")):
            _keyed(inp, paths, max_parallelism)
        for _ in range(inp.read_count("changelog handles")):
            _keyed(inp, paths, max_parallelism)
        inp.read_long()
        if kind == CHANGELOG_V2:
            inp.read_long()
        inp.read_utf()
        return FlinkOtherHandle("changelog", start, end)
    if kind == CHANGELOG_BYTES:
        start, end = _range(inp, max_parallelism)
        inp.read_long(), inp.read_long()
        for _ in range(inp.read_count("changes", 8)):
            inp.read_int()
            inp.read(inp.read_count("change bytes"))
        inp.read_utf()
        return FlinkOtherHandle("changelog-segment", start, end)
    if kind in (CHANGELOG_FILE, CHANGELOG_FILE_V2):
        start, end = _range(inp, max_parallelism)
        for _ in range(inp.read_count("changelog files", 9)):
            inp.read_long()
            _stream(inp, paths)
        inp.read_long(), inp.read_long()
        inp.read_utf()
        if kind == CHANGELOG_FILE_V2:
            inp.read_utf()
        return FlinkOtherHandle("changelog-segment", start, end)
    raise inp.fail(f"a keyed state handle of unknown type {kind}")


def _operator_handle(inp: JavaDataInput, paths: _Paths) -> tuple[str, ...]:
    kind = inp.read_unsigned_byte()
    if kind == NULL:
        return ()
    if kind != OPERATOR:
        raise inp.fail(f"an operator state handle of unknown type {kind}")
    names = []
    for _ in range(inp.read_count("operator states", 7)):
        names.append(inp.read_utf())
        mode = inp.read_unsigned_byte()
        if mode > 2:
            raise inp.fail(f"an operator state distribution mode {mode}")
        for _ in range(inp.read_count("partition offsets", 8)):
            inp.read_long()
    _stream(inp, paths)
    return tuple(names)


def _subtask(inp: JavaDataInput, paths: _Paths, index: int, max_parallelism: int) -> FlinkSubtaskState:
    operator_states: tuple[str, ...] = ()
    for _ in range(2):  # managed, then raw operator state
        if inp.read_int() != 0:
            operator_states += _operator_handle(inp, paths)
    managed = _keyed(inp, paths, max_parallelism)
    raw = _keyed(inp, paths, max_parallelism)
    for what in ("input channel", "result subpartition"):
        if inp.read_int() != 0:
            raise inp.fail(f"{what} state of an unaligned checkpoint: this reader does not read it")
    return FlinkSubtaskState(index, False, managed, raw, operator_states)


def _operator(inp: JavaDataInput, paths: _Paths, version: int) -> FlinkOperatorState:
    name = uid = ""
    if version >= 5:
        name, uid = inp.read_utf(), inp.read_utf()
    lower, upper = inp.read_long(), inp.read_long()
    operator_id = (lower.to_bytes(8, "big", signed=True) + upper.to_bytes(8, "big", signed=True)).hex()
    parallelism, max_parallelism = inp.read_int(), inp.read_int()
    if not 0 < parallelism <= max_parallelism <= 32768:
        raise inp.fail(f"operator {operator_id}: parallelism {parallelism}, max parallelism {max_parallelism}")
    coordinator = _stream(inp, paths)
    if coordinator is not None and coordinator.kind != "inline":
        raise inp.fail(f"operator {operator_id}: a coordinator state that is not inline")
    count = inp.read_int()
    if count < 0:
        return FlinkOperatorState(operator_id, name, uid, parallelism, max_parallelism, True)
    if count > parallelism:
        raise inp.fail(f"operator {operator_id}: {count} subtask states for parallelism {parallelism}")
    subtasks: list[FlinkSubtaskState] = []
    for _ in range(count):
        stored = inp.read_int()
        index = -stored - 1 if stored < 0 else stored
        if index >= parallelism or any(s.index == index for s in subtasks):
            raise inp.fail(f"operator {operator_id}: subtask {index} twice or beyond parallelism {parallelism}")
        if stored < 0:
            subtasks.append(FlinkSubtaskState(index, True))
        else:
            subtasks.append(_subtask(inp, paths, index, max_parallelism))
    return FlinkOperatorState(operator_id, name, uid, parallelism, max_parallelism, False, tuple(subtasks))


def decode_flink_metadata(data: bytes, path: str, directory: str) -> FlinkCheckpoint:
    """Decode Flink `_metadata` bytes read from `path` in `directory`."""
    inp = JavaDataInput(data, path)
    if inp.remaining() < 8 or inp.read_int() != MAGIC:
        raise CheckpointFormatError(path, "not a Flink _metadata file (magic number)")
    version = inp.read_int()
    if version not in SUPPORTED_VERSIONS:
        raise UnknownFormatVersionError(
            path, f"Flink _metadata format version {version}; this reader reads versions {SUPPORTED_VERSIONS}"
        )
    paths = _Paths(directory)
    checkpoint_id = inp.read_long()
    if checkpoint_id < 0:
        raise inp.fail(f"checkpoint id {checkpoint_id}")
    for _ in range(inp.read_count("master states", 8)):
        if inp.read_int() != MASTER_STATE_MAGIC:
            raise inp.fail("a master state without its magic number")
        inp.read(inp.read_count("master state bytes"))
    operators = tuple(_operator(inp, paths, version) for _ in range(inp.read_count("operators", 24)))
    if version == 3 and inp.remaining():
        raise inp.fail(f"{inp.remaining()} bytes after the last operator")
    if version >= 4 and inp.data[inp.position : inp.position + 2] != b"\xac\xed":
        raise inp.fail("the checkpoint properties are not where format version 4 puts them")
    return FlinkCheckpoint(path, version, checkpoint_id, operators)


def load_flink_checkpoint(pointer: str) -> FlinkCheckpoint:
    """Resolve a checkpoint or savepoint (its directory or `_metadata`) and decode its Flink `_metadata`."""
    location = resolve_checkpoint_pointer(pointer)
    fs, path = fsspec.core.url_to_fs(location.metadata_path)
    if fs.size(path) > MAX_METADATA_BYTES:
        raise CheckpointFormatError(location.metadata_path, f"larger than {MAX_METADATA_BYTES} bytes")
    with fs.open(path, "rb") as f:
        data = f.read()
    return decode_flink_metadata(data, location.metadata_path, location.directory)
