"""Changelog segment files across versions (CL-3): version 2 added the list merge; version 1 segments still read,
and a merge inside one is refused as malformed, as is a state name KS-2 does not allow."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import pytest

from statecert.reference.changelog.records import MAGIC, Change, LoggedState, Op, decode_segment, encode_segment
from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.serializers import StringSerializer
from statecert.spec.errors import CheckpointFormatError
from statecert.spec.state import StateKind, TtlConfig

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


MAX_PARALLELISM = 128
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def raw_segment(*changes: Any, body: Any = None) -> bytes:
    """A version 2 segment describing list state "l" (index 0) and map state "m" with a 1 ms TTL (index 1), whose
    changes are the raw 8-element lists given: what a hostile or damaged file may hold, unchecked by the encoder."""
    states = [
        LoggedState(StateMetaInfo("l", StateKind.LIST, STRINGS, {"element": STRINGS}, False), None),
        LoggedState(
            StateMetaInfo("m", StateKind.MAP, STRINGS, {"user_key": STRINGS, "user_value": STRINGS}, True),
            TtlConfig(1),
        ),
    ]
    plain = [STRINGS.to_plain(), [s.to_plain() for s in states], list(changes)] if body is None else body
    return MAGIC + struct.pack(">i", 2) + msgpack.packb(plain, use_bin_type=True)


def change(
    sequence: int = 1, key_group: int = 3, state: int = 0, op: str = "a", payload: Any = b"x", **rest: Any
) -> Any:
    return [
        sequence,
        key_group,
        state,
        op,
        rest.get("key", b"k"),
        rest.get("namespace", b""),
        rest.get("time", 0),
        payload,
    ]


EDGES = {
    "the last key group": change(key_group=MAX_PARALLELISM - 1),
    "the first key group": change(key_group=0),
    "the last sequence number": change(sequence=LONG_MAX),
    "the earliest time": change(time=LONG_MIN),
    "the latest time": change(time=LONG_MAX),
    "a map put of a None value": change(state=1, op="p", payload=[b"k", None]),
    "a cleared value": change(op="s", payload=None),
    "a read of every map entry": change(state=1, op="t", payload=None),
    "a read of one map entry": change(state=1, op="t", payload=b"k"),
    "an empty list appended": change(op="b", payload=[]),
}


@pytest.mark.parametrize("edge", sorted(EDGES))
def test_a_segment_at_the_edges_of_its_ranges_and_shapes_reads(edge: str) -> None:
    """CL-3: every bounded field at its end, and every payload shape an op allows, decodes as written (a 1 ms TTL
    included)."""
    decoded = decode_segment(raw_segment(EDGES[edge]), "edge.sccl", MAX_PARALLELISM)
    sequence, key_group, _, op, key, namespace, time, payload = EDGES[edge]
    got = decoded.changes[0]
    assert (got.sequence, got.key_group, got.op.value, got.key, got.namespace, got.timestamp, got.payload) == (
        sequence, key_group, op, key, namespace, time, payload
    ), f"decode_segment of {edge}: got {got}"  # fmt: skip
    assert decoded.states["m"].ttl == TtlConfig(1)


HOSTILE = {
    "a key group at the max parallelism": raw_segment(change(key_group=MAX_PARALLELISM)),
    "a negative key group": raw_segment(change(key_group=-1)),
    "a state index past the states": raw_segment(change(state=2)),
    "a negative state index": raw_segment(change(state=-1)),
    "sequence number 0": raw_segment(change(sequence=0)),
    "a sequence number past Long.MAX_VALUE": raw_segment(change(sequence=2**63)),
    "a sequence number repeated": raw_segment(change(sequence=5), change(sequence=5)),
    "sequence numbers descending": raw_segment(change(sequence=5), change(sequence=4)),
    "a time past Long.MAX_VALUE": raw_segment(change(time=2**63)),
    "a change of 7 fields": raw_segment(change()[:7]),
    "a change of 9 fields": raw_segment([*change(), 0]),
    "a change that is a map": raw_segment({"s": 1}),
    "a key that is text": raw_segment(change(key="k")),
    "a namespace that is text": raw_segment(change(namespace="")),
    "a body of 2 parts": raw_segment(body=[STRINGS.to_plain(), []]),
    "a body that is a map": raw_segment(body={"changes": []}),
    "a set of a list": raw_segment(change(op="s", payload=[b"x"])),
    "an add of None": raw_segment(change(op="a", payload=None)),
    "a remove of None": raw_segment(change(state=1, op="d", payload=None)),
    "an add-all of bytes": raw_segment(change(op="b", payload=b"x")),
    "an add-all with a number": raw_segment(change(op="b", payload=[b"x", 1])),
    "a replace with None": raw_segment(change(op="r", payload=[None])),
    "a merge of a number": raw_segment(change(op="m", payload=[1])),
    "a put of one part": raw_segment(change(state=1, op="p", payload=[b"k"])),
    "a put of three parts": raw_segment(change(state=1, op="p", payload=[b"k", b"v", b"w"])),
    "a put under a text key": raw_segment(change(state=1, op="p", payload=["k", b"v"])),
    "a put of a number": raw_segment(change(state=1, op="p", payload=[b"k", 1])),
    "a read of a number": raw_segment(change(state=1, op="t", payload=1)),
    "a clear with bytes": raw_segment(change(op="c", payload=b"x")),
    "an unknown op": raw_segment(change(op="z")),
    "the magic number alone": MAGIC + b"\x00\x00",
    "another magic number": b"SCCX" + raw_segment(change())[4:],
}


@pytest.mark.parametrize("damage", sorted(HOSTILE))
def test_a_segment_outside_its_ranges_or_shapes_is_refused_naming_the_file(damage: str) -> None:
    """FMT-8, CL-3: a field out of its range, a change or payload of another shape than its op's, or a body of
    another shape is a CheckpointFormatError naming the file, never a change replayed into another key group, state
    or order, nor another exception."""
    try:
        decoded: Any = decode_segment(HOSTILE[damage], "hostile.sccl", MAX_PARALLELISM)
    except CheckpointFormatError as refused:
        assert "hostile.sccl" in str(refused), f"{damage}: the error does not name the file: {refused}"
        return
    except Exception as exc:
        decoded = exc
    raise AssertionError(f"decode_segment of {damage}: expected CheckpointFormatError, got {decoded!r}")


def test_a_raw_serializer_equals_and_hashes_as_its_snapshot() -> None:
    """Replay's stand-in for a logged serializer: equal, and of equal hash, exactly when the snapshots are equal."""
    from statecert.reference.changelog.raw_serializer import RawSerializer
    from statecert.reference.serializers import LongSerializer

    strings, longs = StringSerializer().snapshot_configuration(), LongSerializer().snapshot_configuration()
    a, b = RawSerializer(strings), RawSerializer(strings)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1, "equal snapshots: one serializer"
    assert a != RawSerializer(longs), "other snapshots: other serializers"
