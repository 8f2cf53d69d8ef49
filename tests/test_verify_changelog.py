"""`statecert inspect --verify` on a changelog checkpoint (FMT-14, CL-2): it reads the materialized state's files and
every log segment, and reports a damaged one by its file; the hostile corpus holds savepoints only, which are never
changelog handles (CL-7)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from statecert.cli.main import main
from statecert.conformance.helpers import create_subtasks, keyed_backend
from statecert.reference.checkpointing import take_snapshot
from statecert.reference.format.verify import verify_checkpoint
from statecert.reference.loader import load_state_backend
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.errors import CheckpointFormatError, StateMigrationError
from statecert.spec.state import ValueStateDescriptor
from tests.hostile.cases import Plain, delete, keyed, read_plain, rerecord, truncate, write_payload

VALUE = ValueStateDescriptor("v", serializer=LongSerializer())


def changelog_checkpoint(tmp_path: Path) -> Path:
    """Checkpoint 2 of a changelog-wrapped heap backend materializing at every checkpoint: its handle holds checkpoint
    1's materialization (a file) and the log segment of the 3,000 writes since (a file)."""
    backend = load_state_backend(
        job_config={"state.changelog.enabled": "true", "state.changelog.periodic-materialize.interval": "0"}
    )
    storage = FileSystemCheckpointStorage(f"file://{tmp_path}/checkpoints")
    access = storage.create_checkpoint_storage("job")
    (subtask,) = create_subtasks(backend, StringSerializer(), 1, 128)
    for checkpoint_id in (1, 2):
        for i in range(3000):
            subtask.keyed.set_current_key(f"k{i}-{checkpoint_id}")
            subtask.keyed.get_or_create_state(VALUE).update(i)
        take_snapshot([subtask], access.initialize_location_for_checkpoint(checkpoint_id), checkpoint_id, 128)
        subtask.keyed.notify_checkpoint_complete(checkpoint_id)
    subtask.dispose()
    return tmp_path / "checkpoints" / "job" / "chk-2"


def _stream(handle: Plain, part: str) -> Plain:
    """The file stream of the changelog handle's materialized state or of its (only) log segment."""
    assert len(handle[part]) == 1, f"expected one {part} part: {handle[part]}"
    stream: Plain = handle[part][0]["stream"]
    assert stream["type"] == "file", f"the {part} part is not a file: {stream}"
    return stream


def _file_of(part: str) -> Callable[[Path], Path]:
    """The file of the checkpoint's materialized state or of its log segment."""
    return lambda directory: directory / _stream(keyed(read_plain(directory)), part)["path"]


MATERIALIZED, SEGMENT = _file_of("materialized"), _file_of("changelog")


def _rewrite_segment(directory: Path) -> None:
    """The segment's bytes replaced by other bytes, its size and CRC-32C recorded anew: only its content is wrong."""
    plain = read_plain(directory)
    stream = _stream(keyed(plain), "changelog")
    (directory / stream["path"]).write_bytes(b"SCCL" + bytes(range(256)) * 8)
    rerecord(directory, stream)
    write_payload(directory, msgpack.packb(plain, use_bin_type=True), version=4)


DAMAGE = {  # (the file damaged, the damage)
    "materialized file deleted": (MATERIALIZED, delete(MATERIALIZED)),
    "segment truncated": (SEGMENT, truncate(SEGMENT)),
    "segment content rewritten, checksum recorded anew": (SEGMENT, _rewrite_segment),
}


@pytest.mark.requirement("FMT-14", "CL-2")
def test_verify_reads_the_materialization_and_every_segment_of_a_sound_changelog_checkpoint(tmp_path: Path) -> None:
    directory = changelog_checkpoint(tmp_path)
    report = verify_checkpoint(str(directory))
    assert report.ok, f"FMT-14: a sound changelog checkpoint reported {report.problems}"
    assert report.streams_checked == 2, (
        f"FMT-14: expected the materialization and the segment checked, got {report.streams_checked} streams"
    )


@pytest.mark.requirement("FMT-14", "CL-2")
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_verify_names_a_damaged_file_of_a_changelog_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    directory = changelog_checkpoint(tmp_path)
    file, damage_it = DAMAGE[damage]
    name = file(directory).name
    damage_it(directory)
    report = verify_checkpoint(str(directory))
    assert any(name in problem for problem in report.problems), (
        f"FMT-14: {damage} ({name}): expected a problem naming it, got {report.problems}"
    )
    status = main(["inspect", "--verify", str(directory)])
    err = capsys.readouterr().err
    assert status == 2 and name in err and "Traceback" not in err, f"inspect --verify: status {status}, stderr {err}"


def _forge_first_change(directory: Path, forge: Callable[[list[Any]], None]) -> None:
    """The segment's first change rewritten by `forge` (on its 8 fields), the segment re-encoded and its size and
    CRC-32C recorded anew: a forged, not a damaged, segment."""
    plain = read_plain(directory)
    stream = _stream(keyed(plain), "changelog")
    path = directory / stream["path"]
    data = path.read_bytes()
    body = msgpack.unpackb(data[8:], raw=False)
    forge(body[2][0])
    path.write_bytes(data[:8] + msgpack.packb(body, use_bin_type=True))
    rerecord(directory, stream)
    write_payload(directory, msgpack.packb(plain, use_bin_type=True), version=4)


def _other_key_group(change: list[Any]) -> None:
    change[1] = (change[1] + 1) % 128  # the key stays: it now hashes to another key group than it is logged under


def _key_not_utf8(change: list[Any]) -> None:
    change[4] = b"\xff\xfe" + change[4]


def _add_to_value_state(change: list[Any]) -> None:
    change[3] = "a"  # a list's ADD, logged for the value state `v`


def _value_of_three_bytes(change: list[Any]) -> None:
    change[7] = b"abc"  # a `long` is 8 bytes


def _touch_with_a_user_key(change: list[Any]) -> None:
    change[3], change[7] = "t", b"x"  # a TOUCH carries a map user key; `v` is a value state


FORGED = {
    "key logged under another key group": _other_key_group,
    "read of value state carrying a user key": _touch_with_a_user_key,
    "key not in UTF-8": _key_not_utf8,
    "op of another state kind": _add_to_value_state,
    "value its serializer cannot read": _value_of_three_bytes,
}


@pytest.mark.requirement("CL-4", "FMT-15", "FMT-14")
@pytest.mark.parametrize("forgery", sorted(FORGED))
def test_replay_and_verify_refuse_a_forged_change_alike(tmp_path: Path, forgery: str) -> None:
    """A change of a forged segment (sizes and checksums re-recorded) whose key belongs to another key group, or is
    not in its serializer's encoding, whose op does not apply to its state or whose value its serializer cannot read,
    is refused by a restore and by `inspect --verify` alike, naming the segment, as the canonical reader refuses
    such an entry (FMT-15): applied, it would add a key no lookup finds, overwrite another key's state, or fail the
    restore late with an error naming no file."""
    directory = changelog_checkpoint(tmp_path)
    _forge_first_change(directory, FORGED[forgery])
    report = verify_checkpoint(str(directory))
    assert not report.ok, f"FMT-14: inspect --verify passed a segment with a {forgery}"
    backend = load_state_backend(job_config={"state.changelog.enabled": "true"})
    metadata = FileSystemCheckpointStorage(f"file://{tmp_path}/checkpoints").load_checkpoint(str(directory))
    handles = list(metadata.operators[0].subtask_states[0].managed_keyed_state)
    with pytest.raises(CheckpointFormatError) as refused:
        restored = keyed_backend(backend, restore=handles)
        restored.dispose()
    named = refused.value.path
    assert any(named in problem for problem in report.problems), (
        f"FMT-14, CL-4: restore refused the {forgery} naming {named}; inspect --verify said {report.problems}"
    )


@pytest.mark.requirement("CL-4", "SER-6", "FMT-14")
def test_replay_and_verify_refuse_a_segment_whose_key_serializer_would_need_migration(tmp_path: Path) -> None:
    """A forged segment whose key serializer snapshot is `str` version 2 (the registered `str` is version 1: keys
    would have to be migrated, which SER-6 refuses) is refused by a restore and by `inspect --verify` alike, as a
    canonical stream with that key serializer is."""
    directory = changelog_checkpoint(tmp_path)
    plain = read_plain(directory)
    stream = _stream(keyed(plain), "changelog")
    path = directory / stream["path"]
    data = path.read_bytes()
    body = msgpack.unpackb(data[8:], raw=False)
    body[0]["version"] = 2
    path.write_bytes(data[:8] + msgpack.packb(body, use_bin_type=True))
    rerecord(directory, stream)
    write_payload(directory, msgpack.packb(plain, use_bin_type=True), version=4)
    report = verify_checkpoint(str(directory))
    assert not report.ok, "FMT-14: inspect --verify passed a segment whose key serializer is str v2"
    backend = load_state_backend(job_config={"state.changelog.enabled": "true"})
    metadata = FileSystemCheckpointStorage(f"file://{tmp_path}/checkpoints").load_checkpoint(str(directory))
    handles = list(metadata.operators[0].subtask_states[0].managed_keyed_state)
    with pytest.raises(StateMigrationError, match="key serializer"):
        keyed_backend(backend, restore=handles).dispose()
