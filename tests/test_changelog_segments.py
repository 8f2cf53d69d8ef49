"""Changelog segment files across versions (CL-3): version 2 added the list merge; version 1 segments still read,
and a merge inside one is refused as malformed, as is a state name KS-2 does not allow."""

from __future__ import annotations

import struct

import pytest

from statecert.reference.changelog.records import MAGIC, Change, LoggedState, Op, decode_segment, encode_segment
from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.serializers import StringSerializer
from statecert.spec.errors import CheckpointFormatError
from statecert.spec.state import StateKind

STRINGS = StringSerializer().snapshot_configuration()


def segment(version: int, *ops: Op, state: str = "l") -> bytes:
    payloads = {Op.ADD: b"x", Op.MERGE: [b"source"], Op.CLEAR: None}
    changes = [Change(i, 3, state, op, b"k", b"target", 0, payloads[op]) for i, op in enumerate(ops, 1)]
    logged = LoggedState(StateMetaInfo(state, StateKind.LIST, STRINGS, {"element": STRINGS}, False), None)
    data = encode_segment(STRINGS, {state: logged}, changes)
    return MAGIC + struct.pack(">i", version) + data[8:]


def test_a_version_1_segment_still_reads() -> None:
    decoded = decode_segment(segment(1, Op.ADD, Op.CLEAR), "old.sccl", 128)
    assert [c.op for c in decoded.changes] == [Op.ADD, Op.CLEAR]


def test_a_list_merge_round_trips_in_version_2() -> None:
    decoded = decode_segment(segment(2, Op.ADD, Op.MERGE), "new.sccl", 128)
    assert decoded.changes[1].op is Op.MERGE and decoded.changes[1].payload == [b"source"]
    assert decoded.changes[1].namespace == b"target"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (segment(1, Op.MERGE), "a MERGE change in a version 1 segment"),
        (segment(3, Op.ADD), "unknown changelog segment version 3"),
        (segment(2, Op.ADD, state="l\x00"), "holds a NUL character"),
    ],
    ids=["merge-in-version-1", "version-3", "state-name-with-nul"],
)
def test_a_segment_a_version_cannot_hold_is_refused_naming_the_file(data: bytes, problem: str) -> None:
    with pytest.raises(CheckpointFormatError) as refused:
        decode_segment(data, "bad.sccl", 128)
    assert "bad.sccl" in str(refused.value) and problem in str(refused.value), str(refused.value)
