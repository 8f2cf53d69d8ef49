"""RocksDB's log-format files (the MANIFEST that CURRENT names, and the write-ahead logs) checked record by record
before RocksDB reads them (RDB-7). RocksDB's log reader can spin forever on some damaged records (one record type
byte changed was enough, facebook/rocksdb#13333 describes the same loop), so a hostile checkpoint would hang a
restore instead of failing it; and CURRENT is a path RocksDB follows, so it must name a MANIFEST of the handle."""

from __future__ import annotations

import re
import struct
from collections.abc import Collection
from pathlib import Path

import crc32c

BLOCK_SIZE = 32768  # RocksDB's log::kBlockSize: a record never crosses a block
HEADER = struct.Struct("<IHB")  # masked CRC-32C of type and payload, payload length, record type
MASK_DELTA = 0xA282EAD8
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
# Whole records of their own besides FULL: WAL compression type, user-defined timestamp sizes, predecessor WAL info.
# The recyclable types (5-8, 11, 131) only appear with recycle_log_file_num, which neither Flink nor the reference
# backend sets, and are refused.
STANDALONE = frozenset({FULL, 9, 10, 130})
MANIFEST_NAME = re.compile(r"MANIFEST-[0-9]{1,20}")
WAL_NAME = re.compile(r"[0-9]{1,20}\.log")
MAX_CURRENT_BYTES = 64


def unmask(masked: int) -> int:
    """RocksDB stores CRCs masked (crc32c::Mask), so a CRC over bytes holding CRCs stays meaningful."""
    rotated = (masked - MASK_DELTA) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF


def check_log_records(data: bytes) -> None:
    """Raise ValueError naming the first problem unless `data` is whole log records: each inside its 32 KiB block,
    of a known non-recyclable type, fragments in order, its CRC-32C matching; a block's last bytes too short for a
    header are zeros, and an all-zero tail (preallocated space) ends the file."""
    pos, size, fragmented = 0, len(data), False
    while pos < size:
        room = BLOCK_SIZE - pos % BLOCK_SIZE
        if room < HEADER.size:
            if data[pos : pos + room].strip(b"\0"):
                raise ValueError(f"non-zero bytes in the trailer of the block at byte {pos - pos % BLOCK_SIZE}")
            pos += room
            continue
        if size - pos < HEADER.size:
            raise ValueError(f"a record header cut short at byte {pos}")
        masked, length, kind = HEADER.unpack_from(data, pos)
        if masked == 0 and length == 0 and kind == 0 and not data[pos:].strip(b"\0"):
            break  # preallocated, never written
        if length > room - HEADER.size:
            raise ValueError(f"the record at byte {pos} runs past its block ({length} bytes)")
        end = pos + HEADER.size + length
        if end > size:
            raise ValueError(f"the record at byte {pos} is cut short ({length} bytes announced)")
        if kind in STANDALONE or kind == FIRST:
            if fragmented:
                raise ValueError(f"a record starts at byte {pos} inside a fragmented record")
            fragmented = kind == FIRST
        elif kind in (MIDDLE, LAST):
            if not fragmented:
                raise ValueError(f"a record fragment at byte {pos} continues no record")
            fragmented = kind == MIDDLE
        else:
            raise ValueError(f"record type {kind} at byte {pos} (recycled-log and unknown types are refused)")
        payload = memoryview(data)[pos + HEADER.size : end]
        if crc32c.crc32c(payload, crc32c.crc32c(bytes((kind,)))) != unmask(masked):
            raise ValueError(f"checksum mismatch in the record at byte {pos}")
        pos = end
    if fragmented:
        raise ValueError("the file ends inside a fragmented record")


def check_log_files(directory: Path, names: Collection[str]) -> None:
    """Check the RocksDB files `names` downloaded into `directory` before RocksDB opens them: CURRENT names one of
    them, a MANIFEST, and every MANIFEST and write-ahead log among them holds whole, intact records. Raises
    ValueError starting with the file's name."""
    if "CURRENT" not in names:
        raise ValueError("CURRENT: missing")
    current = (directory / "CURRENT").read_bytes()[: MAX_CURRENT_BYTES + 1]
    manifest = current[:-1].decode("ascii", "replace")
    if not current.endswith(b"\n") or not MANIFEST_NAME.fullmatch(manifest) or manifest not in names:
        raise ValueError(f"CURRENT: does not name a MANIFEST file of the handle: {current[:MAX_CURRENT_BYTES]!r}")
    for name in sorted(names):
        if MANIFEST_NAME.fullmatch(name) or WAL_NAME.fullmatch(name):
            try:
                check_log_records((directory / name).read_bytes())
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
