"""A Flink keyed state stream (a full snapshot's `KeyGroupsStateHandle`): the `KeyedBackendSerializationProxy` header
(version 6: compression, key serializer, each state's meta information) and the entries of each key group, in
either of Flink's two layouts:

- the unified savepoint layout (`FullSnapshotAsyncWriter`, canonical savepoints of every backend and full RocksDB
  checkpoints): per key group, RocksDB-style key and value bytes (key-group prefix, key, namespace, map user key;
  map values with a null flag, list elements comma-delimited), a flag bit marking the last entry of a state;
- the heap layout (`HeapSnapshotStrategy`, hashmap checkpoints): per key group its id, then per state a block of
  (namespace, key, value) triples written by the state's own serializer.

Each key group is checked: its id, every key's key-group prefix, and for scalar keys the key group Flink's
murmur hash assigns (as FMT-15 does for statecert's own format). Compressed streams are Snappy-framed."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import cramjam

from statecert.reference.flink.java_input import JavaDataInput
from statecert.reference.flink.metadata import FlinkKeyGroupsHandle
from statecert.reference.flink.serializers import FlinkSerializer, Undecodable, read_serializer_snapshot
from statecert.reference.serializers import (
    ByteSerializer,
    IntSerializer,
    JavaBooleanSerializer,
    JavaDoubleSerializer,
    LongSerializer,
    ShortSerializer,
    StringSerializer,
)
from statecert.spec.errors import CheckpointFormatError
from statecert.spec.keygroups import assign_to_key_group

PROXY_VERSION = 6
BACKEND_STATE_TYPES = ("KEY_VALUE", "OPERATOR", "BROADCAST", "PRIORITY_QUEUE")
END_OF_KEY_GROUP = 0xFFFF
META_FOLLOWS = 0x80
LIST_DELIMITER = 0x2C
MAX_DECOMPRESSED = 1 << 30
# the key hash Flink gives a scalar key (its Java `hashCode`)
KEY_HASHES: dict[str, Callable[[Any], int]] = {
    "string": StringSerializer().key_hash,
    "long": LongSerializer().key_hash,
    "int": IntSerializer().key_hash,
    "short": ShortSerializer().key_hash,
    "byte": ByteSerializer().key_hash,
    "double": JavaDoubleSerializer().key_hash,
    "boolean": JavaBooleanSerializer().key_hash,
}


@dataclass(frozen=True)
class FlinkStateMeta:
    """One state of the header: name, backend type, keyed kind (`VALUE`, `LIST`, `MAP`, `REDUCING`, ...) and
    serializers by role (`VALUE_SERIALIZER`, `NAMESPACE_SERIALIZER`, ...)."""

    name: str
    backend_type: str
    kind: str
    serializers: dict[str, FlinkSerializer]

    @property
    def value(self) -> FlinkSerializer:
        return self.serializers["VALUE_SERIALIZER"]

    @property
    def namespace(self) -> FlinkSerializer | None:
        return self.serializers.get("NAMESPACE_SERIALIZER")


@dataclass(frozen=True)
class FlinkKeyedHeader:
    compressed: bool
    key_serializer: FlinkSerializer
    states: tuple[FlinkStateMeta, ...]


@dataclass(frozen=True)
class FlinkEntry:
    """One keyed state entry: the state, its key group, key, namespace and value (a map state: one entry per user
    key, `user_key` set)."""

    state: FlinkStateMeta
    key_group: int
    key: Any
    namespace: Any
    value: Any
    user_key: Any = None


def read_header(inp: JavaDataInput) -> FlinkKeyedHeader:
    version = inp.read_int()
    if version != PROXY_VERSION:
        raise inp.fail(f"a keyed state header of version {version}; this reader reads version {PROXY_VERSION}")
    compressed = inp.read_boolean()
    key_serializer = read_serializer_snapshot(inp)
    states = []
    for _ in range(inp.read_unsigned_short()):
        name = inp.read_utf()
        type_index = inp.read_int()
        if not 0 <= type_index < len(BACKEND_STATE_TYPES):
            raise inp.fail(f"state {name!r}: backend state type {type_index}")
        options = {}
        for _ in range(inp.read_count("state options", 4)):
            key = inp.read_utf()
            options[key] = inp.read_utf()
        serializers = {}
        for _ in range(inp.read_count("state serializers", 4)):
            role = inp.read_utf()
            serializers[role] = read_serializer_snapshot(inp)
        if "VALUE_SERIALIZER" not in serializers:
            raise inp.fail(f"state {name!r} without a value serializer")
        kind = options.get("KEYED_STATE_TYPE", BACKEND_STATE_TYPES[type_index])
        states.append(FlinkStateMeta(name, BACKEND_STATE_TYPES[type_index], kind, serializers))
    return FlinkKeyedHeader(compressed, key_serializer, tuple(states))


class EntryDecoder:
    """Decodes the RocksDB-style key and value bytes of one entry (the unified layout, and native RocksDB)."""

    def __init__(self, header: FlinkKeyedHeader, max_parallelism: int, path: str) -> None:
        self.header, self.max_parallelism, self.path = header, max_parallelism, path
        self.prefix_bytes = 1 if max_parallelism <= 128 else 2

    def check_key(self, key: Any, key_group: int, inp: JavaDataInput) -> None:
        """A scalar key must hash to the key group it is stored in."""
        key_hash = KEY_HASHES.get(self.header.key_serializer.kind)
        if key_hash is not None and key is not None:
            expected = assign_to_key_group(key_hash(key), self.max_parallelism)
            if expected != key_group:
                raise inp.fail(f"key {key!r} in key group {key_group}; it hashes to key group {expected}")

    def key_group(self, key: bytes) -> int:
        return int.from_bytes(key[: self.prefix_bytes], "big")

    def entry(self, meta: FlinkStateMeta, key_group: int, key: bytes, value: bytes) -> Iterator[FlinkEntry]:
        inp = JavaDataInput(key, self.path)
        prefix = int.from_bytes(inp.read(self.prefix_bytes), "big")
        if prefix != key_group:
            raise inp.fail(f"state {meta.name!r}: an entry of key group {prefix} stored in key group {key_group}")
        if meta.backend_type == "PRIORITY_QUEUE":
            return  # timers: their bytes are the timer serializer's, not a key and a value
        user_key = self.header.key_serializer.decode(inp)
        self.check_key(user_key, key_group, inp)
        namespace = meta.namespace.decode(inp) if meta.namespace is not None else None
        values = JavaDataInput(value, self.path)
        serializer = meta.value
        if meta.kind == "MAP":
            map_key = serializer.fields[0].decode(inp)
            _end(inp, meta, "key")
            item = None if values.read_boolean() else serializer.fields[1].decode(values)
            _end(values, meta, "value")
            yield FlinkEntry(meta, key_group, user_key, namespace, item, map_key)
            return
        _end(inp, meta, "key")
        if meta.kind == "LIST":
            elements = []
            while values.remaining():
                elements.append(serializer.fields[0].decode(values))
                if values.remaining() and values.read_unsigned_byte() != LIST_DELIMITER:
                    raise values.fail(f"state {meta.name!r}: list elements without their delimiter")
            yield FlinkEntry(meta, key_group, user_key, namespace, elements)
            return
        item = serializer.decode(values) if serializer.decodable else Undecodable(serializer.name)
        if serializer.decodable:
            _end(values, meta, "value")
        yield FlinkEntry(meta, key_group, user_key, namespace, item)


class FlinkKeyedStream:
    """The bytes of one keyed state stream, its header, and its entries key group by key group."""

    def __init__(self, data: bytes, path: str, handle: FlinkKeyGroupsHandle, max_parallelism: int) -> None:
        self.data, self.path, self.handle, self.max_parallelism = data, path, handle, max_parallelism
        inp = JavaDataInput(data, path)
        self.header = read_header(inp)
        self.header_end = inp.position
        self.decoder = EntryDecoder(self.header, max_parallelism, path)
        for offset in handle.offsets:
            if offset != 0 and not self.header_end <= offset < len(data):
                raise CheckpointFormatError(path, f"a key group offset {offset} outside the stream's data")
        self._starts = sorted({o for o in handle.offsets if o != 0})
        self.heap_layout = not handle.savepoint and self._looks_like_heap()

    def _looks_like_heap(self) -> bool:
        """Heap checkpoints give every key group an offset and start it with its id; the unified layout gives
        offsets only to key groups with entries and starts them with a state id (a short)."""
        offsets = self.handle.offsets
        if not offsets or any(o == 0 for o in offsets):
            return False
        group = self.handle.start
        return bool(int.from_bytes(self.data[offsets[0] : offsets[0] + 4], "big", signed=True) == group)

    def _region(self, index: int) -> tuple[int, int]:
        """Where key group `index` of the handle lies: its offset up to the next greater one or the end."""
        start = self.handle.offsets[index]
        after = bisect.bisect_right(self._starts, start)
        return start, self._starts[after] if after < len(self._starts) else len(self.data)

    def _expand(self, raw: bytes, what: str) -> bytes:
        if not self.header.compressed:
            return raw
        try:
            out = bytes(cramjam.snappy.decompress(raw))
        except Exception as exc:  # cramjam's error type is its own; any failure is a damaged stream
            raise CheckpointFormatError(self.path, f"{what}: not Snappy-framed data ({exc})") from None
        if len(out) > MAX_DECOMPRESSED:
            raise CheckpointFormatError(self.path, f"{what}: decompresses to more than {MAX_DECOMPRESSED} bytes")
        return out

    def entries(self) -> Iterator[FlinkEntry]:
        for index, offset in enumerate(self.handle.offsets):
            key_group = self.handle.start + index
            if offset == 0:
                continue
            start, end = self._region(index)
            if self.heap_layout:
                yield from self._heap_group(key_group, start, end)
            else:
                region = self._expand(self.data[start:end], f"key group {key_group}")
                yield from self._unified_group(key_group, JavaDataInput(region, self.path))

    # the unified layout

    def _unified_group(self, key_group: int, inp: JavaDataInput) -> Iterator[FlinkEntry]:
        states = self.header.states
        state_id = inp.read_unsigned_short()
        while True:
            if state_id >= len(states):
                raise inp.fail(f"key group {key_group}: state id {state_id} of {len(states)} states")
            key = bytearray(inp.read(inp.read_count("key bytes")))
            value = inp.read(inp.read_count("value bytes"))
            last = bool(key and key[0] & META_FOLLOWS)
            if last:
                key[0] &= ~META_FOLLOWS & 0xFF
            yield from self.decoder.entry(states[state_id], key_group, bytes(key), value)
            if last:
                state_id = inp.read_unsigned_short()
                if state_id == END_OF_KEY_GROUP:
                    break
        if inp.remaining():
            raise inp.fail(f"key group {key_group}: {inp.remaining()} bytes after its end mark")

    # the heap layout

    def _heap_group(self, key_group: int, start: int, end: int) -> Iterator[FlinkEntry]:
        inp = JavaDataInput(self.data[:end], self.path, start)
        if inp.read_int() != key_group:
            raise inp.fail(f"key group {key_group} does not start with its id")
        block = inp  # one block per state; compressed, each is a Snappy stream of its own, and they decode as one
        if self.header.compressed:
            block = JavaDataInput(self._expand(inp.read(inp.remaining()), f"key group {key_group}"), self.path)
        states, keys = self.header.states, self.header.key_serializer
        while block.remaining():
            state_id = block.read_unsigned_short()
            if state_id >= len(states):
                raise block.fail(f"key group {key_group}: state id {state_id} of {len(states)} states")
            meta = states[state_id]
            for _ in range(block.read_count(f"entries of state {meta.name!r}")):
                if meta.backend_type == "PRIORITY_QUEUE":
                    self._heap_timer(meta, block)
                    continue
                namespace = meta.namespace.decode(block) if meta.namespace is not None else None
                key = keys.decode(block)
                self.decoder.check_key(key, key_group, block)
                if not meta.value.decodable:
                    raise block.fail(
                        f"state {meta.name!r}: a heap snapshot of {meta.value.name}, which has no "
                        "recorded length: this reader cannot step over it"
                    )
                value = meta.value.decode(block)
                if meta.kind == "MAP":
                    for map_key, item in value.items():
                        yield FlinkEntry(meta, key_group, key, namespace, item, map_key)
                else:
                    yield FlinkEntry(meta, key_group, key, namespace, value)

    def _heap_timer(self, meta: FlinkStateMeta, block: JavaDataInput) -> None:
        timer = meta.value
        if timer.kind != "timer" or not all(f.decodable for f in timer.fields):
            raise block.fail(f"state {meta.name!r}: a priority queue of {timer.name}")
        block.read_long()
        for field in timer.fields:
            field.decode(block)


def _end(inp: JavaDataInput, meta: FlinkStateMeta, what: str) -> None:
    if inp.remaining():
        raise inp.fail(f"state {meta.name!r}: {inp.remaining()} bytes after an entry's {what}")
