"""Fuzzing the state-file readers: the canonical key-group stream, the operator state stream and RocksDB's native
files. Damage (bits flipped, bytes cut or overwritten, nothing re-recorded) must give a documented error or exactly
the written state; hostile files whose size and CRC-32C were re-recorded (so only validation can object) must give
a documented error or a restore whose every state reads back without an undocumented exception (FMT-8, FMT-12,
FMT-15, RDB-7)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.spec import errors
from tests.fuzz_mutations import damaged, hostile_values
from tests.fuzz_support import FUZZ, TALLIES, SilentStateChange, assert_verify_agrees, outcome, same_or_error
from tests.hostile.cases import edit_canonical, keyed, operator, read_plain, rerecord, write_plain
from tests.hostile.savepoints import build, expected_state, read_state

Files = Callable[[Any], list[Any]]  # plain `_metadata` -> the stream dicts of one reader's files


@pytest.fixture(scope="module")
def bases() -> Iterator[dict[str, Path]]:
    with tempfile.TemporaryDirectory() as scratch:
        for name in ("hashmap", "rocksdb"):
            build(Path(scratch) / name, name)
        yield {name: Path(scratch) / name for name in ("hashmap", "rocksdb")}


def canonical_files(plain: Any) -> list[Any]:
    return [keyed(plain, i)["stream"] for i in (0, 1)]


def operator_files(plain: Any) -> list[Any]:
    return [operator(plain, i)["stream"] for i in (0, 1)]


def native_files(plain: Any) -> list[Any]:
    handle = keyed(plain, 0)
    return [*handle["shared"].values(), *handle["private"].values(), handle["meta"]]


READERS: dict[str, tuple[str, Files]] = {
    "canonical stream": ("hashmap", canonical_files),
    "operator stream": ("hashmap", operator_files),
    "native RocksDB files": ("rocksdb", native_files),
}


def damage_one_file(data: st.DataObject, base: Path, directory: Path, files: Files, rerecord_checksum: bool) -> None:
    shutil.copytree(base, directory)
    plain = read_plain(directory)
    stream = data.draw(st.sampled_from([s for s in files(plain) if "path" in s]))
    path = directory / stream["path"]
    path.write_bytes(data.draw(damaged(path.read_bytes())))
    if rerecord_checksum:
        rerecord(directory, stream)
        write_plain(directory, plain)


def read_all(directory: Path, backend: str, parallelism: int) -> Any:
    return read_state(str(directory), backend, parallelism)


@pytest.mark.requirement("FMT-12", "RDB-7")
@pytest.mark.parametrize("reader", sorted(READERS))
@FUZZ
@given(data=st.data())
def test_damaged_state_file_is_an_error_or_the_same_state(
    bases: dict[str, Path], reader: str, data: st.DataObject
) -> None:
    backend, files = READERS[reader]
    parallelism = data.draw(st.sampled_from([1, 2]))
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "sp"
        damage_one_file(data, bases[backend], directory, files, rerecord_checksum=False)
        same_or_error(f"{reader}: damaged", lambda: read_all(directory, backend, parallelism), expected_state())


@pytest.mark.requirement("FMT-8", "FMT-15", "RDB-7")
@pytest.mark.parametrize("reader", sorted(READERS))
@FUZZ
@given(data=st.data())
def test_hostile_state_file_is_rejected_or_reads_back(bases: dict[str, Path], reader: str, data: st.DataObject) -> None:
    backend, files = READERS[reader]
    parallelism = data.draw(st.sampled_from([1, 2]))
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "sp"
        damage_one_file(data, bases[backend], directory, files, rerecord_checksum=True)
        run = lambda: read_all(directory, backend, parallelism)  # noqa: E731
        if backend == "rocksdb":  # RocksDB's block checksums and the log check cover what the CRC-32C no longer does
            same_or_error(f"{reader}: damaged, CRC-32C re-recorded", run, expected_state())
        else:
            outcome(f"{reader}: damaged, CRC-32C re-recorded", run)


@pytest.mark.requirement("FMT-8", "FMT-15")
@FUZZ
@given(data=st.data())
def test_hostile_canonical_entries_are_rejected_or_read_back(bases: dict[str, Path], data: st.DataObject) -> None:
    """Structure-aware: entries of a canonical stream replaced by hostile values, the stream re-written with valid
    lengths, offsets, size and checksum."""

    def edit(blocks: dict[int, list[Any]]) -> None:
        groups = [kg for kg, entries in blocks.items() if entries]
        key_group = data.draw(st.sampled_from(groups))
        entries = blocks[key_group]
        index = data.draw(st.integers(0, len(entries) - 1))
        action = data.draw(st.sampled_from(["field", "entry", "move"]))
        if action == "field":
            entries[index][data.draw(st.integers(0, 3))] = data.draw(hostile_values)
        elif action == "entry":
            entries[index] = data.draw(hostile_values)
        else:
            target = data.draw(st.sampled_from(sorted(blocks)))
            blocks[target].append(entries.pop(index))

    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "sp"
        shutil.copytree(bases["hashmap"], directory)
        try:
            edit_canonical(edit, data.draw(st.sampled_from([0, 1])))(directory)
        except (TypeError, ValueError, OverflowError):
            return  # the hostile value cannot even be written as msgpack
        outcome("canonical stream: hostile entries", lambda: read_all(directory, "hashmap", 2))


SNAPSHOT_VALUES = ["long", "str", "int", "bytes", "msgpack", "void-namespace", "java-double", "no-such-id", 0, 2, {}]
FORMATS = ["canonical", "native:rocksdb", "changelog", "", "Canonical", "canonical-v2"]


def forge_header(data: st.DataObject, directory: Path, index: int) -> None:
    """Subtask `index`'s canonical stream re-written with one serializer snapshot of its header (the key
    serializer's or a state's namespace or value serializer's) given another id, version or configuration, or its
    handle's format string in `_metadata` changed; the size and CRC-32C re-recorded."""
    if data.draw(st.booleans()):
        plain = read_plain(directory)
        keyed(plain, index)["format"] = data.draw(st.sampled_from(FORMATS))
        write_plain(directory, plain)
        return

    def forge(header: Any) -> None:
        snapshots = [header["key_serializer"]]
        for state in header["states"]:
            snapshots += [state["namespace_serializer"], *state["serializers"].values()]
        snapshot = data.draw(st.sampled_from(snapshots))
        snapshot[data.draw(st.sampled_from(["id", "version", "config"]))] = data.draw(st.sampled_from(SNAPSHOT_VALUES))

    edit_canonical(lambda blocks: None, index, edit_header=forge)(directory)


def forged_copy(bases: dict[str, Path], data: st.DataObject, scratch: Path) -> Path | None:
    """A copy of the canonical savepoint under `scratch` with a header or format forged (`forge_header`); None when
    the forgery cannot even be written as msgpack."""
    directory = scratch / "sp"
    shutil.copytree(bases["hashmap"], directory)
    try:
        forge_header(data, directory, data.draw(st.sampled_from([0, 1])))
    except (TypeError, ValueError, OverflowError):
        return None
    return directory


@pytest.mark.requirement("FMT-8", "SER-4", "SER-6", "KB-RESTORE-5")
@FUZZ
@given(data=st.data(), parallelism=st.sampled_from([1, 2]))
def test_forged_canonical_header_is_refused_or_reads_as_the_spec_only_backend_reads_it(
    bases: dict[str, Path], data: st.DataObject, parallelism: int
) -> None:
    """A serializer snapshot of a canonical header or a handle's format string forged (size and CRC-32C
    re-recorded): the reference refuses it with a documented error, or restores exactly the state the example
    backend written from the spec alone restores from the same bytes (else: a silent state change)."""
    reader = "canonical stream: forged header or format, CRC-32C re-recorded"
    with tempfile.TemporaryDirectory() as scratch:
        directory = forged_copy(bases, data, Path(scratch))
        if directory is None:
            return
        got = outcome(reader, lambda: read_all(directory, "hashmap", parallelism))
        if got is None:
            return
        try:
            spec = read_all(directory, "spec-only", parallelism)
        except errors.StateCertError as exc:
            spec = f"refused: {type(exc).__name__}: {exc}"
        if got != spec:
            TALLIES[reader]["SILENT STATE CHANGE"] += 1
            raise SilentStateChange(
                f"FMT-8: forged header at parallelism {parallelism}: the reference restored {got}, the spec-only "
                f"backend {spec}"
            )


KEYED_READERS = ["canonical stream", "native RocksDB files"]
"""Operator streams are left out: a restore checks an operator state's serializer only when the job registers the
state, which `inspect --verify`, knowing no job, cannot decide alike."""


@pytest.mark.requirement("FMT-14")
@pytest.mark.parametrize("reader", KEYED_READERS)
@FUZZ
@given(data=st.data(), rerecord_checksum=st.booleans())
def test_inspect_verify_refuses_exactly_what_a_restore_refuses(
    bases: dict[str, Path], reader: str, data: st.DataObject, rerecord_checksum: bool
) -> None:
    """Over damaged and forged keyed state files (size and CRC-32C re-recorded or not), `inspect --verify`'s verdict
    is a restore's: it reports a problem exactly when a restore of every key group refuses the checkpoint."""
    backend, files = READERS[reader]
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "sp"
        damage_one_file(data, bases[backend], directory, files, rerecord_checksum)
        what = f"{reader}, damaged{', CRC-32C re-recorded' if rerecord_checksum else ''}"
        assert_verify_agrees(directory, what, lambda: read_all(directory, backend, 1))  # every key group in one


@pytest.mark.requirement("FMT-14")
@FUZZ
@given(data=st.data())
def test_inspect_verify_refuses_exactly_the_forged_headers_a_restore_refuses(
    bases: dict[str, Path], data: st.DataObject
) -> None:
    """Over forged canonical headers and handle formats (`forge_header`), `inspect --verify`'s verdict is a
    restore's of every key group."""
    with tempfile.TemporaryDirectory() as scratch:
        directory = forged_copy(bases, data, Path(scratch))
        if directory is not None:
            assert_verify_agrees(
                directory, "forged canonical header or format", lambda: read_all(directory, "hashmap", 1)
            )
