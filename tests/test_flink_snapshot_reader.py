"""The Flink snapshot reader on snapshots Flink 2.3 wrote (tests/flink/golden/savepoints, written by
`python -m tests.flink.savepoints`; `tox -e flink` writes them afresh): every state a job left is read back, per
key, equal to the state computed from the job's records; damaged and forged input fails closed (FMT-8, IF-9)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Set
from pathlib import Path
from typing import Any

import pytest

from statecert.cli.main import main
from statecert.reference.flink.metadata import load_flink_checkpoint
from statecert.reference.flink.snapshot import HandleReader, choose_operator, keyed_handles
from statecert.spec.errors import CheckpointFormatError, IllegalConfigurationError
from tests.flink.savepoints import GOLDEN, VARIANTS, expected_state

# what a variant cannot hold or this reader cannot read, by (operator, state)
NOT_READ = {
    # written without them: a heap layout records no value lengths
    "hashmap-retained-checkpoint": {("words", "opaque"), ("words", "point")},
    "rocksdb-native-savepoint": {("words", "seen")},  # list state as merge operands: refused, not read
}


def read_flink_state(pointer: str, uid: str, skip: Set[str] = frozenset()) -> dict[tuple[Any, str], Any]:
    """Per (key, state name), the value read (map state: a dict of its entries)."""
    checkpoint = load_flink_checkpoint(pointer)
    op = choose_operator(checkpoint, uid)
    state: dict[tuple[Any, str], Any] = {}
    for handle in keyed_handles(op):
        reader = HandleReader(handle, checkpoint.path, op.max_parallelism)
        for entry in reader.entries({m.name for m in reader.header.states} - skip):
            value = str(entry.value) if entry.state.name in ("opaque", "point") else entry.value
            key = (entry.key, entry.state.name)
            assert key not in state or entry.state.kind == "MAP", f"IF-9: {key} read twice from {pointer}"
            if entry.state.kind == "MAP":
                state.setdefault(key, {})[entry.user_key] = value
            else:
                state[key] = value
    return state


@pytest.mark.requirement("IF-9")
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_flink_snapshot_reads_as_the_state_its_job_left(variant: str) -> None:
    expected = expected_state()
    not_read = NOT_READ.get(variant, set())
    for uid in ("words", "buckets"):
        skip = {state for op, state in not_read if op == uid}
        if variant == "rocksdb-native-savepoint" and skip:
            with pytest.raises(CheckpointFormatError, match="merge operands"):
                read_flink_state(str(GOLDEN / variant), uid)
        got = read_flink_state(str(GOLDEN / variant), uid, skip)
        want = {k: v for k, v in expected[uid].items() if k[1] not in skip}
        assert got == want, (
            f"IF-9: read_flink_state({variant}, {uid}): expected the state of the job's records "
            f"({len(want)} values), got {len(got)}; differing: "
            f"{sorted(set(got.items()) ^ set(want.items()), key=str)[:4] if all(map(_hashable, got.values())) else ''}"
        )


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


@pytest.mark.requirement("IF-9", "FMT-14")
def test_inspect_verify_decodes_every_entry_of_a_flink_savepoint(capsys: pytest.CaptureFixture[str]) -> None:
    pointer = str(GOLDEN / "rocksdb-canonical-savepoint-compressed")
    status = main(["inspect", pointer, "--verify", "--json"])
    assert status == 0, f"IF-9: statecert inspect {pointer} --verify --json: expected exit status 0, got {status}"
    info = json.loads(capsys.readouterr().out)
    entries = {op["uid"]: op["entries"] for op in info["operators"] if op["states"]}
    # one entry per key and state, and per user key of a map state
    want = {
        uid: sum(len(v) if name == "parity" else 1 for (_, name), v in state.items())
        for uid, state in expected_state().items()
    }
    assert info["written_by"] == "Apache Flink" and entries == want, (
        f"IF-9: statecert inspect {pointer} --verify --json: expected {want} entries, got {entries}"
    )


@pytest.mark.requirement("IF-9")
def test_an_operator_is_chosen_by_uid_name_or_id_and_a_wrong_choice_names_the_choices() -> None:
    checkpoint = load_flink_checkpoint(str(GOLDEN / "hashmap-canonical-savepoint"))
    words = choose_operator(checkpoint, "words")
    assert choose_operator(checkpoint, words.operator_id) == words, "IF-9: operator by id differs from by uid"
    with pytest.raises(IllegalConfigurationError, match="buckets, words"):
        choose_operator(checkpoint, "counter")


def _copy(variant: str, tmp_path: Path) -> Path:
    target = tmp_path / variant
    shutil.copytree(GOLDEN / variant, target)
    return target


@pytest.mark.requirement("FMT-8", "IF-9")
def test_a_relative_state_path_that_leaves_the_snapshot_is_refused(tmp_path: Path) -> None:
    snapshot = _copy("rocksdb-canonical-savepoint-compressed", tmp_path)
    metadata = (snapshot / "_metadata").read_bytes()
    name = next(p.name for p in snapshot.iterdir() if p.name != "_metadata").encode()
    forged = b"../" + b"x" * (len(name) - 3)
    (snapshot / "_metadata").write_bytes(metadata.replace(name, forged, 1))
    with pytest.raises(CheckpointFormatError, match="leaves the snapshot"):
        load_flink_checkpoint(str(snapshot))


@pytest.mark.requirement("FMT-8", "FMT-12")
def test_a_state_file_of_another_size_than_recorded_is_refused_not_read_short(tmp_path: Path) -> None:
    snapshot = _copy("rocksdb-canonical-savepoint-compressed", tmp_path)
    stream = next(p for p in snapshot.iterdir() if p.name != "_metadata")
    stream.write_bytes(stream.read_bytes()[:-1])
    with pytest.raises(CheckpointFormatError, match="bytes where _metadata recorded"):
        for uid in ("words", "buckets"):
            read_flink_state(str(snapshot), uid)


@pytest.mark.requirement("FMT-2", "FMT-8")
def test_a_flink_metadata_version_this_reader_does_not_know_is_refused(tmp_path: Path) -> None:
    from statecert.spec.errors import UnknownFormatVersionError

    snapshot = _copy("hashmap-canonical-savepoint", tmp_path)
    metadata = bytearray((snapshot / "_metadata").read_bytes())
    metadata[4:8] = (7).to_bytes(4, "big")
    (snapshot / "_metadata").write_bytes(bytes(metadata))
    with pytest.raises(UnknownFormatVersionError, match="version 7"):
        load_flink_checkpoint(str(snapshot))
