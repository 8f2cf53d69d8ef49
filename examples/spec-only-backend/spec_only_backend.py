"""A state backend written from statecert's spec alone: the protocols in `statecert.spec` and the interchange
chapter (spec/chapters/16-interchange.md). It imports nothing from `statecert.reference`.

State lives in plain dicts of serialized bytes, one dict per state: `(key group, key bytes, namespace bytes)` ->
bytes (value, reducing, aggregating), list of bytes (list) or dict of bytes (map). A snapshot copies the dicts in
its synchronous part and writes the canonical key-group stream (IF-2..IF-4) in its asynchronous part. Operator
state is in `spec_only_operator_backend` (chapter OS, IF-6), timers in `spec_only_timers` (chapter TM, IF-8). TTL
(chapter TTL, IF-5) is in `spec_only_ttl`, the default serializers (IF-1) in `spec_only_serializers` and the
snapshot task both snapshots use in `spec_only_snapshots`. Schema evolution (SER-3..SER-7) uses only the spec:
restored state is read with the serializer that wrote it, which the spec's registry
(`statecert.spec.serializer_registry`) restores from the snapshot in the checkpoint.
"""

from __future__ import annotations

import copy
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import IO, Any

import msgpack
from spec_only_operator_backend import SpecOnlyOperatorBackend
from spec_only_serializers import DEFAULT, VOID
from spec_only_snapshots import SnapshotTask, stream_name
from spec_only_timers import TimerService
from spec_only_ttl import STAMP, Ttl

from statecert.spec.backend import BackendCapabilities
from statecert.spec.errors import (
    BackendClosedError,
    CheckpointFormatError,
    IllegalStateError,
    InvalidStateValueError,
    SnapshotCancelledError,
    StateMigrationError,
    UnsupportedSnapshotError,
)
from statecert.spec.handles import CANONICAL_FORMAT, KeyedStateHandle, KeyGroupsStateHandle
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, CheckpointOptions, KeyedBackendParameters
from statecert.spec.keygroups import KeyGroupRange, assign_to_key_group, check_max_parallelism
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.serializer_registry import restore_serializer
from statecert.spec.serializers import Compatibility, SerializerSnapshot, TypeSerializer
from statecert.spec.state import StateDescriptor, StateKind
from statecert.spec.storage import CheckpointedStateScope, CheckpointStreamFactory
from statecert.spec.timers import Triggerable

Key = tuple[int, bytes, bytes]  # key group, key bytes, namespace bytes
_PREFIX = struct.Struct(">4sHI")  # IF-2
_LEN = struct.Struct(">I")


ROLES = {
    StateKind.VALUE: ("value",),
    StateKind.REDUCING: ("value",),
    StateKind.AGGREGATING: ("value",),
    StateKind.LIST: ("element",),
    StateKind.MAP: ("user_key", "user_value"),
}


def serializers_of(descriptor: Any) -> dict[str, TypeSerializer[Any]]:
    """The descriptor's serializers by role (IF-3)."""
    kind = descriptor.kind
    if kind is StateKind.AGGREGATING:
        return {"value": descriptor.accumulator_serializer or DEFAULT}
    if kind is StateKind.LIST:
        return {"element": descriptor.element_serializer or DEFAULT}
    if kind is StateKind.MAP:
        return {
            "user_key": descriptor.user_key_serializer or DEFAULT,
            "user_value": descriptor.user_value_serializer or DEFAULT,
        }
    return {"value": descriptor.serializer or DEFAULT}


def resolve(what: str, new: TypeSerializer[Any], old: SerializerSnapshot) -> tuple[TypeSerializer[Any], bool]:
    """SER-3: the serializer to use from now on and whether the old bytes must be migrated to it; incompatible is a
    StateMigrationError naming `what` (SER-7)."""
    result = new.resolve_compatibility(old)
    if result.kind is Compatibility.INCOMPATIBLE:
        raise StateMigrationError(f"{what} is incompatible: {result.reason}")
    if result.kind is Compatibility.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER and result.reconfigured is not None:
        return result.reconfigured, False
    return new, result.kind is Compatibility.COMPATIBLE_AFTER_MIGRATION


def migrate(table: Table, old: Mapping[str, TypeSerializer[Any]], new: Mapping[str, TypeSerializer[Any]]) -> None:
    """SER-5: rewrite every entry of the roles in `old` from the old serializer's bytes to the new one's."""

    def convert(role: str, data: bytes) -> bytes:
        if role not in old:
            return data
        stamp, value = table.value_bytes(role, data)
        return stamp + new[role].serialize(old[role].deserialize(value))  # TTL-6: the timestamp stays

    for key, payload in table.entries.items():
        if table.kind is StateKind.LIST:
            table.entries[key] = [convert("element", e) for e in payload]
        elif table.kind is StateKind.MAP:
            table.entries[key] = {convert("user_key", k): convert("user_value", v) for k, v in payload.items()}
        else:
            table.entries[key] = convert("value", payload)


# -- one registered (or restored) state --------------------------------------------------------------------------
@dataclass
class Table:
    name: str
    kind: StateKind
    namespace: SerializerSnapshot
    serializers: dict[str, SerializerSnapshot]
    entries: dict[Key, Any] = field(default_factory=dict)
    source: str | None = None  # the stream it was restored from, until its values are validated (FMT-15)
    ttl: bool = False  # values, list elements and map user values carry a last-access timestamp (IF-5)

    def value_bytes(self, role: str, data: bytes) -> tuple[bytes, bytes]:
        """(timestamp prefix, serializer bytes) of stored bytes of `role`; the user key has no timestamp."""
        if not self.ttl or role == "user_key":
            return b"", data
        if len(data) < STAMP.size:
            raise ValueError(f"{len(data)} bytes are too short for a TTL timestamp")
        return data[: STAMP.size], data[STAMP.size :]

    def validate(self, serializers: Mapping[str, TypeSerializer[Any]], ns: TypeSerializer[Any]) -> None:
        """Decode every restored namespace and value once the state's serializers are known (FMT-15)."""
        if self.source is None:
            return
        for (group, _, ns_bytes), payload in self.entries.items():
            pairs: list[tuple[str, bytes]]
            if self.kind is StateKind.LIST:
                pairs = [("element", e) for e in payload]
            elif self.kind is StateKind.MAP:
                pairs = [p for k, v in payload.items() for p in (("user_key", k), ("user_value", v))]
            else:
                pairs = [("value", payload)]
            try:
                found = [(ns, ns_bytes)]
                if self.kind is StateKind.MAP:
                    found += [(serializers["user_key"], k) for k in payload]
                for role, data in pairs:
                    serializers[role].deserialize(self.value_bytes(role, data)[1])
                for serializer, data in found:  # what lookups find by: only in the bytes they serialize (FMT-15)
                    if serializer.serialize(serializer.deserialize(data)) != data:
                        raise ValueError(f"{data.hex()[:32]} is not in its serializer's encoding: never found")
            except (ValueError, TypeError, LookupError, ArithmeticError, struct.error) as exc:
                raise CheckpointFormatError(
                    self.source, f"key group {group}: state {self.name!r}: an entry cannot be read ({exc!r})"
                ) from None
        self.source = None

    def header(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "namespace_serializer": self.namespace.to_plain(),
            "serializers": {role: s.to_plain() for role, s in self.serializers.items()},
            "ttl": self.ttl,
        }


class _State:
    """State bound to the backend's current key and its own namespace (KS-3)."""

    def __init__(
        self,
        backend: SpecOnlyKeyedBackend,
        table: Table,
        descriptor: Any,
        ns: TypeSerializer[Any],
        serializers: dict[str, TypeSerializer[Any]],
    ):
        self.backend, self.table, self.descriptor, self.ns = backend, table, descriptor, ns
        self.ser = serializers
        self.ns_bytes: bytes | None = b"" if ns is VOID else None
        self.ttl = Ttl(descriptor.ttl, backend.params.ttl_clock)

    def _read(self) -> bytes | None:
        """The current entry's serializer bytes (value, reducing, aggregating), through TTL (TTL-1..TTL-3)."""
        key = self._key()
        stored = self.table.entries.get(key)
        if stored is None:
            return None
        payload, keep = self.ttl.read(stored)
        if keep is None:
            del self.table.entries[key]
        else:
            self.table.entries[key] = keep
        return payload

    def _write(self, payload: bytes) -> None:
        self.table.entries[self._key()] = self.ttl.stamp(payload)

    def set_current_namespace(self, namespace: Any) -> None:
        if namespace is None:
            raise InvalidStateValueError("the namespace may not be None (KS-NS-1)")
        self.ns_bytes = self.ns.serialize(namespace)

    def _key(self, ns_bytes: bytes | None = None) -> Key:
        group, key = self.backend.current()
        ns = self.ns_bytes if ns_bytes is None else ns_bytes
        if ns is None:
            raise IllegalStateError(f"state {self.table.name!r}: no namespace set")
        return group, key, ns

    def clear(self) -> None:
        self.table.entries.pop(self._key(), None)

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """KS-MERGE-1..3: pop each source, fold it into the target."""
        group, key = self.backend.current()
        popped = [self.table.entries.pop((group, key, self.ns.serialize(s)), None) for s in sources]
        popped = [p for p in popped if p is not None]
        if not popped:
            return
        self.set_current_namespace(target)
        for stored in popped:
            self._fold(stored)

    def _fold(self, stored: Any) -> None:
        raise NotImplementedError


class ValueState(_State):
    def value(self) -> Any:
        stored = self._read()
        if stored is None:
            default = self.descriptor.default
            return None if default is None else copy.deepcopy(default)  # KS-VALUE-2
        return self.ser["value"].deserialize(stored)

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
        else:
            self._write(self.ser["value"].serialize(value))


class ReducingState(_State):
    def get(self) -> Any:
        stored = self._read()
        return None if stored is None else self.ser["value"].deserialize(stored)

    def add(self, value: Any) -> None:
        if value is None:
            raise InvalidStateValueError("reducing state does not accept None (KS-RED-2)")
        current = self.get()
        merged = value if current is None else self.descriptor.reduce_function(current, value)
        self._write(self.ser["value"].serialize(merged))

    def _fold(self, stored: Any) -> None:
        if not self.ttl.expired(stored):  # an expired source is dropped, not folded (TTL-3)
            self.add(self.ser["value"].deserialize(self.ttl.payload(stored)))


class AggregatingState(_State):
    def _acc(self) -> Any:
        stored = self._read()
        return None if stored is None else self.ser["value"].deserialize(stored)

    def get(self) -> Any:
        acc = self._acc()
        return None if acc is None else self.descriptor.aggregate_function.get_result(acc)

    def get_internal(self) -> Any:
        """The accumulator (spec `InternalAppendingState`, CL-9: what the changelog backend logs)."""
        return self._acc()

    def update_internal(self, accumulator: Any) -> None:
        if accumulator is None:
            self.clear()
        else:
            self._write(self.ser["value"].serialize(accumulator))

    def add(self, value: Any) -> None:
        fn = self.descriptor.aggregate_function
        acc = self._acc()
        acc = fn.add(value, fn.create_accumulator() if acc is None else acc)
        self._write(self.ser["value"].serialize(acc))

    def _fold(self, stored: Any) -> None:
        if self.ttl.expired(stored):  # an expired source is dropped, not folded (TTL-3)
            return
        fn = self.descriptor.aggregate_function
        acc, other = self._acc(), self.ser["value"].deserialize(self.ttl.payload(stored))
        self._write(self.ser["value"].serialize(other if acc is None else fn.merge(acc, other)))


class ListState(_State):
    def _encode(self, values: Iterable[Any]) -> list[bytes]:
        values = list(values)
        if any(v is None for v in values):
            raise InvalidStateValueError("list state does not accept None elements (KS-LIST-3)")
        return [self.ttl.stamp(self.ser["element"].serialize(v)) for v in values]

    def get(self) -> list[Any] | None:
        key = self._key()
        stored = self.table.entries.get(key)
        if stored and self.ttl.on:  # per element (TTL-4)
            reads = [self.ttl.read(e) for e in stored]
            keep = [k for _, k in reads if k is not None]
            if keep:
                self.table.entries[key] = keep
            else:
                del self.table.entries[key]
            stored = [p for p, _ in reads if p is not None]
        return None if not stored else [self.ser["element"].deserialize(e) for e in stored]

    def add(self, value: Any) -> None:
        self.add_all([value])

    def add_all(self, values: Iterable[Any]) -> None:
        encoded = self._encode(values)
        if encoded:
            self.table.entries.setdefault(self._key(), []).extend(encoded)

    def update(self, values: Iterable[Any]) -> None:
        encoded = self._encode(values)
        if encoded:
            self.table.entries[self._key()] = encoded
        else:
            self.clear()

    def _fold(self, stored: Any) -> None:
        self.table.entries.setdefault(self._key(), []).extend(stored)


class MapState(_State):
    def _map(self) -> dict[bytes, bytes]:
        return self.table.entries.get(self._key(), {})  # type: ignore[no-any-return]

    def get(self, user_key: Any) -> Any:
        payload = self._read_entry(self._key(), self.ser["user_key"].serialize(user_key))
        return None if payload is None else self.ser["user_value"].deserialize(payload)

    def put(self, user_key: Any, value: Any) -> None:
        self.put_all({user_key: value})

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        if entries:
            target = self.table.entries.setdefault(self._key(), {})
            for k, v in entries.items():
                target[self.ser["user_key"].serialize(k)] = self.ttl.stamp(self.ser["user_value"].serialize(v))

    def remove(self, user_key: Any) -> None:
        self._remove_bytes(self._key(), self.ser["user_key"].serialize(user_key))

    def _remove_bytes(self, key: Key, user_key_bytes: bytes) -> None:
        entries = self.table.entries.get(key)
        if entries is not None:
            entries.pop(user_key_bytes, None)
            if not entries:
                del self.table.entries[key]  # KS-MAP-4

    def _read_entry(self, key: Key, user_key_bytes: bytes) -> bytes | None:
        """Read one entry of `key` now, as TTL-2 has every map read do: refreshed, or cleaned up when expired."""
        entries = self.table.entries.get(key, {})
        stored = entries.get(user_key_bytes)
        if stored is None:
            return None
        payload, keep = self.ttl.read(stored)  # per entry (TTL-4)
        if keep is None:
            self._remove_bytes(key, user_key_bytes)
        else:
            entries[user_key_bytes] = keep
        return payload

    def contains(self, user_key: Any) -> bool:
        return self._read_entry(self._key(), self.ser["user_key"].serialize(user_key)) is not None

    def items(self) -> Iterator[tuple[Any, Any]]:
        """The entries of the current key and namespace as of this call, each read when the iteration reaches it
        (TTL-2: refreshed as returned); one removed meanwhile is skipped."""
        kser, vser = self.ser["user_key"], self.ser["user_value"]
        key, user_keys = self._key(), list(self._map())

        def entries() -> Iterator[tuple[Any, Any]]:
            for user_key_bytes in user_keys:
                payload = self._read_entry(key, user_key_bytes)
                if payload is not None:
                    yield kser.deserialize(user_key_bytes), vser.deserialize(payload)

        return entries()

    def keys(self) -> Iterator[Any]:
        return (k for k, _ in self.items())

    def values(self) -> Iterator[Any]:
        return (v for _, v in self.items())

    def is_empty(self) -> bool:
        return not any(self.ttl.visible(v) for v in self._map().values())

    def iterator(self) -> MapIterator:
        return MapIterator(self)


class MapIterator(Iterator[tuple[Any, Any]]):
    """Over the key and namespace current at its creation, `remove()` included (KS-MAP-2)."""

    def __init__(self, state: MapState) -> None:
        self.state, self.key, self.items = state, state._key(), state.items()
        self.last: tuple[Any, Any] | None = None

    def __next__(self) -> tuple[Any, Any]:
        self.last = last = next(self.items)
        return last

    def remove(self) -> None:
        if self.last is None:
            raise IllegalStateError("remove() before next() or twice for one entry (KS-MAP-5)")
        self.state._remove_bytes(self.key, self.state.ser["user_key"].serialize(self.last[0]))
        self.last = None


KINDS: dict[StateKind, type[_State]] = {
    StateKind.VALUE: ValueState,
    StateKind.LIST: ListState,
    StateKind.MAP: MapState,
    StateKind.REDUCING: ReducingState,
    StateKind.AGGREGATING: AggregatingState,
}


# -- snapshots ---------------------------------------------------------------------------------------------------
def write_canonical(
    factory: CheckpointStreamFactory,
    key_serializer: SerializerSnapshot,
    tables: list[Table],
    key_group_range: KeyGroupRange,
    cancelled: Callable[[], bool],
) -> KeyGroupsStateHandle:
    """IF-2..IF-4: header, then one block per key group; returns the key-groups handle (IF-7)."""
    by_group: dict[int, list[list[Any]]] = {}
    for index, table in enumerate(tables):
        for (group, key, ns), stored in table.entries.items():
            payload = [[k, v] for k, v in stored.items()] if table.kind is StateKind.MAP else stored
            by_group.setdefault(group, []).append([index, key, ns, payload])
    header = {
        "backend": "spec-only",
        "key_serializer": key_serializer.to_plain(),
        "states": [t.header() for t in tables],
    }
    with factory.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        head = msgpack.packb(header, use_bin_type=True)
        out.write(_PREFIX.pack(b"SCKG", 1, len(head)) + head)
        offsets = []
        for group in key_group_range:
            if cancelled():
                raise SnapshotCancelledError("cancelled while writing")  # the stream discards what it wrote
            offsets.append(out.tell())
            block = msgpack.packb(by_group.get(group, []), use_bin_type=True)
            out.write(_LEN.pack(len(block)) + block)
        delegate = out.close_and_get_handle()
    assert delegate is not None
    return KeyGroupsStateHandle(key_group_range, tuple(offsets), delegate, CANONICAL_FORMAT)


class CanonicalStream:
    """Reads one canonical stream; every problem is a CheckpointFormatError naming it (FMT-8)."""

    def __init__(self, handle: KeyGroupsStateHandle) -> None:
        self.handle = handle
        self.name = stream_name(handle.delegate)
        self.file: IO[bytes] = handle.delegate.open()
        magic, version, length = _PREFIX.unpack(self._read(_PREFIX.size))
        if (magic, version) != (b"SCKG", 1):
            raise CheckpointFormatError(self.name, f"not a canonical stream ({magic!r} v{version})")
        try:
            self.header = msgpack.unpackb(self._read(length), raw=False)
            self.tables = [
                Table(
                    s["name"],
                    StateKind(s["kind"]),
                    SerializerSnapshot.from_plain(s["namespace_serializer"]),
                    {r: SerializerSnapshot.from_plain(p) for r, p in s["serializers"].items()},
                    ttl=s["ttl"],
                )
                for s in self.header["states"]
            ]
            if not all(type(t.ttl) is bool for t in self.tables):
                raise TypeError("a state's ttl flag is not a boolean")
            if any(set(t.serializers) != set(ROLES[t.kind]) for t in self.tables):
                raise ValueError("a state's serializer roles are not those of its kind (IF-3)")
            if len({t.name for t in self.tables}) != len(self.tables):
                raise ValueError("two states of one name")
            self.key_serializer = SerializerSnapshot.from_plain(self.header["key_serializer"])
        except (KeyError, TypeError, ValueError, msgpack.UnpackException) as exc:
            raise CheckpointFormatError(self.name, f"malformed header: {exc}") from None

    def _read(self, size: int) -> bytes:
        data = self.file.read(size)
        if len(data) != size:
            raise CheckpointFormatError(self.name, f"truncated: {size} bytes expected, {len(data)} present")
        return bytes(data)

    def block(self, group: int) -> list[Any]:
        self.file.seek(self.handle.offsets[group - self.handle.key_group_range.start])
        (size,) = _LEN.unpack(self._read(_LEN.size))
        try:
            entries = msgpack.unpackb(self._read(size), raw=False)
        except (ValueError, msgpack.UnpackException) as exc:
            raise CheckpointFormatError(self.name, f"corrupt key group {group}: {exc}") from None
        if not isinstance(entries, list) or not all(self._well_formed(e) for e in entries):
            raise CheckpointFormatError(self.name, f"malformed key group {group}")
        return entries

    def _well_formed(self, entry: Any) -> bool:
        """IF-4: `[state index, key bytes, namespace bytes, payload]`, the payload shaped as the state's kind says:
        bytes, a non-empty list of bytes (list), or a non-empty list of `[user key, user value]` bytes pairs (map)."""
        if not (isinstance(entry, list) and len(entry) == 4 and type(entry[0]) is int):
            return False
        index, key, ns, payload = entry
        if not (0 <= index < len(self.tables) and isinstance(key, bytes) and isinstance(ns, bytes)):
            return False
        kind = self.tables[index].kind
        if kind is StateKind.LIST:
            return isinstance(payload, list) and bool(payload) and all(isinstance(e, bytes) for e in payload)
        if kind is StateKind.MAP:
            return (
                isinstance(payload, list)
                and bool(payload)
                and all(isinstance(p, list) and len(p) == 2 and all(isinstance(b, bytes) for b in p) for p in payload)
            )
        return isinstance(payload, bytes)


# -- the keyed backend -------------------------------------------------------------------------------------------
class SpecOnlyKeyedBackend:
    def __init__(self, params: KeyedBackendParameters[Any]) -> None:
        check_max_parallelism(params.max_parallelism)  # KB-1, KG-4
        rng = params.key_group_range
        if not rng.is_empty and not 0 <= rng.start <= rng.end < params.max_parallelism:
            raise ValueError(f"key-group range {rng} is not within max parallelism {params.max_parallelism}")
        self.params = params
        self._key_serializer: TypeSerializer[Any] = params.key_serializer
        self._tables: dict[str, Table] = {}
        self._states: dict[str, _State] = {}
        self._current: tuple[int, bytes] | None = None
        self._current_key: Any = None
        self._tasks: list[SnapshotTask[KeyedStateHandle]] = []
        self._timer_services: dict[str, TimerService] = {}
        self._closed = False
        self._restore(params.restore_state)

    # keys (KB-KEY-1, KB-KEY-2, KG-2)
    @property
    def key_group_range(self) -> KeyGroupRange:
        return self.params.key_group_range

    @property
    def number_of_key_groups(self) -> int:
        return int(self.params.max_parallelism)

    @property
    def key_serializer(self) -> TypeSerializer[Any]:
        return self._key_serializer

    def set_current_key(self, key: Any) -> None:
        self._check_open()
        if key is None:
            raise IllegalStateError("the current key may not be None")
        group = assign_to_key_group(self._key_serializer.key_hash(key), self.params.max_parallelism)
        if group not in self.key_group_range:
            raise IllegalStateError(f"key {key!r} is in key group {group}, outside {self.key_group_range}")
        self._current, self._current_key = (group, self._key_serializer.serialize(key)), key

    def get_current_key(self) -> Any:
        return self._current_key

    @property
    def current_key_group(self) -> int:
        return self._current[0] if self._current else -1

    def current(self) -> tuple[int, bytes]:
        self._check_open()
        if self._current is None:
            raise IllegalStateError("no current key")
        return self._current

    # state registration (KB-STATE-1, KS-2, SER-7)
    def get_or_create_state(self, descriptor: StateDescriptor, namespace_serializer: Any = None) -> Any:
        self._check_open()
        ns = namespace_serializer or VOID
        existing = self._states.get(descriptor.name)
        if existing is not None and existing.table.kind is descriptor.kind and existing.ns == ns:
            return existing
        serializers = serializers_of(descriptor)
        table = self._tables.get(descriptor.name)
        if table is None:
            snapshots = {role: s.snapshot_configuration() for role, s in serializers.items()}
            table = Table(descriptor.name, descriptor.kind, ns.snapshot_configuration(), snapshots)
            table.ttl = descriptor.ttl is not None
            self._tables[descriptor.name] = table
        else:
            if table.kind is not descriptor.kind:
                raise StateMigrationError(
                    f"state {descriptor.name!r} is {table.kind.value}, not {descriptor.kind.value}"
                )
            if table.ttl is not (descriptor.ttl is not None):  # TTL-5: only the duration may change
                raise StateMigrationError(f"state {descriptor.name!r}: TTL cannot be switched on or off on restore")
            if ns.resolve_compatibility(table.namespace).kind is not Compatibility.COMPATIBLE_AS_IS:
                raise StateMigrationError(f"state {descriptor.name!r}: the namespace serializer changed")
            old: dict[str, TypeSerializer[Any]] = {}
            for role, serializer in serializers.items():
                what = f"state {descriptor.name!r}: the new {role} serializer"
                serializers[role], migrates = resolve(what, serializer, table.serializers[role])
                if migrates:
                    old[role] = restore_serializer(table.serializers[role])  # SER-4: the one that wrote the bytes
            table.validate({**serializers, **old}, ns)
            migrate(table, old, serializers)
            table.serializers = {role: s.snapshot_configuration() for role, s in serializers.items()}
        state = KINDS[descriptor.kind](self, table, descriptor, ns, serializers)
        self._states[descriptor.name] = state
        return state

    def get_partitioned_state(
        self, namespace: Any, descriptor: StateDescriptor, namespace_serializer: Any = None
    ) -> Any:
        state = self.get_or_create_state(descriptor, namespace_serializer)
        state.set_current_namespace(namespace)
        return state

    def _namespace_serializer(self, name: str) -> Any:
        if name in self._states:
            return self._states[name].ns
        return restore_serializer(self._tables[name].namespace)  # restored, not registered again (KB-KEYS-1)

    def get_keys(self, state_name: str, namespace: Any) -> Iterator[Any]:
        self._check_open()
        ns = self._namespace_serializer(state_name).serialize(namespace)
        keys = [k for (_, k, n) in self._tables[state_name].entries if n == ns] if state_name in self._tables else []
        return (self._key_serializer.deserialize(k) for k in keys)

    def get_keys_and_namespaces(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        self._check_open()
        if state_name not in self._tables:
            return iter(())
        ns = self._namespace_serializer(state_name)
        pairs = list(self._tables[state_name].entries)
        return ((self._key_serializer.deserialize(k), ns.deserialize(n)) for (_, k, n) in pairs)

    def num_state_entries(self, state_name: str | None = None) -> int:
        tables = (
            [self._tables[state_name]] if state_name in self._tables else [] if state_name else self._tables.values()
        )
        return sum(len(t.entries) for t in tables)

    # timers (TM-1, TM-9): each service keeps its timers in this backend's map states (IF-8)
    def get_timer_service(
        self, name: str, namespace_serializer: TypeSerializer[Any], triggerable: Triggerable[Any, Any]
    ) -> TimerService:
        self._check_open()
        service = self._timer_services.get(name)
        if service is None:
            service = self._timer_services[name] = TimerService(self, name, namespace_serializer, triggerable)
        service.triggerable = triggerable  # asked again: the same timers, the caller's callbacks
        return service

    # snapshots (KB-SNAP-1..7)
    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: CheckpointStreamFactory,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> SnapshotTask[KeyedStateHandle]:
        self._check_open()
        tables = [copy.deepcopy(t) for _, t in sorted(self._tables.items()) if t.entries]  # the synchronous part
        key_serializer, key_group_range = self._key_serializer.snapshot_configuration(), self.key_group_range

        def write(cancelled: Callable[[], bool]) -> KeyedStateHandle | None:
            if not tables:
                return None
            return write_canonical(stream_factory, key_serializer, tables, key_group_range, cancelled)

        task: SnapshotTask[KeyedStateHandle] = SnapshotTask(write)
        self._tasks = [t for t in self._tasks if not t.done] + [task]
        return task

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Nothing to release: every snapshot is self-contained."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Nothing to release."""

    # restore (KB-RESTORE-1..5, SER-6)
    def _restore(self, handles: Sequence[KeyedStateHandle]) -> None:
        for handle in handles:
            if not isinstance(handle, KeyGroupsStateHandle) or handle.snapshot_format != CANONICAL_FORMAT:
                fmt = getattr(handle, "snapshot_format", type(handle).__name__)
                raise UnsupportedSnapshotError(f"cannot restore {fmt!r} handles; use a canonical savepoint")
            own = handle.key_group_range.intersection(self.key_group_range)
            if own.is_empty:
                continue
            stream = CanonicalStream(handle)
            try:
                key_serializer = self._key_serializer
                self._key_serializer, migrates = resolve("the key serializer", key_serializer, stream.key_serializer)
                if migrates:  # SER-6: keys are hashed into key groups, so they may be reconfigured, never migrated
                    raise StateMigrationError("the key serializer needs migration, which restore cannot do")
                tables = [self._tables.setdefault(t.name, t) for t in stream.tables]
                for table in tables:
                    table.source = table.source or stream.name
                for group in own:
                    for index, key, ns, payload in stream.block(group):
                        self._check_key(stream.name, group, key)
                        table = tables[index]
                        if (group, key, ns) in table.entries:  # FMT-15: one would overwrite the other
                            raise CheckpointFormatError(
                                stream.name, f"key group {group}: state {table.name!r} holds a key and namespace twice"
                            )
                        if table.kind is StateKind.MAP:
                            pairs, payload = payload, {k: v for k, v in payload}
                            if len(payload) != len(pairs):
                                raise CheckpointFormatError(
                                    stream.name, f"key group {group}: state {table.name!r} holds a user key twice"
                                )
                        table.entries[(group, key, ns)] = payload
            finally:
                stream.file.close()

    def _check_key(self, source: str, group: int, key: bytes) -> None:
        """A restored key decodes and hashes into the key group whose block holds it (FMT-15): one elsewhere would
        never be found."""
        try:
            decoded = self._key_serializer.deserialize(key)
            home = assign_to_key_group(self._key_serializer.key_hash(decoded), self.params.max_parallelism)
        except (ValueError, TypeError, LookupError, ArithmeticError, struct.error) as exc:
            raise CheckpointFormatError(source, f"key group {group}: a key cannot be read ({exc!r})") from None
        if home != group:
            raise CheckpointFormatError(source, f"key group {group} holds a key of key group {home}")
        if self._key_serializer.serialize(decoded) != key:  # set_current_key would never find it (FMT-15)
            raise CheckpointFormatError(source, f"key group {group} holds a key not in its serializer's encoding")

    # lifecycle (KB-LIFE-1, KB-LIFE-2)
    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosedError("the backend is closed")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for task in self._tasks:
                task.cancel()
            self._tables.clear()
            self._states.clear()
            self._timer_services.clear()

    def dispose(self) -> None:
        self.close()

    def __enter__(self) -> SpecOnlyKeyedBackend:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class SpecOnlyStateBackend:
    name = "spec-only"
    capabilities = BackendCapabilities(
        async_snapshots=True,
        incremental_checkpoints=False,
        canonical_savepoints=True,
        native_savepoint_format=None,
        rescaling=True,
        operator_state=True,
        ttl=True,
        schema_evolution=True,
        timers=True,
    )

    def create_keyed_state_backend(self, params: KeyedBackendParameters[Any]) -> SpecOnlyKeyedBackend:
        return SpecOnlyKeyedBackend(params)

    def create_operator_state_backend(self, params: OperatorBackendParameters) -> SpecOnlyOperatorBackend:
        return SpecOnlyOperatorBackend(params)


def factory(config: Mapping[str, object]) -> SpecOnlyStateBackend:
    return SpecOnlyStateBackend()
