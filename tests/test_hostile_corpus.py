"""The hostile corpus (`tests/hostile/`): every damaged, hostile or half-deleted savepoint fails closed with its
documented error, in restore and in `statecert inspect --verify`; never another exception, never a smaller state."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from statecert.cli.main import main
from statecert.reference.format.verify import verify_checkpoint
from statecert.spec import errors
from tests.hostile.cases import CASES, Case, Plain, edit_canonical, keyed, read_plain, write_plain
from tests.hostile.savepoints import build, expected_state, read_state

CORPUS = Path(__file__).resolve().parent / "hostile" / "corpus"
RESTORERS = {"hashmap": ("hashmap", "rocksdb"), "rocksdb": ("rocksdb",)}


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    for name in ("hashmap", "rocksdb"):
        build(root / name, name)
    return {name: root / name for name in ("hashmap", "rocksdb")}


@pytest.mark.requirement("FMT-12", "FMT-15")
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_undamaged_base_restores_exactly(bases: dict[str, Path], backend: str, parallelism: int) -> None:
    """The corpus's bases restore to exactly what was written: what every case damages is a correct savepoint."""
    for base in RESTORERS:
        if backend in RESTORERS[base]:
            got = read_state(str(bases[base]), backend, parallelism)
            assert got == expected_state(), f"{base} savepoint restored by {backend} at parallelism {parallelism}"
            assert verify_checkpoint(str(bases[base])).ok


def test_corpus_is_complete() -> None:
    """Every case is in the committed corpus (regenerate with `python -m tests.hostile.make_corpus`)."""
    assert sorted(p.name for p in CORPUS.iterdir()) == sorted(c.name for c in CASES)


@pytest.mark.requirement("FMT-8", "FMT-10", "FMT-11", "FMT-12", "FMT-15", "RDB-7")
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_savepoint_fails_closed(case: Case, tmp_path: Path) -> None:
    """Restoring the case at parallelism 1 and 2 raises the case's documented error, and leaves nothing in the
    backends' working directory; any other outcome fails. (A bit flip RocksDB cannot notice may restore, but then
    exactly the written state.)"""
    expected = getattr(errors, case.error)
    for backend in RESTORERS[case.base]:
        for parallelism in (1, 2):
            directory = tmp_path / f"{backend}-{parallelism}"
            shutil.copytree(CORPUS / case.name, directory)
            work = tmp_path / f"work-{backend}-{parallelism}"
            work.mkdir()
            try:
                state = read_state(str(directory), backend, parallelism, local_dir=str(work))
            except expected as exc:
                assert str(directory) in str(exc) or "RocksDB" in str(exc), f"{exc} names no file"
                left = sorted(p.name for p in work.iterdir())
                assert not left, f"{case.name}: the failed restore by {backend} left {left} in its working directory"
                continue
            assert case.name == "sst-bit-flip-checksum-rerecorded" and state == expected_state(), (
                f"{case.name} ({case.what}): restored by {backend} at parallelism {parallelism} without "
                f"{case.error}; {'a different' if state != expected_state() else 'the original'} state came back"
            )


@pytest.mark.requirement("FMT-14")
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_inspect_verify_reports_every_case(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`statecert inspect --verify` exits 2 with one line per problem for every case, never a traceback."""
    directory = tmp_path / case.name
    shutil.copytree(CORPUS / case.name, directory)
    status = main(["inspect", "--verify", str(directory)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    if case.name == "sst-bit-flip-checksum-rerecorded" and status == 0:
        return  # a bit RocksDB's files do not cover; the restore test proves the state is intact
    assert status == 2, f"{case.name}: inspect --verify exited {status}: {err}"
    assert lines and all(line.startswith("statecert: error: ") for line in lines), err
    assert "Traceback" not in err


@pytest.mark.requirement("FMT-14", "ERR-2")
@pytest.mark.parametrize("case", ["missing-state-file", "truncated-state-file"])
def test_plain_inspect_reports_a_missing_or_cut_file(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Even without --verify, inspect checks each file's existence and size (no content read) and exits 2: it never
    calls a savepoint with a missing state file fine."""
    shutil.copytree(CORPUS / case, tmp_path / case)
    assert main(["inspect", str(tmp_path / case)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("statecert: error: file://"), err


@pytest.mark.requirement("FMT-12", "FMT-14")
def test_inspect_verify_passes_a_sound_savepoint(bases: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    for base in bases.values():
        assert main(["inspect", "--verify", str(base)]) == 0
        assert "no problem" in capsys.readouterr().out


def _replace_state_file(directory: Path, make: str, outside: Path) -> None:
    path = directory / keyed(read_plain(directory))["stream"]["path"]
    data = path.read_bytes()
    path.unlink()
    if make == "symlink-outside":
        outside.write_bytes(data)
        path.symlink_to(outside)
    elif make == "symlink-inside":
        (directory / "copy").write_bytes(data)
        path.symlink_to(directory / "copy")
    else:
        os.mkfifo(path)


@pytest.mark.requirement("FMT-10")
@pytest.mark.parametrize("make", ["symlink-outside", "symlink-inside", "fifo"])
def test_state_file_replaced_by_a_link_or_special_file_is_refused(
    bases: dict[str, Path], tmp_path: Path, make: str
) -> None:
    """FMT-10 by real path: a state file that is a symbolic link (even with the right bytes) or a FIFO is refused
    with UnsafePathError before anything opens it (a FIFO would block the reader forever)."""
    directory = tmp_path / "savepoint"
    shutil.copytree(bases["hashmap"], directory)
    _replace_state_file(directory, make, tmp_path / "outside")
    with pytest.raises(errors.UnsafePathError, match=r"symbolic link|regular file"):
        read_state(str(directory), "hashmap", 2)
    assert not verify_checkpoint(str(directory)).ok


@pytest.mark.requirement("FMT-10")
def test_savepoint_directory_reached_through_a_symlink_restores(bases: dict[str, Path], tmp_path: Path) -> None:
    """Confinement compares real paths on both sides: a savepoint opened through a linked parent still restores."""
    (tmp_path / "link").symlink_to(bases["hashmap"].parent)
    assert read_state(str(tmp_path / "link" / "hashmap"), "hashmap", 2) == expected_state()


@pytest.mark.requirement("FMT-14", "KB-RESTORE-5")
@pytest.mark.parametrize("forged", ["native:rocksdb", "changelog", "", "Canonical", "native:another-backend"])
def test_inspect_verify_reports_a_key_groups_handle_in_a_format_no_backend_reads_from_it(
    bases: dict[str, Path], tmp_path: Path, forged: str
) -> None:
    """A key-groups handle whose format string was forged: every backend refuses it (KB-RESTORE-5), so
    `inspect --verify` reports it naming the stream; another backend's own `native:<name>` format is that backend's
    to read, and `inspect --verify` checks its file only."""
    directory = tmp_path / "savepoint"
    shutil.copytree(bases["hashmap"], directory)
    plain = read_plain(directory)
    keyed(plain, 0)["format"] = forged
    write_plain(directory, plain)
    report = verify_checkpoint(str(directory))
    stream = keyed(plain, 0)["stream"]["path"]
    with pytest.raises(errors.UnsupportedSnapshotError):
        read_state(str(directory), "hashmap", 1)
    if forged == "native:another-backend":
        assert report.ok, f"FMT-14: a key-groups handle in {forged!r}: expected its file checked only, got {report}"
    else:
        assert any(stream in p and repr(forged) in p for p in report.problems), (
            f"FMT-14: a key-groups handle in format {forged!r}: inspect --verify expected to report it naming "
            f"{stream}, got {report.problems}"
        )


@pytest.mark.requirement("SER-4", "FMT-14")
@pytest.mark.parametrize("registered_by_the_job", [True, False])
def test_a_restored_state_whose_serializer_id_nothing_registers_is_refused(
    bases: dict[str, Path], tmp_path: Path, registered_by_the_job: bool
) -> None:
    """A canonical header giving a state's namespace serializer an id nothing registers (size and CRC-32C
    re-recorded) fails the restore with StateMigrationError naming the state, whether or not the job registers the
    state (Flink reads every restored state's serializer snapshot), and `inspect --verify` reports it alike."""
    directory = tmp_path / "savepoint"
    shutil.copytree(bases["hashmap"], directory)

    def forge(header: Plain) -> None:
        for state in header["states"]:
            if state["name"] == "count":
                state["namespace_serializer"]["id"] = "no-such-serializer"
                state["name"] = "count" if registered_by_the_job else "bount"

    for index in (0, 1):
        edit_canonical(lambda blocks: None, index, edit_header=forge)(directory)
    with pytest.raises(errors.StateMigrationError, match="no-such-serializer") as refused:
        read_state(str(directory), "hashmap", 1)
    assert "count" in str(refused.value) or "bount" in str(refused.value), (
        f"SER-4: expected the error to name the state, got {refused.value}"
    )
    assert not verify_checkpoint(str(directory)).ok, "FMT-14: inspect --verify passed an unregistered serializer id"
