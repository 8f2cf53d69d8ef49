"""A correct backend that takes, wherever the spec leaves a choice open, the side the reference does not: the suite
must certify it, as it is and wrapped in the changelog backend. Each choice is one a backend faithful to Flink may
make, and each test that assumed the reference's side would reject a correct backend.

`every_open_choice` is the heap backend with:
- reducing state that ignores `add(None)` (KS-RED-2), as Flink's `AppendingState.add` documents;
- map state whose `is_empty()` answers from the stored entries, expired or not (TTL-3), as Flink's
  `TtlMapState.isEmpty()` does;
- map state that iterates its entries newest first (KS-MAP-2 fixes no order);
- merges that put the sources before the target: a list's elements, and `reduce(sources, target)` or
  `merge(sources, target)` as Flink's RocksDB backend does where its heap backend reduces the other way (KS-MERGE-1
  fixes no order);
- key iteration (`get_keys`, `get_keys_and_namespaces`) in reverse (KB-KEYS-1 fixes no order), and nothing for a
  name no state has, as Flink's backends, where the reference raises `KeyError` (KB-KEYS-1 allows either);
- timers of equal timestamp fired newest registration first (TM-2 leaves their order unspecified);
- a timer service asked for again calling the target it was first given, as Flink's `startTimerService` keeps it,
  where the reference takes the latest (TM-9 allows either);
- broadcast state whose `items()` is a one-shot iterator, newest entry first (OS-3: an iterable, in any order);
- a snapshot of registered states without entries written as their meta information, where the reference returns
  None (KB-SNAP-7 allows either; Flink's backends write it);
- a key outside the key-group range accepted by `set_current_key` and refused by the first state access under it
  (KB-KEY-2), as Flink's heap backend does; a None namespace likewise (KS-NS-1), as Flink's backends check it on
  access;
- `num_state_entries` counting a map's user keys, as Flink's RocksDB backend counts its column family's entries,
  where the reference counts one entry per key and namespace (the spec fixes only zero for nothing stored, KS-4);
- expired values of every key cleaned up at each access to value, reducing or aggregating state with TTL, as
  Flink's incremental cleanup (`cleanupIncrementally`) removes entries nobody reads (TTL-3 only forbids returning
  them), while expired list elements and map entries are passed over by reads and left stored under
  `NEVER_RETURN_EXPIRED` (only `RETURN_EXPIRED_IF_NOT_CLEANED_UP` asks a read to clean up);
- a map state whose restored user keys need migration refused with `StateMigrationError`, as Flink's RocksDB
  backend refuses it (SER-5: migrating them is the backend's choice);
- a state asked for as another kind, and operator state asked for in another mode, refused with `IllegalStateError`,
  as Flink's `checkStateMetaInfo` and `DefaultOperatorStateBackend` raise `IllegalStateException` (KS-2, OS-6), where
  the reference raises `StateMigrationError`;
- restored state registered with TTL switched on or off migrated, as Flink 2.x does (TTL-5), where the reference
  refuses it as Flink 1.x did.

`storage_reading_current_keys_only` is a checkpoint storage factory that reads only Flink 2.x's option names for
its directories (CS-8); the suite must configure a storage under test by them. `storage_taking_other_choices` makes
a checkpoint's directory when its location is initialized, where the reference waits for the first file (FMT-5 then
calls the checkpoint incomplete rather than not found), spells its pointers as plain local paths, not `file://`
URLs (nothing fixes the spelling), inlines nothing into `_metadata` (an inline threshold of 0, which CS-10 allows) and
passes every stream's writes through a 4 KiB write buffer, as Flink's file streams do (CS-4).
"""

from __future__ import annotations

import dataclasses
import heapq
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import fsspec

from statecert.reference.format.canonical import CanonicalHeader, write_canonical_snapshot
from statecert.reference.heap.state_table import StateTable
from statecert.reference.heap.ttl import TtlPolicy
from statecert.reference.keyed_backend_base import descriptor_serializers
from statecert.reference.keyed_states import (
    AggregatingStateImpl,
    ListStateImpl,
    MapStateImpl,
    ReducingStateImpl,
    ValueStateImpl,
)
from statecert.reference.operator_state import BroadcastStateImpl, DefaultOperatorStateBackend
from statecert.reference.snapshot_task import AsyncSnapshotTask
from statecert.reference.state_store import EntryKey
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.location import CheckpointStorageLocationImpl
from statecert.reference.storage.written_streams import WrittenStreams
from statecert.reference.timers.timer_queue import TimerId, TimerQueue
from statecert.reference.timers.timer_service import KeyedTimerService
from statecert.spec.errors import IllegalStateError, InvalidStateValueError, StateMigrationError
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, CheckpointOptions
from statecert.spec.serializers import Compatibility
from statecert.spec.state import StateKind
from statecert.spec.timers import InternalTimer
from tests.broken_backends import AcceptsKeysOutsideRange, _factory
from tests.broken_storages import WriteBufferedStream, _adopting, _every_stream


class _LenientReducing(ReducingStateImpl):
    """Ignores `add(None)`; merges in Flink's RocksDB order."""

    def add(self, value: Any) -> None:
        if value is not None:
            super().add(value)

    def merge_namespaces(self, target: Any, sources: Any) -> None:
        """Flink's RocksDB order: the sources reduced first, then `reduce(sources, target)`."""
        values = [self._ser.deserialize(p) for p in self._pop_single(sources)]
        if values:
            merged = values[0]
            for value in values[1:]:
                merged = self._reduce(merged, value)
            self.set_current_namespace(target)
            current = self.get()
            self._put_bytes(self._ser.serialize(merged if current is None else self._reduce(merged, current)))


class _AggregatingMergesIntoSources(AggregatingStateImpl):
    def merge_namespaces(self, target: Any, sources: Any) -> None:
        """Flink's RocksDB order: the sources' accumulators merged first, then `merge(sources, target)`."""
        accumulators = [self._ser.deserialize(p) for p in self._pop_single(sources)]
        if accumulators:
            merged = accumulators[0]
            for accumulator in accumulators[1:]:
                merged = self._fn.merge(merged, accumulator)
            self.set_current_namespace(target)
            current = self._accumulator()
            self._put_bytes(self._ser.serialize(merged if current is None else self._fn.merge(merged, current)))


class _MapEmptyWhenNothingStored(MapStateImpl):
    def is_empty(self) -> bool:
        key, key_group = self._entry_key()
        return not self.store.map_items(key_group, key)

    def _read(self, key_group: int, key: EntryKey, user_key: bytes, stored: bytes) -> bytes | None:
        """With NEVER_RETURN_EXPIRED an expired entry is passed over and left stored (TTL-3 only forbids returning
        it; only RETURN_EXPIRED_IF_NOT_CLEANED_UP asks the read to clean it up)."""
        if self._ttl.expired(stored) and not self._ttl.return_expired:
            return None
        return super()._read(key_group, key, user_key, stored)


class _ListMergesSourcesFirst(ListStateImpl):
    def get(self) -> list[Any] | None:
        """With NEVER_RETURN_EXPIRED the expired elements are passed over and left stored (refreshed are only the
        live ones), where the reference removes them (TTL-3 only forbids returning them)."""
        if not self._ttl.enabled or self._ttl.return_expired:
            return super().get()
        key, key_group = self._entry_key()
        stored = self.store.get_list(key_group, key)
        if stored is None:
            return None
        if self._ttl.update_on_read:
            kept = [e if self._ttl.expired(e) else self._ttl.wrap(self._ttl.payload(e)) for e in stored]
            if kept != stored:
                self.store.set_list(key_group, key, kept)
        live = [self._ser.deserialize(self._ttl.payload(e)) for e in stored if not self._ttl.expired(e)]
        return live or None

    def merge_namespaces(self, target: Any, sources: Any) -> None:
        """The reference's merge into an emptied target, then the target's own elements (timestamps kept) after."""
        _, key_group = self._backend.current_key_bytes_and_group()
        key = self._entry_key_for(target)
        held = self.store.get_list(key_group, key)
        self.store.delete(key_group, key)
        super().merge_namespaces(target, sources)
        if held:
            self.store.append_list(key_group, key, held)


class _NewestFirstTable(StateTable):
    def map_items(self, key_group: int, key: EntryKey) -> list[tuple[bytes, bytes]]:
        return super().map_items(key_group, key)[::-1]


class _TiesNewestFirstQueue(TimerQueue):
    def _remember(self, timer: InternalTimer[Any, Any]) -> TimerId:
        identity = self._identity(timer.key, timer.namespace, timer.timestamp)
        if identity not in self._live:
            self._live[identity] = timer
            self._sequence += 1
            heapq.heappush(self._heap, (timer.timestamp, -self._sequence, identity))
        return identity


class _TimerService(KeyedTimerService):
    queue_class = _TiesNewestFirstQueue


class _BroadcastNewestFirst(BroadcastStateImpl):
    def items(self) -> Iterator[tuple[Any, Any]]:  # type: ignore[override]
        return reversed(super().items())


class _OperatorBackend(DefaultOperatorStateBackend):
    def _register(self, name: str, mode: Any, serializer: Any) -> Any:
        """Another mode for a registered or restored state is Flink's `IllegalStateException` (OS-6)."""
        known = self._states[name].mode if name in self._states else self._restored.get(name, (mode,))[0]
        if known is not mode:
            raise IllegalStateError(
                f"Incompatible state assignment modes. Was [{known.value}], registered with [{mode.value}]."
            )
        return super()._register(name, mode, serializer)

    def get_broadcast_state(self, descriptor: Any) -> BroadcastStateImpl:
        state = super().get_broadcast_state(descriptor)
        state.__class__ = _BroadcastNewestFirst
        return state


_SINGLE_VALUE_KINDS = (ValueStateImpl, ReducingStateImpl, AggregatingStateImpl)


class _OnAccess:
    """Accepts `set_current_namespace(None)` and lets the next access refuse it; with TTL, each access to a
    single-value state first removes every expired value of the state."""

    _namespace_is_none = False
    _ns_bytes: bytes | None
    _ttl_enabled: bool
    _ttl: TtlPolicy
    store: StateTable

    def set_current_namespace(self, namespace: Any) -> None:
        self._namespace_is_none = namespace is None
        if namespace is None:
            self._ns_bytes = None
        else:
            super().set_current_namespace(namespace)  # type: ignore[misc]

    def _entry_key(self) -> tuple[EntryKey, int]:
        if self._namespace_is_none:
            raise InvalidStateValueError("the namespace of a state access may not be None")
        if self._ttl_enabled and isinstance(self, _SINGLE_VALUE_KINDS):
            for key_group, key, namespace, stored in list(self.store.entries()):
                if self._ttl.expired(stored):
                    self.store.delete(key_group, (key, namespace))
        return super()._entry_key()  # type: ignore[misc, no-any-return]


_STATES = {
    ReducingStateImpl: _LenientReducing,
    MapStateImpl: _MapEmptyWhenNothingStored,
    ListStateImpl: _ListMergesSourcesFirst,
    AggregatingStateImpl: _AggregatingMergesIntoSources,
}


class _EveryOpenChoice(AcceptsKeysOutsideRange):
    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.timer_service_class = _TimerService

    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: Any,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> Any:
        if not self._stores or any(len(store) for store in self._stores.values()):
            return super().snapshot(checkpoint_id, timestamp_ms, stream_factory, options)
        self.check_open()
        metas = tuple(self._stores[name].meta for name in sorted(self._stores))
        header = CanonicalHeader(self.backend_name, self._key_serializer.snapshot_configuration(), metas)
        key_group_range = self.key_group_range
        streams = WrittenStreams(stream_factory)

        def write(cancelled: Any) -> Any:
            return write_canonical_snapshot(streams, header, key_group_range, lambda key_group: [], cancelled)

        return self.track_snapshot(AsyncSnapshotTask(write, self._pending.discard, streams.discard))

    def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
        store = self._stores.get(descriptor.name)
        if store is not None and store.meta.kind is not descriptor.kind:
            raise IllegalStateError(
                f"Incompatible key/value state types. Was [{store.meta.kind.value}], registered with "
                f"[{descriptor.kind.value}]."
            )
        if store is not None and store.meta.ttl != (descriptor.ttl is not None):
            self._migrate_ttl(store, enable=descriptor.ttl is not None)
        if store is not None and store.meta.kind is StateKind.MAP and descriptor.kind is StateKind.MAP:
            user_keys = descriptor_serializers(descriptor)["user_key"]
            result = user_keys.resolve_compatibility(store.meta.serializers["user_key"])
            if result.kind is Compatibility.COMPATIBLE_AFTER_MIGRATION:
                raise StateMigrationError(
                    f"state {descriptor.name!r}: its user keys need migration, and migration for map state only "
                    "allows value schema evolutions"
                )
        return super().get_or_create_state(descriptor, namespace_serializer)

    def _migrate_ttl(self, store: Any, enable: bool) -> None:
        """Flink 2.x's migration of state registered with TTL switched (TTL-5): every value, list element and map
        value gains the 8-byte timestamp of now (enabling) or loses it (disabling)."""
        stamp = struct.pack(">q", self._clock.now_ms())

        def convert(stored: bytes) -> bytes:
            return stamp + stored if enable else stored[len(stamp) :]

        for key_group, key, namespace, payload in list(store.entries()):
            if store.meta.kind is StateKind.LIST:
                migrated: Any = [convert(element) for element in payload]
            elif store.meta.kind is StateKind.MAP:
                migrated = [[user_key, convert(value)] for user_key, value in payload]
            else:
                migrated = convert(payload)
            store.put_payload(key_group, (key, namespace), migrated)
        store.meta = dataclasses.replace(store.meta, ttl=enable)

    def get_timer_service(self, name: str, namespace_serializer: Any, triggerable: Any) -> Any:
        first = self._timer_services.get(name)
        service = super().get_timer_service(name, namespace_serializer, triggerable)
        if first is not None:
            service.triggerable = first.triggerable
        return service

    def key_group_outside(self, key: Any) -> int:
        return self.key_group_of(key)

    def current_key_bytes_and_group(self) -> tuple[bytes, int]:
        key_bytes, key_group = super().current_key_bytes_and_group()
        if key_group not in self.key_group_range:
            raise IllegalStateError(f"key group {key_group} is not in {self.key_group_range}")
        return key_bytes, key_group

    def num_state_entries(self, state_name: str | None = None) -> int:
        names = list(self._stores) if state_name is None else [state_name]
        stores = [self._stores[name] for name in names if name in self._stores]
        return sum(
            sum(len(payload) for *_, payload in store.entries()) if store.meta.kind is StateKind.MAP else len(store)
            for store in stores
        )

    def get_keys(self, state_name: str, namespace: Any) -> Iterator[Any]:
        self.check_open()
        if state_name not in self._stores:
            return iter(())
        return reversed(list(super().get_keys(state_name, namespace)))

    def get_keys_and_namespaces(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        self.check_open()
        if state_name not in self._stores:
            return iter(())
        return reversed(list(super().get_keys_and_namespaces(state_name)))

    def create_store(self, meta: Any) -> StateTable:
        return _NewestFirstTable(meta, self.key_group_range)

    def _create_state(self, descriptor: Any, store: Any, ns: Any, serializers: Any) -> Any:
        state = super()._create_state(descriptor, store, ns, serializers)
        kind = _STATES.get(type(state), type(state))
        state.__class__ = type(f"Lenient{kind.__name__}", (_OnAccess, kind), {})
        return state


every_open_choice = _factory(_EveryOpenChoice, _OperatorBackend)


def storage_reading_current_keys_only(config: Mapping[str, object]) -> FileSystemCheckpointStorage:
    """A storage factory that reads only Flink 2.x's keys, `execution.checkpointing.dir` and
    `execution.checkpointing.savepoint-dir` (CS-8), as one written against Flink 2.x's option names would: the
    suite must configure a storage under test by them. Without a savepoint directory it has none (CS-2)."""
    savepoint_dir = config.get("execution.checkpointing.savepoint-dir")
    return FileSystemCheckpointStorage(
        str(config["execution.checkpointing.dir"]), savepoint_dir=None if savepoint_dir is None else str(savepoint_dir)
    )


class _EagerPlainPathLocation(CheckpointStorageLocationImpl):
    """A checkpoint location whose directory exists from the start and whose pointer is a plain local path."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        fs, directory = fsspec.core.url_to_fs(self.directory)
        fs.makedirs(directory, exist_ok=True)

    @property
    def pointer(self) -> str:
        return self.directory.removeprefix("file://")


class _OtherChoicesStorage(FileSystemCheckpointStorage):
    """The file-system storage whose checkpoint and savepoint locations are `_EagerPlainPathLocation`s, with no
    inline state and buffered checkpoint and task-owned streams."""

    def create_checkpoint_storage(self, job_id: str) -> Any:
        access = super().create_checkpoint_storage(job_id)
        for name in ("initialize_location_for_checkpoint", "initialize_location_for_savepoint"):
            initialize = getattr(access, name)

            def eager(*args: Any, initialize: Any = initialize, **kwargs: Any) -> Any:
                location = initialize(*args, **kwargs)
                return _EagerPlainPathLocation(
                    location.checkpoint_id,
                    location.directory,
                    location.shared_dir,
                    location._threshold,
                    location._max_state_size,
                    location.location_reference,
                )

            setattr(access, name, eager)
        access._threshold = 0  # read by the locations `initialize` makes
        _every_stream(access, _adopting(WriteBufferedStream))
        return access


def storage_taking_other_choices(config: Mapping[str, object]) -> FileSystemCheckpointStorage:
    return _OtherChoicesStorage.from_config(config)
