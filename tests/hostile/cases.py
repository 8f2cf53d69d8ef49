"""The hostile corpus: damaged, hostile and half-deleted savepoints, each a function that damages a copy of a base
savepoint (`savepoints.build`) and the documented error restoring it must raise.

Most cases are *hostile*: `_metadata` is re-encoded with a valid CRC and re-written state files get their size and
CRC-32C re-recorded, so only validation (not a checksum) can catch them. `damaged` cases are what disks do: bits
flip, files shrink or vanish. `make_corpus.py` writes every case to `corpus/`, where the tests read them.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
import msgpack

from statecert.reference.format.canonical import CanonicalHeader, CanonicalReader, write_key_groups
from statecert.reference.format.metadata_codec import MAGIC
from statecert.reference.rocksdb.log_files import HEADER as LOG_HEADER
from statecert.spec.handles import FileStateHandle, KeyGroupsStateHandle
from statecert.spec.keygroups import KeyGroupRange

Plain = Any


@dataclass(frozen=True)
class Case:
    name: str
    base: str  # "hashmap" (canonical savepoint) or "rocksdb" (native savepoint)
    damage: Callable[[Path], None]
    error: str  # the documented error class restoring (or loading) must raise
    what: str


# -- `_metadata` ---------------------------------------------------------------------------------------------------
def read_plain(directory: Path) -> Plain:
    data = (directory / "_metadata").read_bytes()
    (length,) = struct.unpack_from(">Q", data, 8)
    return msgpack.unpackb(data[16 : 16 + length], raw=False)


def write_payload(directory: Path, payload: bytes, version: int = 3) -> None:
    """A `_metadata` container around `payload`, with a valid length and CRC."""
    body = struct.pack(">II", MAGIC, version) + struct.pack(">Q", len(payload)) + payload
    (directory / "_metadata").write_bytes(body + struct.pack(">I", zlib.crc32(payload)))


def write_plain(directory: Path, plain: Plain) -> None:
    write_payload(directory, msgpack.packb(plain, use_bin_type=True))


def edit_metadata(edit: Callable[[Plain], None]) -> Callable[[Path], None]:
    def damage(directory: Path) -> None:
        plain = read_plain(directory)
        edit(plain)
        write_plain(directory, plain)

    return damage


def subtask(plain: Plain, index: int) -> Plain:
    return next(s for s in plain["operators"][0]["subtasks"] if s["index"] == index)


def keyed(plain: Plain, index: int = 0) -> Plain:
    return subtask(plain, index)["keyed"][0]


def operator(plain: Plain, index: int = 0) -> Plain:
    return subtask(plain, index)["operator"][0]


def setter(path: Callable[[Plain], Plain], key: str, value: Any) -> Callable[[Path], None]:
    def edit(plain: Plain) -> None:
        path(plain)[key] = value

    return edit_metadata(edit)


# -- state files -----------------------------------------------------------------------------------------------------
def rerecord(directory: Path, stream: Plain) -> None:
    """Make the handle's recorded size and CRC-32C match the file again (a hostile, not a damaged, file)."""
    data = (directory / stream["path"]).read_bytes()
    stream["size"], stream["crc32c"] = len(data), crc32c.crc32c(data)


class PlainHeader:
    """A canonical header written as given, valid or not (`write_key_groups` asks a header for its plain form only)."""

    def __init__(self, plain: Plain) -> None:
        self.plain = plain

    def to_plain(self) -> Plain:
        return self.plain


def edit_canonical(
    edit: Callable[[dict[int, list[Any]]], None],
    index: int = 0,
    edit_header: Callable[[Plain], None] | None = None,
) -> Callable[[Path], None]:
    """Re-write subtask `index`'s canonical stream with `edit` applied to its blocks (key group -> entries) and
    `edit_header`, when given, to its header's plain form (written as edited, valid or not)."""

    def damage(directory: Path) -> None:
        plain = read_plain(directory)
        handle_plain = keyed(plain, index)
        stream = handle_plain["stream"]
        path = directory / stream["path"]
        rng = KeyGroupRange(handle_plain["start"], handle_plain["end"])
        handle = KeyGroupsStateHandle(rng, tuple(handle_plain["offsets"]), FileStateHandle(str(path), stream["size"]))
        with CanonicalReader(handle) as reader:
            header: CanonicalHeader | PlainHeader = reader.header
            blocks = {kg: [list(e) for e in reader.key_group(kg)] for kg in rng}
        edit(blocks)
        if edit_header is not None:
            header = PlainHeader(header.to_plain())
            edit_header(header.plain)
        out = io.BytesIO()
        handle_plain["offsets"] = list(write_key_groups(out, header, rng, lambda kg: blocks[kg]))  # type: ignore[arg-type]
        path.write_bytes(out.getvalue())
        rerecord(directory, stream)
        write_plain(directory, plain)

    return damage


def first_entry(blocks: dict[int, list[Any]], state: int = 0) -> tuple[int, list[Any]]:
    """(key group, entry) of the first entry of state number `state` (0 count, 1 seen, 2 tags by header order)."""
    for key_group, entries in sorted(blocks.items()):
        for entry in entries:
            if entry[0] == state:
                return key_group, entry
    raise AssertionError("no entry")


def set_entry(position: int, value: Any, state: int = 0) -> Callable[[dict[int, list[Any]]], None]:
    def edit(blocks: dict[int, list[Any]]) -> None:
        first_entry(blocks, state)[1][position] = value

    return edit


def move_entry_to_next_key_group(blocks: dict[int, list[Any]]) -> None:
    key_group, entry = first_entry(blocks)
    blocks[key_group].remove(entry)
    blocks[key_group + 1].append(entry)


def duplicate_entry(blocks: dict[int, list[Any]]) -> None:
    key_group, entry = first_entry(blocks)
    blocks[key_group].append(list(entry))


def keyed_file(directory: Path, index: int = 0) -> Path:
    return directory / keyed(read_plain(directory), index)["stream"]["path"]


def rewrite(
    file: Callable[[Path], Path], transform: Callable[[bytes], bytes], rerecord_checksum: bool = False
) -> Callable[[Path], None]:
    """The file `transform`ed in place; with `rerecord_checksum`, the size and CRC-32C of every keyed handle's
    stream at that path re-recorded (a hostile, not a damaged, file)."""

    def damage(directory: Path) -> None:
        path = file(directory)
        path.write_bytes(transform(path.read_bytes()))
        if rerecord_checksum:
            plain = read_plain(directory)
            for s in plain["operators"][0]["subtasks"]:
                for h in s["keyed"]:
                    for stream in [*h.get("shared", {}).values(), *h.get("private", {}).values()]:
                        if stream.get("path") and directory / stream["path"] == path:
                            rerecord(directory, stream)
            write_plain(directory, plain)

    return damage


def flip_bit(file: Callable[[Path], Path], at: float = 0.5, rerecord_checksum: bool = False) -> Callable[[Path], None]:
    def flip(data: bytes) -> bytes:
        flipped = bytearray(data)
        flipped[int(len(data) * at)] ^= 0x08
        return bytes(flipped)

    return rewrite(file, flip, rerecord_checksum)


def truncate(file: Callable[[Path], Path]) -> Callable[[Path], None]:
    return rewrite(file, lambda data: data[:-7])


def delete(file: Callable[[Path], Path]) -> Callable[[Path], None]:
    return lambda directory: file(directory).unlink()


# -- native (RocksDB) files ------------------------------------------------------------------------------------------
def sst_file(directory: Path) -> Path:
    shared = keyed(read_plain(directory))["shared"]
    return directory / next(s["path"] for name, s in sorted(shared.items()) if name.endswith(".sst"))


def rename_native_file(new_name: str) -> Callable[[Path], None]:
    def edit(plain: Plain) -> None:
        shared = keyed(plain)["shared"]
        name = sorted(shared)[0]
        shared[new_name] = shared.pop(name)

    return edit_metadata(edit)


def replace_native_meta(directory: Path) -> None:
    plain = read_plain(directory)
    meta = keyed(plain)["meta"]
    (directory / meta["path"]).write_bytes(msgpack.packb({"key_serializer": 5, "states": [[1]]}))
    rerecord(directory, meta)
    write_plain(directory, plain)


def private_file(prefix: str) -> Callable[[Path], Path]:
    """Subtask 0's RocksDB file whose name starts with `prefix` (the handle's private, non-SST files)."""

    def file(directory: Path) -> Path:
        private = keyed(read_plain(directory))["private"]
        return directory / private[next(n for n in sorted(private) if n.startswith(prefix))]["path"]

    return file


def second_record_type(kind: int) -> Callable[[bytes], bytes]:
    """The type byte of a log file's second record set to `kind` (RocksDB's own record CRC is left as it was)."""

    def retype(data: bytes) -> bytes:
        _, length, _ = LOG_HEADER.unpack_from(data, 0)
        second = LOG_HEADER.size + length
        return data[: second + 6] + bytes((kind,)) + data[second + 7 :]

    return retype


# -- the corpus ------------------------------------------------------------------------------------------------------
def swap_keyed_handles(plain: Plain) -> None:
    a, b = subtask(plain, 0), subtask(plain, 1)
    a["keyed"], b["keyed"] = b["keyed"], a["keyed"]


def extend_range(plain: Plain) -> None:
    handle = keyed(plain, 1)
    extra = 200 - handle["end"]
    handle["end"] = 200
    handle["offsets"] = handle["offsets"] + [handle["offsets"][-1]] * extra


def add_operator_copy(plain: Plain) -> None:
    plain["operators"].append(plain["operators"][0])


def deep_v1(directory: Path) -> None:
    (directory / "_metadata").write_bytes(struct.pack(">II", MAGIC, 1) + b"[" * 5000 + b"]" * 5000)


def operator_element_of_3_bytes(directory: Path) -> None:
    plain = read_plain(directory)
    handle = operator(plain)
    stream = handle["stream"]
    path = directory / stream["path"]
    data = bytearray(path.read_bytes())
    offset = handle["states"]["offsets"]["offsets"][0]
    data[offset : offset + 12] = struct.pack(">I", 3) + b"abc"
    path.write_bytes(bytes(data))
    rerecord(directory, stream)
    write_plain(directory, plain)


def operator_mode(plain: Plain) -> None:
    operator(plain)["states"]["offsets"]["mode"] = "union"


CASES: tuple[Case, ...] = (
    Case("payload-map-key-is-a-map", "hashmap", lambda d: write_payload(d, b"\x81\x80\xc0"), "CheckpointFormatError",
         "msgpack payload 81 80 c0 (a map whose key is a map) with a valid CRC"),
    Case("payload-extra-data", "hashmap", lambda d: write_payload(d, msgpack.packb({}) + b"\xc0"),
         "CheckpointFormatError", "a msgpack value followed by more bytes inside the announced payload"),
    Case("v1-nested-5000-deep", "hashmap", deep_v1, "CheckpointFormatError", "a V1 JSON payload nested 5,000 deep"),
    Case("unknown-kind", "hashmap", setter(lambda p: p, "kind", "savepoint-foreign"), "CheckpointFormatError",
         "a checkpoint kind this reader does not know"),
    Case("negative-checkpoint-id", "hashmap", setter(lambda p: p, "checkpoint_id", -1), "CheckpointFormatError",
         "checkpoint id -1"),
    Case("key-not-utf8", "hashmap", edit_canonical(set_entry(1, b"\xff\xfe\xfd")), "CheckpointFormatError",
         "a string key whose bytes are not UTF-8"),
    Case("long-value-of-3-bytes", "hashmap", edit_canonical(set_entry(3, b"abc")), "CheckpointFormatError",
         "a long value that is 3 bytes, not 8"),
    Case("list-element-of-3-bytes", "hashmap", edit_canonical(set_entry(3, [b"abc"], state=1)),
         "CheckpointFormatError", "a list element that is 3 bytes, not 8"),
    Case("non-void-namespace", "hashmap", edit_canonical(set_entry(2, b"x")), "CheckpointFormatError",
         "an entry in namespace b'x' of a state that only has the void namespace"),
    Case("key-in-wrong-key-group", "hashmap", edit_canonical(move_entry_to_next_key_group), "CheckpointFormatError",
         "an entry moved into the next key group's block, where no lookup would find it"),
    Case("duplicate-entry", "hashmap", edit_canonical(duplicate_entry), "CheckpointFormatError",
         "the same key and namespace twice in one state"),
    Case("missing-state-file", "hashmap", delete(keyed_file), "CheckpointFormatError",
         "subtask 0's keyed state file deleted"),
    Case("truncated-state-file", "hashmap", truncate(keyed_file), "CheckpointCorruptedError",
         "subtask 0's keyed state file 7 bytes short"),
    Case("bit-flip-in-state-file", "hashmap", flip_bit(keyed_file), "CheckpointCorruptedError",
         "one bit flipped in subtask 0's keyed state file"),
    Case("handle-path-empty", "hashmap", setter(lambda p: keyed(p)["stream"], "path", ""), "UnsafePathError",
         "a state file path of ''"),
    Case("handle-path-dot", "hashmap", setter(lambda p: keyed(p)["stream"], "path", "."), "UnsafePathError",
         "a state file path of '.' (the savepoint directory)"),
    Case("handle-path-escapes", "hashmap", setter(lambda p: keyed(p)["stream"], "path", "../../etc/hostname"),
         "UnsafePathError", "a state file path leaving the savepoint"),
    Case("offset-2-62", "hashmap", lambda d: edit_metadata(lambda p: keyed(p)["offsets"].__setitem__(0, 2**62))(d),
         "CheckpointFormatError", "a key-group offset of 2**62"),
    Case("offset-2-64-minus-1", "hashmap",
         lambda d: edit_metadata(lambda p: keyed(p)["offsets"].__setitem__(0, 2**64 - 1))(d),
         "CheckpointFormatError", "a key-group offset of 2**64-1"),
    Case("size-2-64-minus-1", "hashmap", setter(lambda p: keyed(p)["stream"], "size", 2**64 - 1),
         "CheckpointFormatError", "a state file size of 2**64-1"),
    Case("duplicated-subtask-index", "hashmap",
         setter(lambda p: p["operators"][0]["subtasks"][1], "index", 0), "CheckpointFormatError",
         "subtask index 0 twice"),
    Case("range-beyond-max-parallelism", "hashmap", edit_metadata(extend_range), "CheckpointFormatError",
         "a key-group range ending at 200 with max parallelism 128"),
    Case("subtask-declares-other-range", "hashmap", edit_metadata(swap_keyed_handles), "CheckpointFormatError",
         "subtasks 0 and 1 swap their keyed handles"),
    Case("duplicated-operator", "hashmap", edit_metadata(add_operator_copy), "CheckpointFormatError",
         "operator 'op' twice"),
    Case("operator-element-of-3-bytes", "hashmap", operator_element_of_3_bytes, "CheckpointFormatError",
         "an operator state element of 3 bytes where a long is 8"),
    Case("operator-mode-differs", "hashmap", edit_metadata(operator_mode), "CheckpointFormatError",
         "the handle says union, the stream split"),
    Case("native-file-name-dotdot", "rocksdb", rename_native_file(".."), "CheckpointFormatError",
         "a RocksDB file named '..'"),
    Case("native-file-name-dot", "rocksdb", rename_native_file("."), "CheckpointFormatError",
         "a RocksDB file named '.'"),
    Case("native-file-name-empty", "rocksdb", rename_native_file(""), "CheckpointFormatError",
         "a RocksDB file named ''"),
    Case("native-meta-malformed", "rocksdb", replace_native_meta, "CheckpointFormatError",
         "the RocksDB state meta data replaced by other msgpack"),
    Case("sst-bit-flip", "rocksdb", flip_bit(sst_file), "CheckpointCorruptedError",
         "one bit flipped in an SST file"),
    Case("sst-bit-flip-checksum-rerecorded", "rocksdb", flip_bit(sst_file, rerecord_checksum=True),
         "CheckpointCorruptedError",
         "one bit flipped in an SST file, its CRC-32C re-recorded: RocksDB's own block checksums must catch it"),
    Case("missing-sst", "rocksdb", delete(sst_file), "CheckpointFormatError", "an SST file deleted"),
    Case("manifest-record-recyclable", "rocksdb", rewrite(private_file("MANIFEST-"), second_record_type(5), True),
         "CheckpointCorruptedError",
         "a MANIFEST record's type byte set to 5 (recyclable), its CRC-32C re-recorded: RocksDB's log reader looped "
         "forever on it"),
    Case("current-names-other-file", "rocksdb", rewrite(private_file("CURRENT"), lambda _: b"OPTIONS-000013\n", True),
         "CheckpointCorruptedError", "CURRENT names a file that is not a MANIFEST, its CRC-32C re-recorded"),
)  # fmt: skip
