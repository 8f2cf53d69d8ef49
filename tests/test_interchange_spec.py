"""The interchange chapter (IF) is byte-exact: snapshots the reference backends write are decoded here by a reader
written from the chapter alone (struct and msgpack, nothing from statecert's codecs), and a stream written by
hand from the chapter restores in the reference backends."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest

from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.loader import load_state_backend
from statecert.reference.serializers import LongSerializer, MsgpackSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.handles import KeyGroupsStateHandle, OperatorStateHandle
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.keygroups import KeyGroupRange, assign_to_key_group
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.state import (
    ListStateDescriptor,
    ManualClock,
    MapStateDescriptor,
    TtlConfig,
    ValueStateDescriptor,
)
from statecert.spec.storage import CheckpointedStateScope

CLOCK_MS = 1_700_000_000_123


def read_canonical(data: bytes, handle: KeyGroupsStateHandle) -> tuple[dict[str, Any], dict[int, list[Any]]]:
    """IF-2..IF-4, from the chapter."""
    magic, version, length = struct.unpack_from(">4sHI", data, 0)
    assert (magic, version) == (b"SCKG", 1)
    header = msgpack.unpackb(data[10 : 10 + length], raw=False)
    groups = {}
    for i, key_group in enumerate(range(handle.key_group_range.start, handle.key_group_range.end + 1)):
        offset = handle.offsets[i]
        (size,) = struct.unpack_from(">I", data, offset)
        groups[key_group] = msgpack.unpackb(data[offset + 4 : offset + 4 + size], raw=False)
    return header, groups


def keyed(backend: Any, restore: tuple[Any, ...] = ()) -> Any:
    params = KeyedBackendParameters(
        "job", "op", StringSerializer(), 128, KeyGroupRange(0, 127), restore, ManualClock(CLOCK_MS)
    )
    return backend.create_keyed_state_backend(params)


@pytest.mark.requirement("IF-1", "IF-2", "IF-3", "IF-4", "IF-5", "IF-7")
@pytest.mark.parametrize("name", ["hashmap", "rocksdb"])
def test_reference_canonical_savepoints_decode_by_the_chapter(tmp_path: Path, name: str) -> None:
    from statecert.spec.keyed_backend import CheckpointOptions, SnapshotType

    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    location = storage.create_checkpoint_storage("job").initialize_location_for_savepoint(1, str(tmp_path / "sp"))
    backend = load_state_backend(job_config={"state.backend.type": name})
    with keyed(backend) as b:
        b.set_current_key("alice")
        b.get_or_create_state(ValueStateDescriptor("v", serializer=LongSerializer())).update(-2)
        b.get_or_create_state(ListStateDescriptor("l", element_serializer=StringSerializer())).add_all(["x", "y"])
        b.get_or_create_state(
            MapStateDescriptor(
                "m",
                ttl=TtlConfig(1000),
                user_key_serializer=StringSerializer(),
                user_value_serializer=MsgpackSerializer(),
            )
        ).put("k", {"a": 1})
        handle = b.snapshot(1, 0, location, CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)).run()
    assert isinstance(handle, KeyGroupsStateHandle) and handle.snapshot_format == "canonical"
    with handle.delegate.open() as f:
        header, groups = read_canonical(f.read(), handle)
    assert header["key_serializer"] == {"id": "str", "version": 1, "config": {}}
    states = {s["name"]: s for s in header["states"]}
    assert states["v"]["kind"] == "value" and states["v"]["serializers"]["value"]["id"] == "long"
    assert states["l"]["serializers"] == {"element": {"id": "str", "version": 1, "config": {}}}
    assert set(states["m"]["serializers"]) == {"user_key", "user_value"} and states["m"]["ttl"] is True
    assert states["v"]["namespace_serializer"]["id"] == "void-namespace"
    key_group = assign_to_key_group(StringSerializer().key_hash("alice"), 128)
    assert all(not entries for g, entries in groups.items() if g != key_group)
    by_state = {header["states"][index]["name"]: (key, ns, payload) for index, key, ns, payload in groups[key_group]}
    assert by_state["v"] == (b"alice", b"", struct.pack(">q", -2))
    assert by_state["l"] == (b"alice", b"", [b"x", b"y"])
    (user_key, stored), *_ = by_state["m"][2]
    assert user_key == b"k" and stored == struct.pack(">q", CLOCK_MS) + msgpack.packb({"a": 1}, use_bin_type=True)


@pytest.mark.requirement("IF-8", "TM-10")
@pytest.mark.parametrize("name", ["hashmap", "rocksdb"])
def test_reference_timers_in_a_canonical_savepoint_decode_by_the_chapter(tmp_path: Path, name: str) -> None:
    """Timers are the map states `_timer_state/<kind>_<service>` (user key the timestamp, value true), read here
    from the chapter; a fired and a deleted timer are gone."""
    from statecert.spec.keyed_backend import CheckpointOptions, SnapshotType

    class Ignore:
        def on_event_time(self, timer: Any) -> None: ...
        def on_processing_time(self, timer: Any) -> None: ...

    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    location = storage.create_checkpoint_storage("job").initialize_location_for_savepoint(1, str(tmp_path / "sp"))
    backend = load_state_backend(job_config={"state.backend.type": name})
    with keyed(backend) as b:
        service = b.get_timer_service("windows", StringSerializer(), Ignore())
        b.set_current_key("alice")
        for time in (5, -(2**63), 2**63 - 1, 7):
            service.register_event_time_timer("w1", time)
        service.delete_event_time_timer("w1", 7)
        service.register_processing_time_timer("w2", 30)
        service.advance_watermark(5)  # fires (alice, w1, -2**63) and (alice, w1, 5)
        handle = b.snapshot(1, 0, location, CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)).run()
    with handle.delegate.open() as f:
        header, groups = read_canonical(f.read(), handle)
    states = {s["name"]: s for s in header["states"]}
    long_, bool_ = ({"id": i, "version": 1, "config": {}} for i in ("long", "bool"))
    for kind in ("event", "processing"):
        state = states[f"_timer_state/{kind}_windows"]
        assert state["kind"] == "map" and state["ttl"] is False, state
        assert state["serializers"] == {"user_key": long_, "user_value": bool_}, state
        assert state["namespace_serializer"] == {"id": "str", "version": 1, "config": {}}, state
    entries = {
        header["states"][index]["name"]: (key, ns, payload)
        for entries in groups.values()
        for index, key, ns, payload in entries
        if header["states"][index]["name"].startswith("_timer_state/")
    }
    assert entries == {
        "_timer_state/event_windows": (b"alice", b"w1", [[struct.pack(">q", 2**63 - 1), b"\x01"]]),
        "_timer_state/processing_windows": (b"alice", b"w2", [[struct.pack(">q", 30), b"\x01"]]),
    }


@pytest.mark.requirement("IF-2", "IF-3", "IF-4", "IF-5", "SP-1")
@pytest.mark.parametrize("name", ["hashmap", "rocksdb"])
def test_a_stream_written_from_the_chapter_restores(tmp_path: Path, name: str) -> None:
    from statecert.spec.handles import CANONICAL_FORMAT

    def snap(i: str) -> dict[str, Any]:
        return {"id": i, "version": 1, "config": {}}

    header = {
        "backend": "hand-written",
        "key_serializer": snap("str"),
        "states": [
            {
                "name": "count",
                "kind": "value",
                "namespace_serializer": snap("void-namespace"),
                "serializers": {"value": snap("long")},
                "ttl": False,
            },
            {
                "name": "seen",
                "kind": "list",
                "namespace_serializer": snap("void-namespace"),
                "serializers": {"element": snap("long")},
                "ttl": True,
            },
        ],
    }
    head = msgpack.packb(header, use_bin_type=True)
    out = bytearray(struct.pack(">4sHI", b"SCKG", 1, len(head)) + head)
    offsets = []
    keys = {f"w{i}": i for i in range(20)}
    for key_group in range(128):
        offsets.append(len(out))
        entries = [
            e
            for key, i in keys.items()
            if assign_to_key_group(StringSerializer().key_hash(key), 128) == key_group
            for e in (
                [0, key.encode(), b"", struct.pack(">q", i)],
                [1, key.encode(), b"", [struct.pack(">q", CLOCK_MS) + struct.pack(">q", i)]],
            )
        ]
        block = msgpack.packb(entries, use_bin_type=True)
        out += struct.pack(">I", len(block)) + block
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    with location.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as stream:
        stream.write(bytes(out))
        delegate = stream.close_and_get_handle()
    handle = KeyGroupsStateHandle(KeyGroupRange(0, 127), tuple(offsets), delegate, CANONICAL_FORMAT)
    backend = load_state_backend(job_config={"state.backend.type": name})
    with keyed(backend, (handle,)) as b:
        count = b.get_or_create_state(ValueStateDescriptor("count", serializer=LongSerializer()))
        seen = b.get_or_create_state(
            ListStateDescriptor("seen", ttl=TtlConfig(10), element_serializer=LongSerializer())
        )
        for key, i in keys.items():
            b.set_current_key(key)
            assert (count.value(), seen.get()) == (i, [i])


@pytest.mark.requirement("IF-6", "IF-1")
def test_operator_state_stream_decodes_by_the_chapter(tmp_path: Path) -> None:
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    backend = HashMapStateBackend().create_operator_state_backend(OperatorBackendParameters("job", "op"))
    backend.get_list_state(ListStateDescriptor("offsets", element_serializer=LongSerializer())).add_all([5, 6])
    backend.get_broadcast_state(
        MapStateDescriptor("rules", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())
    ).put("r", 7)
    handle = backend.snapshot(1, 0, location).run()
    assert isinstance(handle, OperatorStateHandle)
    with handle.delegate.open() as f:
        data = f.read()
    magic, version, length = struct.unpack_from(">4sHI", data, 0)
    assert (magic, version) == (b"SCOP", 1)
    header = msgpack.unpackb(data[10 : 10 + length], raw=False)
    assert header["offsets"] == {"mode": "split", "serializer": {"id": "long", "version": 1, "config": {}}}
    assert header["rules"]["mode"] == "broadcast" and header["rules"]["serializer"]["id"] == "tuple"

    def element(offset: int) -> bytes:
        (size,) = struct.unpack_from(">I", data, offset)
        return data[offset + 4 : offset + 4 + size]

    assert [element(o) for o in handle.states["offsets"].offsets] == [struct.pack(">q", 5), struct.pack(">q", 6)]
    (rule,) = [msgpack.unpackb(element(o)) for o in handle.states["rules"].offsets]
    assert rule == [b"r", struct.pack(">q", 7)]
    assert sorted(handle.states) == ["offsets", "rules"]
    assert handle.states["offsets"].offsets[0] < handle.states["rules"].offsets[0], "IF-6: states in name order"
    backend.dispose()
