"""RDB-7: the RocksDB files read as logs (the MANIFEST that CURRENT names, the write-ahead logs) are checked before
RocksDB reads them. Files RocksDB wrote, and logs a model of RocksDB's log writer lays out, are accepted; any byte
changed, a record cut short, a recyclable or unknown record type, fragments out of order and a CURRENT that names
anything but a MANIFEST of the handle are refused."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest
import rocksdict
from hypothesis import given
from hypothesis import strategies as st

from statecert.reference.rocksdb.log_files import check_log_files, check_log_records

pytestmark = pytest.mark.requirement("RDB-7")

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def masked_crc(kind: int, payload: bytes) -> int:
    """RocksDB's crc32c::Mask of the CRC-32C of the type byte and the payload, written independently of the code."""
    crc = crc32c.crc32c(bytes((kind,)) + payload)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def physical(kind: int, payload: bytes) -> bytes:
    return struct.pack("<IHB", masked_crc(kind, payload), len(payload), kind) + payload


def write_log(records: list[bytes]) -> bytes:
    """A model of RocksDB's log::Writer::AddRecord: fragments within 32 KiB blocks, short block ends zero-filled."""
    out = bytearray()
    for record in records:
        left, first = record, True
        while True:
            room = BLOCK - len(out) % BLOCK
            if room < HEADER:
                out += bytes(room)
                room = BLOCK
            fragment, left = left[: room - HEADER], left[room - HEADER :]
            kind = (FULL if not left else FIRST) if first else (LAST if not left else MIDDLE)
            out += physical(kind, fragment)
            first = False
            if not left:
                break
    return bytes(out)


def spans(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(start, end, type) of each physical record, read the plain way (test-side)."""
    pos = 0
    while pos < len(data):
        room = BLOCK - pos % BLOCK
        if room < HEADER:
            pos += room
            continue
        _, length, kind = struct.unpack_from("<IHB", data, pos)
        yield pos, pos + HEADER + length, kind
        pos += HEADER + length


@pytest.fixture(scope="module")
def rocksdb_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A live RocksDB's directory copied while it is open: column families, flushes and synced writes of values up
    to 90 KB, so the MANIFEST holds many edits and the write-ahead log fragmented records."""
    root = tmp_path_factory.mktemp("rocksdb-logs")
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    db = rocksdict.Rdict(str(root / "db"), options)
    try:
        for i in range(3):
            db.create_column_family(f"cf{i}", options)
        write = rocksdict.WriteOptions()
        write.sync = True
        db.set_write_options(write)
        for i in range(60):
            db[b"k%d" % i] = bytes([i]) * (i * 1499 % 90_000)
            if i % 20 == 0:
                db.flush()
        shutil.copytree(root / "db", root / "copy")
    finally:
        db.close()
    return root / "copy"


def log_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.startswith("MANIFEST-") or p.name.endswith(".log"))


def test_files_rocksdb_wrote_are_accepted(rocksdb_files: Path) -> None:
    check_log_files(rocksdb_files, {p.name for p in rocksdb_files.iterdir()})
    kinds = {kind for path in log_files(rocksdb_files) for _, _, kind in spans(path.read_bytes())}
    assert {FULL, FIRST, MIDDLE, LAST} <= kinds, f"expected every fragment type in RocksDB's logs, got {kinds}"


@given(st.lists(st.binary(max_size=80_000) | st.integers(0, 70_000).map(bytes), max_size=8))
def test_logs_laid_out_as_rocksdb_writes_them_are_accepted(records: list[bytes]) -> None:
    check_log_records(write_log(records))


@given(data=st.data())
def test_any_byte_changed_in_a_rocksdb_log_is_refused(rocksdb_files: Path, data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(log_files(rocksdb_files)), label="file")
    original = path.read_bytes()
    assert original, f"{path.name} is empty"
    at = data.draw(st.integers(0, len(original) - 1), label="offset")
    value = data.draw(st.integers(0, 255).filter(lambda v: v != original[at]), label="value")
    damaged = original[:at] + bytes((value,)) + original[at + 1 :]
    with pytest.raises(ValueError):
        check_log_records(damaged)


@given(data=st.data())
def test_a_log_cut_inside_a_record_is_refused(rocksdb_files: Path, data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(log_files(rocksdb_files)), label="file")
    original = path.read_bytes()
    start, end, _ = data.draw(st.sampled_from(list(spans(original))), label="record")
    cut = data.draw(st.integers(start + 1, end - 1), label="cut")
    with pytest.raises(ValueError, match="cut short"):
        check_log_records(original[:cut])


@given(
    st.sampled_from([5, 6, 7, 8, 11, 131]) | st.integers(0, 255).filter(lambda k: k not in (0, 1, 2, 3, 4, 9, 10, 130)),
    st.binary(),
)
def test_recyclable_and_unknown_record_types_are_refused_even_with_a_valid_crc(kind: int, payload: bytes) -> None:
    with pytest.raises(ValueError, match=f"record type {kind} "):
        check_log_records(physical(FULL, b"edit") + physical(kind, payload))


@pytest.mark.parametrize(
    ("kinds", "problem"),
    [
        ([LAST], "continues no record"),
        ([MIDDLE], "continues no record"),
        ([FIRST, FULL], "inside a fragmented record"),
        ([FIRST, FIRST], "inside a fragmented record"),
        ([FIRST, MIDDLE], "ends inside a fragmented record"),
        ([FULL, LAST], "continues no record"),
    ],
)
def test_fragments_out_of_order_are_refused_even_with_valid_crcs(kinds: list[int], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        check_log_records(b"".join(physical(kind, b"part") for kind in kinds))


@given(st.integers(1, 2 * HEADER))
def test_a_record_running_past_its_block_is_refused_even_with_a_valid_crc(length: int) -> None:
    head = physical(FULL, bytes(BLOCK - 2 * HEADER))  # ends HEADER bytes before the block's end
    with pytest.raises(ValueError, match="runs past its block"):
        check_log_records(head + physical(FULL, bytes(length)))


def test_non_zero_bytes_in_a_block_trailer_are_refused() -> None:
    log = bytearray(write_log([bytes(BLOCK - HEADER - 3), b"next"]))
    check_log_records(bytes(log))
    log[BLOCK - 2] = 1
    with pytest.raises(ValueError, match="trailer"):
        check_log_records(bytes(log))


def test_a_preallocated_zero_tail_ends_the_log() -> None:
    check_log_records(write_log([b"edit"]) + bytes(100))
    with pytest.raises(ValueError):
        check_log_records(write_log([b"edit"]) + bytes(100) + b"\x01")


@pytest.mark.parametrize(
    "current",
    [None, b"MANIFEST-000009\n", b"MANIFEST-000005", b"OPTIONS-000007\n", b"../MANIFEST-000005\n", b"\xff" * 100],
    ids=["missing", "not-in-handle", "no-newline", "not-a-manifest", "a-path", "binary"],
)
def test_current_must_name_a_manifest_of_the_handle(tmp_path: Path, current: bytes | None) -> None:
    (tmp_path / "MANIFEST-000005").write_bytes(write_log([b"edit"]))
    names = {"MANIFEST-000005", "OPTIONS-000007"}
    if current is not None:
        (tmp_path / "CURRENT").write_bytes(current)
        names.add("CURRENT")
    with pytest.raises(ValueError, match=r"^CURRENT: "):
        check_log_files(tmp_path, names)
    (tmp_path / "CURRENT").write_bytes(b"MANIFEST-000005\n")
    check_log_files(tmp_path, names | {"CURRENT"})


def test_the_error_names_the_damaged_file(tmp_path: Path) -> None:
    (tmp_path / "CURRENT").write_bytes(b"MANIFEST-000005\n")
    (tmp_path / "MANIFEST-000005").write_bytes(write_log([b"edit"]))
    (tmp_path / "000012.log").write_bytes(write_log([b"batch"])[:-1])
    with pytest.raises(ValueError, match=r"^000012\.log: the record at byte 0 is cut short"):
        check_log_files(tmp_path, {"CURRENT", "MANIFEST-000005", "000012.log"})
