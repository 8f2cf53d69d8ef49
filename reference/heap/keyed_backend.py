"""The heap keyed state backend (chapter KB): serialized state in per-key-group dicts, canonical snapshots."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any

from statecert.reference.format.canonical import CanonicalHeader, CanonicalReader, Entry, write_key_groups
from statecert.reference.format.state_meta import SERIALIZER_ROLES, StateMetaInfo
from statecert.reference.heap.migration import check_key_serializer, resolve_state_serializers
from statecert.reference.heap.state_table import Cell, StateTable
from statecert.reference.heap.states import (
    HeapAggregatingState,
    HeapListState,
    HeapMapState,
    HeapReducingState,
    HeapState,
    HeapValueState,
)
from statecert.reference.heap.ttl import TtlPolicy
from statecert.reference.serializers import (
    DEFAULT_VALUE_SERIALIZER,
    VOID_NAMESPACE_SERIALIZER,
    restore_serializer,
)
from statecert.reference.snapshot_task import AsyncSnapshotTask
from statecert.spec.errors import (
    BackendClosedError,
    CheckpointFormatError,
    IllegalStateError,
    StateMigrationError,
    UnsupportedSnapshotError,
)
from statecert.spec.handles import CANONICAL_FORMAT, KeyedStateHandle, KeyGroupsStateHandle
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, CheckpointOptions, KeyedBackendParameters
from statecert.spec.keygroups import KeyGroupRange, assign_to_key_group, check_max_parallelism
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from statecert.spec.storage import CheckpointedStateScope, CheckpointStreamFactory

_CACHEABLE_KEY_TYPES = (str, int, bytes)
_KEY_CACHE_SIZE = 65536


def descriptor_serializers(descriptor: StateDescriptor) -> dict[str, TypeSerializer[Any]]:
    """The serializers of a descriptor by role (see StateMetaInfo); msgpack where the descriptor names none."""
    d: Any = descriptor
    if isinstance(d, ValueStateDescriptor | ReducingStateDescriptor):
        return {"value": d.serializer or DEFAULT_VALUE_SERIALIZER}
    if isinstance(d, AggregatingStateDescriptor):
        return {"value": d.accumulator_serializer or DEFAULT_VALUE_SERIALIZER}
    if isinstance(d, ListStateDescriptor):
        return {"element": d.element_serializer or DEFAULT_VALUE_SERIALIZER}
    if isinstance(d, MapStateDescriptor):
        return {
            "user_key": d.user_key_serializer or DEFAULT_VALUE_SERIALIZER,
            "user_value": d.user_value_serializer or DEFAULT_VALUE_SERIALIZER,
        }
    raise TypeError(f"unknown state descriptor {type(descriptor).__name__}")


class HeapKeyedStateBackend:
    """Keyed state of one subtask; see the module docstring of `state_table` for snapshot isolation."""

    backend_name = "hashmap"

    def __init__(self, params: KeyedBackendParameters[Any]) -> None:
        check_max_parallelism(params.max_parallelism)
        if not params.key_group_range.is_empty and params.key_group_range.end >= params.max_parallelism:
            raise ValueError(
                f"key-group range {params.key_group_range} exceeds max parallelism {params.max_parallelism}"
            )
        self._params = params
        self._key_serializer: TypeSerializer[Any] = params.key_serializer
        self._clock = params.ttl_clock
        self._tables: dict[str, StateTable] = {}
        self._states: dict[str, HeapState] = {}
        self._namespace_serializers: dict[str, TypeSerializer[Any]] = {}
        self._current_key: Any = None
        self._current_key_bytes: bytes | None = None
        self._current_key_group = -1
        self._key_cache: dict[tuple[type, Any], tuple[bytes, int]] = {}
        self._pending: set[AsyncSnapshotTask[KeyedStateHandle]] = set()
        self._closed = False
        self._restore(params.restore_state)

    # -- keys --------------------------------------------------------------------------------------------------
    @property
    def key_group_range(self) -> KeyGroupRange:
        return self._params.key_group_range

    @property
    def number_of_key_groups(self) -> int:
        return self._params.max_parallelism

    @property
    def key_serializer(self) -> TypeSerializer[Any]:
        return self._key_serializer

    def key_group_of(self, key: Any) -> int:
        return assign_to_key_group(self._key_serializer.key_hash(key), self._params.max_parallelism)

    def set_current_key(self, key: Any) -> None:
        self._check_open()
        if key is None:
            raise IllegalStateError("the current key may not be None (KB-KEY-1)")
        # Streams revisit the same keys: remember bytes and key group of recent str/int/bytes keys (exact type,
        # so that 1 and True, equal in a dict, never share an entry).
        cacheable = type(key) in _CACHEABLE_KEY_TYPES
        cached = self._key_cache.get((type(key), key)) if cacheable else None
        if cached is None:
            key_group = self.key_group_of(key)
            if key_group not in self.key_group_range:
                raise IllegalStateError(
                    f"key {key!r} belongs to key group {key_group}, outside this backend's range {self.key_group_range}"
                )
            cached = (self._key_serializer.serialize(key), key_group)
            if cacheable:
                if len(self._key_cache) >= _KEY_CACHE_SIZE:
                    self._key_cache.clear()
                self._key_cache[(type(key), key)] = cached
        self._current_key = key
        self._current_key_bytes, self._current_key_group = cached

    def get_current_key(self) -> Any:
        return self._current_key

    @property
    def current_key_group(self) -> int:
        return self._current_key_group

    def current_key_bytes_and_group(self) -> tuple[bytes, int]:
        if self._closed:
            raise BackendClosedError("state accessed after the backend was closed (KB-LIFE-2)")
        if self._current_key_bytes is None:
            raise IllegalStateError("no current key: call set_current_key() before accessing keyed state")
        return self._current_key_bytes, self._current_key_group

    # -- state registration ------------------------------------------------------------------------------------
    def get_or_create_state(
        self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer[Any] | None = None
    ) -> Any:
        self._check_open()
        ns_serializer = namespace_serializer or VOID_NAMESPACE_SERIALIZER
        existing = self._states.get(descriptor.name)
        if (
            existing is not None
            and existing.table.meta.kind is descriptor.kind
            and existing.namespace_serializer == ns_serializer
        ):
            return existing
        serializers = descriptor_serializers(descriptor)
        table = self._tables.get(descriptor.name)
        if table is None:
            meta = StateMetaInfo(
                descriptor.name,
                descriptor.kind,
                ns_serializer.snapshot_configuration(),
                {role: s.snapshot_configuration() for role, s in serializers.items()},
                descriptor.ttl is not None,
            )
            table = self._tables[descriptor.name] = StateTable(meta, self.key_group_range)
        else:
            serializers, ns_serializer = resolve_state_serializers(table, descriptor, serializers, ns_serializer)
        state = self._create_state(descriptor, table, ns_serializer, serializers)
        self._states[descriptor.name] = state
        self._namespace_serializers[descriptor.name] = ns_serializer
        return state

    def _create_state(
        self,
        descriptor: StateDescriptor,
        table: StateTable,
        ns_serializer: TypeSerializer[Any],
        serializers: Mapping[str, TypeSerializer[Any]],
    ) -> HeapState:
        args = (self, table, ns_serializer, serializers, TtlPolicy(descriptor.ttl, self._clock))
        d: Any = descriptor
        if descriptor.kind is StateKind.VALUE:
            return HeapValueState(*args, default=d.default)
        if descriptor.kind is StateKind.LIST:
            return HeapListState(*args)
        if descriptor.kind is StateKind.MAP:
            return HeapMapState(*args)
        if descriptor.kind is StateKind.REDUCING:
            if d.reduce_function is None:
                raise ValueError(f"reducing state {descriptor.name!r} needs a reduce_function")
            return HeapReducingState(*args, reduce_function=d.reduce_function)
        if d.aggregate_function is None:
            raise ValueError(f"aggregating state {descriptor.name!r} needs an aggregate_function")
        return HeapAggregatingState(*args, aggregate_function=d.aggregate_function)

    def get_partitioned_state(
        self,
        namespace: Any,
        descriptor: StateDescriptor,
        namespace_serializer: TypeSerializer[Any] | None = None,
    ) -> Any:
        state = self.get_or_create_state(descriptor, namespace_serializer)
        state.set_current_namespace(namespace)
        return state

    def _namespace_serializer(self, state_name: str) -> TypeSerializer[Any]:
        if state_name in self._namespace_serializers:
            return self._namespace_serializers[state_name]
        if state_name in self._tables:
            return restore_serializer(self._tables[state_name].meta.namespace_serializer)
        raise KeyError(f"no state named {state_name!r} in this backend")

    def get_keys(self, state_name: str, namespace: Any) -> Iterator[Any]:
        self._check_open()
        ns_bytes = self._namespace_serializer(state_name).serialize(namespace)
        table = self._tables[state_name]
        keys = [k for _, entries in table.key_groups() for (k, n) in list(entries) if n == ns_bytes]
        return (self._key_serializer.deserialize(k) for k in keys)

    def get_keys_and_namespaces(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        self._check_open()
        ns_ser = self._namespace_serializer(state_name)
        pairs = [kn for _, entries in self._tables[state_name].key_groups() for kn in list(entries)]
        return ((self._key_serializer.deserialize(k), ns_ser.deserialize(n)) for k, n in pairs)

    def num_state_entries(self, state_name: str | None = None) -> int:
        if state_name is not None:
            return len(self._tables[state_name]) if state_name in self._tables else 0
        return sum(len(t) for t in self._tables.values())

    @property
    def registered_state_names(self) -> set[str]:
        return set(self._tables)

    # -- snapshots ---------------------------------------------------------------------------------------------
    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: CheckpointStreamFactory,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> AsyncSnapshotTask[KeyedStateHandle]:
        """Synchronous part: capture every table's key-group dicts (copy-on-write from here on) (KB-SNAP-2)."""
        self._check_open()
        names = sorted(n for n, t in self._tables.items() if len(t))
        metas = tuple(self._tables[n].meta for n in names)
        captured = [self._tables[n].capture() for n in names]
        header = CanonicalHeader(self.backend_name, self._key_serializer.snapshot_configuration(), metas)
        key_group_range = self.key_group_range
        start = key_group_range.start

        def blocks(key_group: int) -> list[Entry]:
            out: list[Entry] = []
            for index, maps in enumerate(captured):
                for (key, ns), stored in maps[key_group - start].items():
                    out.append([index, key, ns, _payload(stored)])
            return out

        def write(cancelled: Callable[[], bool]) -> KeyedStateHandle | None:
            if not captured:
                return None  # an empty backend snapshots to nothing (KB-SNAP-7)
            with stream_factory.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
                offsets = write_key_groups(out, header, key_group_range, blocks, cancelled)
                if cancelled():
                    out.discard()
                    return None
                delegate = out.close_and_get_handle()
            assert delegate is not None
            return KeyGroupsStateHandle(key_group_range, offsets, delegate, CANONICAL_FORMAT)

        task: AsyncSnapshotTask[KeyedStateHandle] = AsyncSnapshotTask(write, self._pending.discard)
        self._pending.add(task)
        return task

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """The heap backend keeps nothing per checkpoint, so there is nothing to release."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """As for completion: no per-checkpoint resources."""

    # -- restore -----------------------------------------------------------------------------------------------
    def _restore(self, handles: Any) -> None:
        """Read the key groups of each handle that fall in this backend's range (KB-RESTORE-1..3)."""
        for handle in handles:
            if not isinstance(handle, KeyGroupsStateHandle) or handle.snapshot_format != CANONICAL_FORMAT:
                fmt = getattr(handle, "snapshot_format", type(handle).__name__)
                raise UnsupportedSnapshotError(
                    f"the {self.backend_name} backend restores canonical snapshots only; got a {fmt!r} state handle "
                    "(a native savepoint of another backend type must be converted to a canonical savepoint)"
                )
            if handle.key_group_range.intersection(self.key_group_range).is_empty:
                continue
            with CanonicalReader(handle) as reader:
                self._key_serializer = check_key_serializer(self._key_serializer, reader.header.key_serializer)
                tables = [self._restored_table(meta, reader.name) for meta in reader.header.states]
                for key_group, entries in reader.entries(self.key_group_range):
                    for index, key, ns, payload in entries:
                        tables[index].write_map(key_group)[(key, ns)] = _stored(tables[index].meta.kind, payload)

    def _restored_table(self, meta: StateMetaInfo, source: str) -> StateTable:
        table = self._tables.get(meta.name)
        if table is None:
            if set(meta.serializers) != set(SERIALIZER_ROLES[meta.kind]):
                raise CheckpointFormatError(
                    source, f"state {meta.name!r}: serializer roles do not match {meta.kind.value}"
                )
            table = self._tables[meta.name] = StateTable(meta, self.key_group_range)
        elif table.meta != meta:
            raise StateMigrationError(f"{source}: state {meta.name!r} is described differently by two restored handles")
        return table

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosedError("the keyed state backend is closed (KB-LIFE-2)")

    def close(self) -> None:
        """Cancel running snapshots and drop all state (KB-LIFE-1, KB-SNAP-6)."""
        if self._closed:
            return
        self._closed = True
        for task in list(self._pending):
            task.cancel()
        self._tables.clear()
        self._states.clear()

    def dispose(self) -> None:
        self.close()

    def __enter__(self) -> HeapKeyedStateBackend:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _payload(stored: Any) -> Any:
    """Stored form -> canonical payload."""
    if isinstance(stored, Cell):
        data = stored.data
        return [[k, v] for k, v in data.items()] if isinstance(data, dict) else list(data)
    return stored


def _stored(kind: StateKind, payload: Any) -> Any:
    """Canonical payload -> stored form."""
    if kind is StateKind.LIST:
        return Cell(0, list(payload))
    if kind is StateKind.MAP:
        return Cell(0, {k: v for k, v in payload})
    return payload
