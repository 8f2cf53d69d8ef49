"""What every reference keyed backend shares (chapter KB): current key, state registration with compatibility
checks and migration, key iteration, canonical restore, lifecycle. Subclasses supply the StateStore of a state
(`create_store`), the snapshot strategy (`snapshot`, using `snapshot_task`), and any native restore path
(`restore_foreign_handles`); they call `restore_handles(params.restore_state)` at the end of `__init__`. Backend
authors import it from `statecert.reference.authoring`."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Any, TypeVar

from statecert.reference.format.canonical import CanonicalReader
from statecert.reference.format.entry_check import EntryValidator
from statecert.reference.format.state_meta import SERIALIZER_ROLES, StateMetaInfo
from statecert.reference.heap.ttl import TtlPolicy
from statecert.reference.keyed_states import (
    AggregatingStateImpl,
    KvState,
    ListStateImpl,
    MapStateImpl,
    ReducingStateImpl,
    ValueStateImpl,
)
from statecert.reference.migration import check_key_serializer, check_registered_serializers, resolve_state_serializers
from statecert.reference.serializers import DEFAULT_VALUE_SERIALIZER, VOID_NAMESPACE_SERIALIZER, restore_serializer
from statecert.reference.snapshot_task import AsyncSnapshotTask
from statecert.reference.storage.written_streams import WrittenStreams
from statecert.reference.timers.timer_service import KeyedTimerService
from statecert.spec.errors import (
    BackendClosedError,
    CheckpointFormatError,
    IllegalStateError,
    StateMigrationError,
    UnsupportedSnapshotError,
)
from statecert.spec.handles import CANONICAL_FORMAT, KeyedStateHandle, KeyGroupsStateHandle
from statecert.spec.keyed_backend import KeyedBackendParameters
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
from statecert.spec.timers import Triggerable

_Backend = TypeVar("_Backend", bound="KeyedStateBackendBase")
RENAMED_HOOKS = {
    "_create_store": "create_store",
    "_restore_other": "restore_foreign_handles",
    "_release": "release_resources",
}
"""Hooks a subclass overrides, by their names before 0.1.0's public authoring kit: still called, with a
DeprecationWarning, until 0.4.0."""
RENAMED_HELPERS = {"_restore": "restore_handles", "_check_open": "check_open", "_track": "track_snapshot"}
"""Helpers a subclass calls, by their names before 0.1.0's public authoring kit: still there (deprecated methods
below), with a DeprecationWarning, until 0.4.0."""
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


class KeyedStateBackendBase:
    """Keyed state of one subtask over per-state stores."""

    backend_name = "abstract"
    canonical_reader: type[CanonicalReader] = CanonicalReader
    entry_validator: type[EntryValidator] = EntryValidator
    """How restore reads a canonical stream and checks its entries (FMT-15); replaceable for fault-injection tests."""

    def __init__(self, params: KeyedBackendParameters[Any]) -> None:
        check_max_parallelism(params.max_parallelism)
        if not params.key_group_range.is_empty and params.key_group_range.end >= params.max_parallelism:
            raise ValueError(
                f"key-group range {params.key_group_range} exceeds max parallelism {params.max_parallelism}"
            )
        self._params = params
        self._key_serializer: TypeSerializer[Any] = params.key_serializer
        self._clock = params.ttl_clock
        self._stores: dict[str, Any] = {}
        self._states: dict[str, KvState] = {}
        self._namespace_serializers: dict[str, TypeSerializer[Any]] = {}
        self._current_key: Any = None
        self._current_key_bytes: bytes | None = None
        self._current_key_group = -1
        self._key_caches: dict[type, dict[Any, tuple[bytes, int]]] = {t: {} for t in _CACHEABLE_KEY_TYPES}
        self._pending: set[AsyncSnapshotTask[KeyedStateHandle]] = set()
        self._timer_services: dict[str, KeyedTimerService] = {}
        self.timer_service_class = KeyedTimerService
        self._closed = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass overriding a hook by its old name gets it called under the new one, with a warning."""
        super().__init_subclass__(**kwargs)
        for old, new in RENAMED_HOOKS.items():
            if old in cls.__dict__ and new not in cls.__dict__:
                warnings.warn(
                    f"{cls.__qualname__}.{old} is deprecated: rename it to {new} (statecert.reference.authoring); "
                    "the old name stops being called in statecert 0.4.0",
                    DeprecationWarning,
                    stacklevel=2,
                )
                setattr(cls, new, cls.__dict__[old])

    def _renamed(self, old: str) -> None:
        new = RENAMED_HELPERS[old]
        warnings.warn(
            f"{type(self).__name__}.{old} is deprecated: call {new} (statecert.reference.authoring); the old name "
            "goes in statecert 0.4.0",
            DeprecationWarning,
            stacklevel=3,
        )

    def _restore(self, handles: Sequence[Any]) -> None:
        """Deprecated: `restore_handles`."""
        self._renamed("_restore")
        self.restore_handles(handles)

    def _check_open(self) -> None:
        """Deprecated: `check_open`."""
        self._renamed("_check_open")
        self.check_open()

    def _track(self, task: AsyncSnapshotTask[KeyedStateHandle]) -> AsyncSnapshotTask[KeyedStateHandle]:
        """Deprecated: `track_snapshot`."""
        self._renamed("_track")
        return self.track_snapshot(task)

    # -- hooks ---------------------------------------------------------------------------------------------------
    def create_store(self, meta: StateMetaInfo) -> Any:
        """A new, empty StateStore for a state (with a mutable `meta` attribute)."""
        raise NotImplementedError

    def prepare_stores(self, metas: Sequence[StateMetaInfo]) -> None:
        """Called by a restore before it creates the stores of `metas` (the states of a canonical stream that this
        backend holds no store of yet, already validated), so that a backend can create them together, as a
        RocksDB backend opens its column families in one go; nothing by default."""

    def restore_foreign_handles(self, handles: Sequence[Any]) -> None:
        """Restore handles that are not canonical; the default accepts none (KB-RESTORE-5)."""
        if handles:
            fmt = getattr(handles[0], "snapshot_format", type(handles[0]).__name__)
            raise UnsupportedSnapshotError(
                f"the {self.backend_name} backend cannot restore a {fmt!r} state handle: it restores canonical "
                "snapshots and its own native format only (convert with a canonical savepoint)"
            )

    def release_resources(self) -> None:
        """Free the backend's resources on close."""

    # -- keys ----------------------------------------------------------------------------------------------------
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
        if self._closed:
            self.check_open()
        # Streams revisit the same keys: remember bytes and key group of recent str/int/bytes keys, one cache per
        # exact type, so that 1 and True, equal in a dict, never share an entry.
        cache = self._key_caches.get(type(key))
        cached = None if cache is None else cache.get(key)
        if cached is None:
            if key is None:
                raise IllegalStateError("the current key may not be None (KB-KEY-1)")
            key_group = self.key_group_of(key)
            if key_group not in self.key_group_range:
                raise IllegalStateError(
                    f"key {key!r} belongs to key group {key_group}, outside this backend's range {self.key_group_range}"
                )
            cached = (self._key_serializer.serialize(key), key_group)
            if cache is not None:
                if len(cache) >= _KEY_CACHE_SIZE:
                    cache.clear()
                cache[key] = cached
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

    # -- state registration ----------------------------------------------------------------------------------------
    def get_or_create_state(
        self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer[Any] | None = None
    ) -> Any:
        self.check_open()
        ns_serializer = namespace_serializer or VOID_NAMESPACE_SERIALIZER
        existing = self._states.get(descriptor.name)
        if (
            existing is not None
            and existing.store.meta.kind is descriptor.kind
            and existing.namespace_serializer == ns_serializer
        ):
            return existing
        serializers = descriptor_serializers(descriptor)
        store = self._stores.get(descriptor.name)
        if store is None:
            meta = StateMetaInfo(
                descriptor.name,
                descriptor.kind,
                ns_serializer.snapshot_configuration(),
                {role: s.snapshot_configuration() for role, s in serializers.items()},
                descriptor.ttl is not None,
            )
            store = self._stores[descriptor.name] = self.create_store(meta)
        else:
            serializers = resolve_state_serializers(store, descriptor, serializers, ns_serializer)
        state = self._create_state(descriptor, store, ns_serializer, serializers)
        self._states[descriptor.name] = state
        self._namespace_serializers[descriptor.name] = ns_serializer
        return state

    def _create_state(
        self,
        descriptor: StateDescriptor,
        store: Any,
        ns_serializer: TypeSerializer[Any],
        serializers: Mapping[str, TypeSerializer[Any]],
    ) -> KvState:
        args = (self, store, descriptor.name, ns_serializer, serializers, TtlPolicy(descriptor.ttl, self._clock))
        d: Any = descriptor
        if descriptor.kind is StateKind.VALUE:
            return ValueStateImpl(*args, default=d.default)
        if descriptor.kind is StateKind.LIST:
            return ListStateImpl(*args)
        if descriptor.kind is StateKind.MAP:
            return MapStateImpl(*args)
        if descriptor.kind is StateKind.REDUCING:
            if d.reduce_function is None:
                raise ValueError(f"reducing state {descriptor.name!r} needs a reduce_function")
            return ReducingStateImpl(*args, reduce_function=d.reduce_function)
        if d.aggregate_function is None:
            raise ValueError(f"aggregating state {descriptor.name!r} needs an aggregate_function")
        return AggregatingStateImpl(*args, aggregate_function=d.aggregate_function)

    def get_partitioned_state(
        self, namespace: Any, descriptor: StateDescriptor, namespace_serializer: TypeSerializer[Any] | None = None
    ) -> Any:
        state = self.get_or_create_state(descriptor, namespace_serializer)
        state.set_current_namespace(namespace)
        return state

    def _namespace_serializer(self, state_name: str) -> TypeSerializer[Any]:
        if state_name in self._namespace_serializers:
            return self._namespace_serializers[state_name]
        if state_name in self._stores:
            return restore_serializer(self._stores[state_name].meta.namespace_serializer)
        raise KeyError(f"no state named {state_name!r} in this backend")

    def get_keys(self, state_name: str, namespace: Any) -> Iterator[Any]:
        self.check_open()
        ns_bytes = self._namespace_serializer(state_name).serialize(namespace)
        keys = [k for _, k, n, _ in self._stores[state_name].entries() if n == ns_bytes]
        return (self._key_serializer.deserialize(k) for k in keys)

    def get_keys_and_namespaces(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        self.check_open()
        ns_ser = self._namespace_serializer(state_name)
        pairs = [(k, n) for _, k, n, _ in self._stores[state_name].entries()]
        return ((self._key_serializer.deserialize(k), ns_ser.deserialize(n)) for k, n in pairs)

    def num_state_entries(self, state_name: str | None = None) -> int:
        if state_name is not None:
            return len(self._stores[state_name]) if state_name in self._stores else 0
        return sum(len(s) for s in self._stores.values())

    @property
    def registered_state_names(self) -> set[str]:
        return set(self._stores)

    # -- timers ----------------------------------------------------------------------------------------------------
    def get_timer_service(
        self, name: str, namespace_serializer: TypeSerializer[Any], triggerable: Triggerable[Any, Any]
    ) -> KeyedTimerService:
        """The timer service `name`, kept in this backend's own stores (TM-1, TM-9); asked again, the same service
        with `triggerable` as its new target (Flink's `startTimerService` keeps the first; TM-9 allows either)."""
        self.check_open()
        service = self._timer_services.get(name)
        if service is None:
            service = self._timer_services[name] = self.timer_service_class(
                self, name, namespace_serializer, triggerable
            )
        elif service.namespace_serializer != namespace_serializer:
            raise StateMigrationError(f"timer service {name!r} was created with another namespace serializer")
        service.triggerable = triggerable
        return service

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Nothing to release by default."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Nothing to release by default."""

    # -- restore ---------------------------------------------------------------------------------------------------
    def restore_handles(self, handles: Sequence[Any]) -> None:
        """Canonical handles are read key group by key group (KB-RESTORE-1..3); the rest go to
        `restore_foreign_handles`."""

        def is_canonical(handle: Any) -> bool:
            return isinstance(handle, KeyGroupsStateHandle) and handle.snapshot_format == CANONICAL_FORMAT

        canonical = [h for h in handles if is_canonical(h)]
        self.restore_foreign_handles([h for h in handles if not is_canonical(h)])
        for handle in canonical:
            if not handle.key_group_range.intersection(self.key_group_range).is_empty:
                self.restore_canonical_handle(handle)

    def restore_canonical_handle(self, handle: KeyGroupsStateHandle) -> None:
        """Put the entries of one canonical stream's key groups inside this backend's range into the stores, each
        validated first (FMT-15); a native format made of canonical blocks restores through it too."""
        with self.canonical_reader(handle) as reader:
            self._key_serializer = check_key_serializer(self._key_serializer, reader.header.key_serializer)
            for meta in reader.header.states:
                self._check_restored_meta(meta, reader.name)
            self.prepare_stores([m for m in reader.header.states if m.name not in self._stores])
            stores = [self._restored_store(meta, reader.name) for meta in reader.header.states]
            validator = self.entry_validator(
                reader.header.states, self._key_serializer, self._params.max_parallelism, reader.name
            )
            for key_group, entries in reader.entries(self.key_group_range):
                for index, key, ns, payload in entries:
                    validator.check(key_group, index, key, ns, payload)
                    stores[index].put_payload(key_group, (key, ns), payload)

    def _check_restored_meta(self, meta: StateMetaInfo, source: str) -> None:
        store = self._stores.get(meta.name)
        if store is None and set(meta.serializers) != set(SERIALIZER_ROLES[meta.kind]):
            raise CheckpointFormatError(source, f"state {meta.name!r}: serializer roles do not match {meta.kind.value}")
        if store is None:
            check_registered_serializers(meta, source)
        if store is not None and store.meta != meta:
            raise StateMigrationError(f"{source}: state {meta.name!r} is described differently by two handles")

    def _restored_store(self, meta: StateMetaInfo, source: str) -> Any:
        self._check_restored_meta(meta, source)
        store = self._stores.get(meta.name)
        if store is None:
            store = self._stores[meta.name] = self.create_store(meta)
        return store

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def check_open(self) -> None:
        if self._closed:
            raise BackendClosedError(f"the {self.backend_name} keyed state backend is closed (KB-LIFE-2)")

    @property
    def stores(self) -> Mapping[str, Any]:
        """The StateStore of every registered or restored state, by name (read-only view)."""
        return MappingProxyType(self._stores)

    def snapshot_task(
        self, write: Callable[[Callable[[], bool]], KeyedStateHandle | None], written: WrittenStreams | None = None
    ) -> AsyncSnapshotTask[KeyedStateHandle]:
        """The asynchronous part of a snapshot as a task that `close()` cancels (KB-SNAP-6): `write(cancelled)`
        writes the snapshot, checking `cancelled()` between units of work. Streams written through `written` (a
        `WrittenStreams` over the snapshot's factory) are deleted if the part fails or is cancelled, even once
        written."""
        return self.track_snapshot(
            AsyncSnapshotTask(write, self._pending.discard, written.discard if written else None)
        )

    def track_snapshot(self, task: AsyncSnapshotTask[KeyedStateHandle]) -> AsyncSnapshotTask[KeyedStateHandle]:
        self._pending.add(task)
        return task

    def close(self) -> None:
        """Cancel running snapshots and drop all state (KB-LIFE-1, KB-SNAP-6)."""
        if self._closed:
            return
        self._closed = True
        for task in list(self._pending):
            task.cancel()
        self._states.clear()
        self._stores.clear()
        self._timer_services.clear()
        self.release_resources()

    def dispose(self) -> None:
        self.close()

    def __enter__(self: _Backend) -> _Backend:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
