"""State changes as the changelog stores them (CL-3): plain msgpack, never pickle. A segment file is
`magic | version | msgpack [key serializer, states, changes]`; `states` describes every state its changes name
(name, kind, serializer snapshots, TTL), so each segment reads on its own; a change is
`[sequence, key group, state index, op, key, namespace, timestamp, payload]` with the key, namespace and payload
serialized by the state's own serializers, as the wrapped backend stores them. Version 2 added the list merge
(`m`); version 1 segments, which lack it, still read."""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from statecert.reference.format.handle_codec import bounded_int, field
from statecert.reference.format.state_meta import StateMetaInfo
from statecert.spec.errors import CheckpointFormatError
from statecert.spec.serializers import SerializerSnapshot
from statecert.spec.state import TtlConfig, TtlStateVisibility, TtlUpdateType

MAGIC = b"SCCL"
VERSION = 2
READABLE_VERSIONS = (1, 2)
MAX_SEQUENCE = 2**63 - 1


class Op(str, enum.Enum):
    """What a change does, stored as one letter; every op is replayable without the state's functions (CL-4)."""

    SET = "s"  # value: the new value; reducing: the reduced value; aggregating: the accumulator
    CLEAR = "c"  # the (key, namespace) entry is gone
    ADD = "a"  # list: one element appended
    ADD_ALL = "b"  # list: elements appended
    REPLACE = "r"  # list: the whole list
    PUT = "p"  # map: [user key, value]
    REMOVE = "d"  # map: user key
    TOUCH = "t"  # a read that refreshes (ON_READ_AND_WRITE) or cleans up (RETURN_EXPIRED_IF_NOT_CLEANED_UP) TTL
    # state; payload: a map user key or None
    MERGE = "m"  # list: the change's namespace is the target; payload: the source namespaces (version 2)


@dataclass(frozen=True)
class LoggedState:
    """A state as the log knows it: its snapshot meta (serializer snapshots, kind) and TTL configuration."""

    meta: StateMetaInfo
    ttl: TtlConfig | None

    def to_plain(self) -> dict[str, Any]:
        ttl = self.ttl
        return {
            "meta": self.meta.to_plain(),
            "ttl": None
            if ttl is None
            else {"ms": ttl.ttl_ms, "update": ttl.update_type.value, "visibility": ttl.visibility.value},
        }

    @classmethod
    def from_plain(cls, data: Any) -> LoggedState:
        meta = StateMetaInfo.from_plain(field(data, "meta", dict))
        plain_ttl = data.get("ttl")
        ttl = None
        if plain_ttl is not None:
            ttl = TtlConfig(
                bounded_int(plain_ttl, "ms", 1),
                TtlUpdateType(field(plain_ttl, "update", str)),
                TtlStateVisibility(field(plain_ttl, "visibility", str)),
            )
        if meta.ttl != (ttl is not None):
            raise ValueError(f"state {meta.name!r}: TTL flag and TTL configuration disagree")
        return cls(meta, ttl)


@dataclass(frozen=True)
class Change:
    sequence: int
    key_group: int
    state: str
    op: Op
    key: bytes
    namespace: bytes
    timestamp: int
    payload: Any


def encode_segment(key_serializer: SerializerSnapshot, states: dict[str, LoggedState], changes: list[Change]) -> bytes:
    index = {name: i for i, name in enumerate(sorted(states))}
    body = [
        key_serializer.to_plain(),
        [states[name].to_plain() for name in sorted(states)],
        [
            [c.sequence, c.key_group, index[c.state], c.op.value, c.key, c.namespace, c.timestamp, c.payload]
            for c in changes
        ],
    ]
    return MAGIC + struct.pack(">i", VERSION) + msgpack.packb(body, use_bin_type=True)


def _payload(op: Op, value: Any) -> Any:
    """Check a change's payload shape for its op (bytes, None, lists of bytes, [bytes, bytes|None])."""
    if op in (Op.SET, Op.ADD, Op.REMOVE):
        ok = isinstance(value, bytes) or (op is Op.SET and value is None)
    elif op in (Op.ADD_ALL, Op.REPLACE, Op.MERGE):
        ok = isinstance(value, list) and all(isinstance(v, bytes) for v in value)
    elif op is Op.PUT:
        ok = isinstance(value, list) and len(value) == 2 and isinstance(value[0], bytes)
        ok = ok and (value[1] is None or isinstance(value[1], bytes))
    elif op is Op.TOUCH:
        ok = value is None or isinstance(value, bytes)
    else:
        ok = value is None
    if not ok:
        raise ValueError(f"a {op.name} change has a malformed payload")
    return value


@dataclass(frozen=True)
class Segment:
    key_serializer: SerializerSnapshot
    states: dict[str, LoggedState]
    changes: list[Change]


def decode_segment(data: bytes, name: str, max_parallelism: int) -> Segment:
    """Validate and decode a segment; anything malformed is a CheckpointFormatError naming the file (FMT-8)."""
    if data[:4] != MAGIC or len(data) < 8:
        raise CheckpointFormatError(name, "not a changelog segment (bad magic)")
    (version,) = struct.unpack(">i", data[4:8])
    if version not in READABLE_VERSIONS:
        raise CheckpointFormatError(name, f"unknown changelog segment version {version}")
    try:
        body = msgpack.unpackb(data[8:], raw=False, strict_map_key=True, max_array_len=10_000_000)
        if not isinstance(body, list) or len(body) != 3:
            raise ValueError("the segment body is not [key serializer, states, changes]")
        key_serializer = SerializerSnapshot.from_plain(field({"k": body[0]}, "k", dict))
        states = [LoggedState.from_plain(s) for s in field({"s": body[1]}, "s", list)]
        names = [s.meta.name for s in states]
        if len(set(names)) != len(names):
            raise ValueError("a state is described twice")
        changes = []
        previous = 0
        for raw in field({"c": body[2]}, "c", list):
            if not isinstance(raw, list) or len(raw) != 8:
                raise ValueError("a change is not an 8-element list")
            sequence, key_group, state, op, key, namespace, timestamp, payload = raw
            plain = {"s": sequence, "g": key_group, "i": state, "t": timestamp}
            sequence = bounded_int(plain, "s", 1, MAX_SEQUENCE)
            if sequence <= previous:
                raise ValueError("change sequence numbers are not strictly ascending")
            previous = sequence
            key_group = bounded_int(plain, "g", 0, max_parallelism - 1)
            index = bounded_int(plain, "i", 0, len(states) - 1)
            timestamp = bounded_int(plain, "t", -(2**63), 2**63 - 1)
            if not isinstance(key, bytes) or not isinstance(namespace, bytes):
                raise ValueError("a change's key and namespace must be bytes")
            op = Op(op)
            if op is Op.MERGE and version < 2:
                raise ValueError(f"a MERGE change in a version {version} segment")
            changes.append(
                Change(sequence, key_group, names[index], op, key, namespace, timestamp, _payload(op, payload))
            )
    except CheckpointFormatError:
        raise
    except (
        ValueError,
        TypeError,
        KeyError,
        RecursionError,
        msgpack.ExtraData,
        msgpack.FormatError,
        msgpack.StackError,
    ) as exc:
        raise CheckpointFormatError(name, f"malformed changelog segment: {exc}") from None
    return Segment(key_serializer, {s.meta.name: s for s in states}, changes)
