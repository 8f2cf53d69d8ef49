"""Deliberately broken backends, one bug each, for checking that the conformance suite catches them.

Each is a factory usable as `statecert certify tests.broken_backends:<name>`; `CAUGHT_BY` names the requirement
whose test must fail.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import functools
import hashlib
import heapq
import importlib
import io
import itertools
import os
import pickle
import re
import shutil
import struct
import tempfile
import unicodedata
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import fsspec
import msgpack

from statecert.conformance.helpers import DelegatingStream, WrappingStreamFactory, files_of
from statecert.reference.changelog.backend import ChangelogStateBackend
from statecert.reference.changelog.keyed_backend import ChangelogKeyedStateBackend, ChangelogSettings
from statecert.reference.changelog.logging_states import LoggingListState, LoggingState, LoggingValueState
from statecert.reference.changelog.replay import read_changes
from statecert.reference.changelog.writer import StateChangelogWriter
from statecert.reference.format.canonical import (
    CanonicalHeader,
    CanonicalReader,
    write_canonical_snapshot,
    write_key_groups,
)
from statecert.reference.format.entry_check import EntryValidator
from statecert.reference.format.operator_stream import read_operator_states
from statecert.reference.format.state_meta import SERIALIZER_ROLES
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.heap.keyed_backend import HeapKeyedStateBackend, entry_blocks
from statecert.reference.heap.state_table import Cell, StateTable
from statecert.reference.heap.ttl import TtlPolicy
from statecert.reference.keyed_backend_base import descriptor_serializers
from statecert.reference.keyed_states import (
    AggregatingStateImpl,
    ListStateImpl,
    MapIterator,
    MapStateImpl,
    ReducingStateImpl,
    ValueStateImpl,
)
from statecert.reference.loader import load_state_backend
from statecert.reference.operator_state import (
    BroadcastStateImpl,
    DefaultOperatorStateBackend,
    OperatorListStateImpl,
    write_operator_snapshot,
)
from statecert.reference.rescale import restricted
from statecert.reference.rocksdb.backend import EmbeddedRocksDBStateBackend
from statecert.reference.rocksdb.column_family_store import ColumnFamilyStore
from statecert.reference.rocksdb.key_layout import composite_key
from statecert.reference.rocksdb.keyed_backend import RocksDBKeyedStateBackend
from statecert.reference.serializers import MsgpackSerializer, _as_plain, _holds_extension
from statecert.reference.snapshot_task import AsyncSnapshotTask
from statecert.reference.timers.timer_queue import TimerQueue, check_timestamp
from statecert.reference.timers.timer_service import KeyedTimerService
from statecert.spec.errors import (
    IllegalStateError,
    InvalidStateValueError,
    SnapshotCancelledError,
    StateMigrationError,
    UnsupportedFeatureError,
)
from statecert.spec.handles import (
    CANONICAL_FORMAT,
    ByteStreamStateHandle,
    FileStateHandle,
    KeyGroupsStateHandle,
    OperatorStateHandle,
    OperatorStateMode,
)
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, CheckpointOptions, SnapshotType
from statecert.spec.keygroups import KeyGroupRange, flink_murmur_hash
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.serializers import Compatibility, SerializerSnapshot, TypeSerializer
from statecert.spec.state import VOID_NAMESPACE, StateKind, TtlUpdateType
from statecert.spec.storage import CheckpointedStateScope
from statecert.spec.timers import InternalTimer
from tests.incremental_backends import ByKeyGroupKeyedStateBackend, ByKeyGroupStateBackend
from tests.object_backends import (
    Held,
    HoldingSerializer,
    ObjectKeyedStateBackend,
    ObjectOperatorStateBackend,
    ObjectStateTable,
)


class _Backend(HashMapStateBackend):
    """The heap backend with replaceable keyed and operator backend classes."""

    keyed_class: type[HeapKeyedStateBackend] = HeapKeyedStateBackend
    operator_class: type[DefaultOperatorStateBackend] = DefaultOperatorStateBackend

    def create_keyed_state_backend(self, params: Any) -> Any:
        return self.keyed_class(params)

    def create_operator_state_backend(self, params: Any) -> Any:
        return self.operator_class(params)


def _factory(keyed: type[HeapKeyedStateBackend] | None = None, operator: type[Any] | None = None) -> Any:
    backend_class = type(
        "Broken",
        (_Backend,),
        {"keyed_class": keyed or HeapKeyedStateBackend, "operator_class": operator or DefaultOperatorStateBackend},
    )
    return lambda config: backend_class()


def _with_table(table_class: type[StateTable]) -> type[HeapKeyedStateBackend]:
    """A heap keyed backend whose states live in `table_class` instead of StateTable."""

    class Keyed(HeapKeyedStateBackend):
        def create_store(self, meta: Any) -> StateTable:
            return table_class(meta, self.key_group_range)

    return Keyed


class _RewritesSnapshotEntries(HeapKeyedStateBackend):
    """The heap backend whose snapshot writes each IF-4 entry as the function `entry_rewriter` returns, asked in
    the synchronous part with the names of the states snapshotted (the header's order), says."""

    def entry_rewriter(self, names: list[str]) -> Callable[[list[Any]], list[Any]]:
        return lambda entry: entry

    def block_rewriter(self) -> Callable[[list[list[Any]]], list[list[Any]]]:
        """What the snapshot writes of a key group's block (its entries, each rewritten), as written."""
        return lambda entries: entries

    def snapshot(self, checkpoint_id: Any, timestamp_ms: Any, stream_factory: Any, options: Any = None) -> Any:
        self.check_open()
        names = sorted(n for n, t in self._stores.items() if len(t))
        captured = [self._stores[n].capture() for n in names]
        metas = tuple(self._stores[n].meta for n in names)
        header = CanonicalHeader(self.backend_name, self._key_serializer.snapshot_configuration(), metas)
        key_group_range = self.key_group_range
        blocks, rewrite = entry_blocks(captured, key_group_range.start), self.entry_rewriter(names)
        rewrite_block = self.block_rewriter()

        def write(cancelled: Any) -> Any:
            if not captured:
                return None
            rewritten = lambda key_group: rewrite_block([rewrite(entry) for entry in blocks(key_group)])  # noqa: E731
            return write_canonical_snapshot(stream_factory, header, key_group_range, rewritten, cancelled)

        return self.track_snapshot(AsyncSnapshotTask(write, self._pending.discard))


def _with_state(
    base: type[Any], broken: type[Any], keyed: type[HeapKeyedStateBackend] = HeapKeyedStateBackend
) -> type[HeapKeyedStateBackend]:
    """A heap keyed backend (`keyed`) whose `base` states (e.g. ListStateImpl) behave as `broken`."""

    class Keyed(keyed):  # type: ignore[valid-type,misc]
        def _create_state(self, descriptor: Any, store: Any, ns: Any, serializers: Any) -> Any:
            state = super()._create_state(descriptor, store, ns, serializers)
            if isinstance(state, base):
                state.__class__ = broken
            return state

    return Keyed


# 1. The snapshot's synchronous part shares the live dicts: later writes leak into the snapshot.
class _SharingTable(StateTable):
    def capture(self) -> list[Any]:
        return list(self._maps)


# 2. Restore keeps stale entries. The backend keeps each state's entries in a working directory named for the job,
# operator and key-group range, not for the instance, and never clears it: an instance writes them there at every
# snapshot and on close (unless a later checkpoint's are there already), and a new instance for the range, in any
# process on the machine, starts from what is there and restores on top. The directory is the backend's local dir
# (KB-LOCAL-1), else the job's configured one, else a temporary one for this process: so a rollback's restore meets
# the newer entries in whichever Spark worker process it runs.
@functools.cache
def _process_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="statecert-stale-restore-")  # kept here, removed at the process's exit


class _StaleRestore(HeapKeyedStateBackend):
    def __init__(self, params: Any, working_dir: Path) -> None:
        self._working_dir = working_dir / "stale-restore"
        self._checkpoint_id = -1  # of this instance's latest snapshot
        super().__init__(params)

    def _left_behind(self, name: str) -> Path:
        rng = self.key_group_range
        instance = repr((self._params.job_id, self._params.operator_id, rng.start, rng.end, name))
        return self._working_dir / f"{hashlib.sha256(instance.encode()).hexdigest()[:32]}.msgpack"

    def create_store(self, meta: Any) -> StateTable:
        table = StateTable(meta, self.key_group_range)
        path = self._left_behind(meta.name)
        if path.exists():
            for key_group, key, ns, payload in msgpack.unpackb(path.read_bytes())[1]:
                table.put_payload(key_group, (key, ns), payload)
        return table

    def _leave_behind(self) -> None:
        self._working_dir.mkdir(parents=True, exist_ok=True)
        for name, table in self._stores.items():
            path = self._left_behind(name)
            if path.exists() and msgpack.unpackb(path.read_bytes())[0] > self._checkpoint_id:
                continue  # a later checkpoint's entries, from an instance that ran after this one
            partial = path.with_name(f"{path.name}.{os.getpid()}")
            partial.write_bytes(msgpack.packb([self._checkpoint_id, [list(entry) for entry in table.entries()]]))
            os.replace(partial, path)

    def snapshot(self, checkpoint_id: int, *args: Any, **kwargs: Any) -> Any:
        task = super().snapshot(checkpoint_id, *args, **kwargs)
        self._checkpoint_id = checkpoint_id
        self._leave_behind()
        return task

    def close(self) -> None:
        if not self._closed:
            self._leave_behind()
        super().close()


class _StaleRestoreBackend(_Backend):
    def __init__(self, config: Mapping[str, str]) -> None:
        self._local_dir = config.get("state.backend.rocksdb.localdir")

    def create_keyed_state_backend(self, params: Any) -> Any:
        return _StaleRestore(params, Path(params.local_dir or self._local_dir or _process_dir().name))


# 3. Off-by-one key-group range on restore: the last key group of the range is never read.
class _OffByOne(HeapKeyedStateBackend):
    def restore_handles(self, handles: Any) -> None:
        rng = self.key_group_range
        super().restore_handles(restricted(handles, KeyGroupRange.of(rng.start, rng.end - 1)))


# 4. clear() hides the entry from reads but the snapshot still contains it.
class _TombstoneTable(StateTable):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._dead: set[tuple[int, Any]] = set()

    def delete(self, key_group: int, key: Any) -> None:
        self._dead.add((key_group, key))

    def get(self, key_group: int, key: Any) -> Any:
        return None if (key_group, key) in self._dead else super().get(key_group, key)

    def get_list(self, key_group: int, key: Any) -> Any:
        return None if (key_group, key) in self._dead else super().get_list(key_group, key)

    def put(self, key_group: int, key: Any, value: bytes) -> None:
        self._dead.discard((key_group, key))
        super().put(key_group, key, value)

    def append_list(self, key_group: int, key: Any, elements: list[bytes]) -> None:
        if (key_group, key) in self._dead:
            self._dead.discard((key_group, key))
            super().set_list(key_group, key, list(elements))
        else:
            super().append_list(key_group, key, elements)


# 5. Map iteration skips the last entry.
class _SkippingTable(StateTable):
    def map_items(self, key_group: int, key: Any) -> list[tuple[bytes, bytes]]:
        items = super().map_items(key_group, key)
        return items[:-1] if len(items) > 1 else items


# 6. List state accepts None (no check before serializing).
class _NullList(ListStateImpl):
    def add(self, value: Any) -> None:
        key, key_group = self._entry_key()
        self.store.append_list(key_group, key, [self._ttl.wrap(self._ser.serialize(value))])


# 7. The default value is returned by reference.
class _SharedDefault(ValueStateImpl):
    def value(self) -> Any:
        payload = self._get_bytes()
        if payload is None:
            if not hasattr(self, "_default_object"):
                self._default_object = (
                    None if self._default_bytes is None else self._ser.deserialize(self._default_bytes)
                )
            return self._default_object
        return self._ser.deserialize(payload)


# 8. The loader ignores application precedence: configure() loads whatever the configuration names.
class _IgnoresApplication(HashMapStateBackend):
    def configure(self, config: Mapping[str, object]) -> Any:
        return load_state_backend(job_config=config)


# 9. Key groups from Python's salted hash() instead of Flink's murmur hash.
class _SaltedHash(HeapKeyedStateBackend):
    def key_group_of(self, key: Any) -> int:
        return hash(self._key_serializer.serialize(key)) % self.number_of_key_groups


# 10. Merging namespaces leaves the sources in place.
class _MergeKeeps(HeapKeyedStateBackend):
    def _create_state(self, descriptor: Any, store: Any, ns: Any, serializers: Any) -> Any:
        state = super()._create_state(descriptor, store, ns, serializers)
        original = state.store.delete

        def merge(target: Any, sources: Any, _state: Any = state) -> None:
            _state.store.delete = lambda key_group, key: None
            try:
                type(_state).merge_namespaces(_state, target, sources)
            finally:
                _state.store.delete = original

        if hasattr(state, "merge_namespaces"):
            state.merge_namespaces = merge
        return state


# 11. TTL never expires: the injected clock is ignored.
class _TtlIgnoresClock(HeapKeyedStateBackend):
    def _create_state(self, descriptor: Any, store: Any, ns: Any, serializers: Any) -> Any:
        state = super()._create_state(descriptor, store, ns, serializers)
        state._ttl.expired = lambda stored: False
        return state


# 12. Union list state is restored from the first handle only.
class _UnionFromFirst(DefaultOperatorStateBackend):
    def __init__(self, params: OperatorBackendParameters) -> None:
        super().__init__(OperatorBackendParameters(params.job_id, params.operator_id, tuple(params.restore_state)[:1]))


# 13. close() does not cancel running snapshots.
class _CloseKeepsSnapshots(HeapKeyedStateBackend):
    def close(self) -> None:
        self._pending.clear()
        super().close()


# 14. A snapshot of an empty backend is not "nothing".
class _EmptyIsSomething(HeapKeyedStateBackend):
    def snapshot(self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, options: Any = None) -> Any:
        from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS

        task = super().snapshot(checkpoint_id, timestamp_ms, stream_factory, options or DEFAULT_CHECKPOINT_OPTIONS)
        if any(len(store) for store in self._stores.values()):
            return task
        from statecert.spec.handles import ByteStreamStateHandle, KeyGroupsStateHandle

        rng = self.key_group_range
        handle = KeyGroupsStateHandle(rng, (0,) * len(rng), ByteStreamStateHandle("empty", b""))
        task._write = lambda cancelled: handle
        return task


# 15. Handles of another backend's native format are silently ignored.
class _IgnoresForeign(HeapKeyedStateBackend):
    def restore_foreign_handles(self, handles: Any) -> None:
        return None


# 16. Restored state is registered without any serializer compatibility check.
class _RegistersRestoredWith(HeapKeyedStateBackend):
    """Registers a restored, not yet registered state with the serializers `checked` returns, instead of the full
    compatibility check; the hook the serializer mutants below replace."""

    def checked(self, store: Any, descriptor: Any, serializers: dict[str, Any], ns: Any) -> dict[str, Any]:
        raise NotImplementedError

    def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
        from statecert.reference.keyed_backend_base import descriptor_serializers
        from statecert.reference.serializers import VOID_NAMESPACE_SERIALIZER

        store = self._stores.get(descriptor.name)
        if store is None or descriptor.name in self._states:
            return super().get_or_create_state(descriptor, namespace_serializer)
        ns = namespace_serializer or VOID_NAMESPACE_SERIALIZER
        serializers = self.checked(store, descriptor, descriptor_serializers(descriptor), ns)
        state = self._create_state(descriptor, store, ns, serializers)
        self._states[descriptor.name] = state
        return state


class _NoSerializerCheck(_RegistersRestoredWith):
    def checked(self, store: Any, descriptor: Any, serializers: dict[str, Any], ns: Any) -> dict[str, Any]:
        return serializers


# 17. Reducing state clears on add(None), as Flink's heap backend does against AppendingState's documentation.
class _NullReduceClears(ReducingStateImpl):
    def add(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        super().add(value)


# 18. Removing the last user key of a map leaves an empty entry behind.
class _EmptyMapTable(StateTable):
    def map_remove(self, key_group: int, key: Any, user_key: bytes) -> None:
        data: dict[bytes, bytes] = self._cell(key_group, key, dict, dict)
        data.pop(user_key, None)


# -- bug classes found by certifying outside backends (issue 10) ----------------------------------------------------


def _restamp(stored: bytes, now: int) -> bytes:
    return struct.pack(">q", now) + stored[8:]


# 19. Restore re-stamps TTL'd entries with the restore time: expired state revives.
class _TtlResetOnRestore(HeapKeyedStateBackend):
    def restore_handles(self, handles: Any) -> None:
        super().restore_handles(handles)
        now = self._clock.now_ms()
        for store in self._stores.values():
            if not store.meta.ttl:
                continue
            for key_group, key, ns, payload in list(store.entries()):
                if store.meta.kind is StateKind.LIST:
                    payload = [_restamp(e, now) for e in payload]
                elif store.meta.kind is StateKind.MAP:
                    payload = [[k, _restamp(v, now)] for k, v in payload]
                else:
                    payload = _restamp(payload, now)
                store.put_payload(key_group, (key, ns), payload)


# 20. ON_READ_AND_WRITE honoured for value state only: list and map reads never refresh.
class _RefreshValueOnly(HeapKeyedStateBackend):
    def _create_state(self, descriptor: Any, store: Any, ns: Any, serializers: Any) -> Any:
        state = super()._create_state(descriptor, store, ns, serializers)
        if isinstance(state, ListStateImpl | MapStateImpl):
            state._ttl.update_on_read = False
        return state


# 21. contains() looks at storage only, not at expiry.
class _ContainsExpired(MapStateImpl):
    def contains(self, user_key: Any) -> bool:
        key, key_group = self._entry_key()
        return self.store.map_get(key_group, key, self._kser.serialize(user_key)) is not None


# 22. The TTL timestamp is stored little-endian: fine alone, wrong in another backend's savepoint.
class _LittleEndianTtl(TtlPolicy):
    _LE = struct.Struct("<q")

    def wrap(self, payload: bytes) -> bytes:
        return payload if self.ttl is None else self._LE.pack(self.clock.now_ms()) + payload

    def expired(self, stored: bytes) -> bool:
        if self.ttl is None:
            return False
        (last_access,) = self._LE.unpack_from(stored)
        return bool(last_access + self.ttl.ttl_ms <= self.clock.now_ms())


def _with_ttl_policy(policy: type[TtlPolicy]) -> type[HeapKeyedStateBackend]:
    """A heap keyed backend whose states keep their TTL timestamps as `policy` does instead of TtlPolicy."""

    class Keyed(HeapKeyedStateBackend):
        def _create_state(self, descriptor: Any, store: Any, ns: Any, serializers: Any) -> Any:
            state = super()._create_state(descriptor, store, ns, serializers)
            state._ttl = policy(descriptor.ttl, self._clock)
            return state

    return Keyed


# 23. Only the first serializer role is checked on restore: a map's user value or a list's element may change.
class _FirstRoleOnly(_RegistersRestoredWith):
    def checked(self, store: Any, descriptor: Any, serializers: dict[str, Any], ns: Any) -> dict[str, Any]:
        from statecert.reference.migration import resolve_state_serializers

        first = next(iter(serializers))
        return {**serializers, **resolve_state_serializers(store, descriptor, {first: serializers[first]}, ns)}


class _KeyCheckOverride(HeapKeyedStateBackend):
    """A heap keyed backend whose restore checks the key serializer with `key_check` instead of the reference's
    `check_key_serializer` (SER-6), which `key_check` gets to call."""

    def key_check(self, new: Any, old: Any, check: Any) -> Any:
        return check(new, old)

    def restore_handles(self, handles: Any) -> None:
        from statecert.reference import keyed_backend_base

        original = keyed_backend_base.check_key_serializer
        keyed_backend_base.check_key_serializer = lambda new, old: self.key_check(new, old, original)  # type: ignore[assignment]
        try:
            super().restore_handles(handles)
        finally:
            keyed_backend_base.check_key_serializer = original


# 24. The key serializer is checked only when the restore keeps the range (the fast path).
class _KeySerializerUncheckedOnRescale(_KeyCheckOverride):
    def restore_handles(self, handles: Any) -> None:
        own = self.key_group_range
        self.rescaling = any(getattr(h, "key_group_range", own) != own for h in handles)
        super().restore_handles(handles)

    def key_check(self, new: Any, old: Any, check: Any) -> Any:
        return new if self.rescaling else check(new, old)


# 25. A merge with a single source appends it to the target but keeps the source.
class _SingleSourceMergeKeeps(ListStateImpl):
    def merge_namespaces(self, target: Any, sources: Any) -> None:
        sources = list(sources)
        if len(sources) != 1:
            super().merge_namespaces(target, sources)
            return
        _, key_group = self._backend.current_key_bytes_and_group()
        elements = self.store.get_list(key_group, self._entry_key_for(sources[0])) or []
        if elements:
            self.set_current_namespace(target)
            key, _ = self._entry_key()
            self.store.append_list(key_group, key, list(elements))


# 26. The default is copied shallowly: nested objects are shared with later reads.
class _ShallowDefault(ValueStateImpl):
    def value(self) -> Any:
        payload = self._get_bytes()
        if payload is None:
            if not hasattr(self, "_default_object"):
                self._default_object = (
                    None if self._default_bytes is None else self._ser.deserialize(self._default_bytes)
                )
            return copy.copy(self._default_object)
        return self._ser.deserialize(payload)


# 27. The reduce function gets its arguments swapped: reduce(added, accumulated).
class _SwappedReduce(ReducingStateImpl):
    def add(self, value: Any) -> None:
        if value is None:
            super().add(value)
            return
        current = self.get()
        self._put_bytes(self._ser.serialize(value if current is None else self._reduce(value, current)))


# 28. The current-key cache is keyed by the key alone: 1, True and 1.0 share an entry.
class _KeyCacheConflates(HeapKeyedStateBackend):
    def set_current_key(self, key: Any) -> None:
        cache = self.__dict__.setdefault("_conflating_cache", {})
        if key in cache:
            self._current_key = key
            self._current_key_bytes, self._current_key_group = cache[key]
            return
        super().set_current_key(key)
        cache[key] = (self._current_key_bytes, self._current_key_group)


# 29. The entry count is a counter restored from the snapshot and then counted again while loading.
class _CountsTwiceAfterRestore(HeapKeyedStateBackend):
    def restore_handles(self, handles: Any) -> None:
        super().restore_handles(handles)
        self._restored_entries = {name: len(store) for name, store in self._stores.items()}

    def num_state_entries(self, state_name: str | None = None) -> int:
        extra = getattr(self, "_restored_entries", {})
        counted = super().num_state_entries(state_name)
        return counted + (extra.get(state_name, 0) if state_name else sum(extra.values()))


# 30. Map iteration pages through entries 1,024 at a time and drops the first of every later page.
class _PagedMapTable(StateTable):
    def map_items(self, key_group: int, key: Any) -> list[tuple[bytes, bytes]]:
        items = super().map_items(key_group, key)
        return [item for i, item in enumerate(items) if i < 1024 or i % 1024 != 0]


# 31. Key-group offsets are stored as unsigned 16-bit numbers.
class _ShortOffsets(HeapKeyedStateBackend):
    def snapshot(self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, options: Any = None) -> Any:
        from statecert.spec.handles import KeyGroupsStateHandle
        from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS

        task = super().snapshot(checkpoint_id, timestamp_ms, stream_factory, options or DEFAULT_CHECKPOINT_OPTIONS)
        write = task._write

        def short(cancelled: Any) -> Any:
            handle = write(cancelled)
            if isinstance(handle, KeyGroupsStateHandle):
                offsets = tuple(o % 65536 for o in handle.offsets)
                return KeyGroupsStateHandle(handle.key_group_range, offsets, handle.delegate, handle.snapshot_format)
            return handle

        task._write = short
        return task


# 32. close() cancels only snapshots that have not started: one already writing finishes and keeps its file.
class _CancelsOnlyUnstarted(HeapKeyedStateBackend):
    def track_snapshot(self, task: Any) -> Any:
        cancel = task.cancel
        task.cancel = lambda: False if task._started else cancel()
        return super().track_snapshot(task)


# 33. RocksDB: a completed checkpoint deletes the files of the previous base it no longer uses.
class _DeletesOldShared(RocksDBKeyedStateBackend):
    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        previous = dict(self._base_uploads)
        super().notify_checkpoint_complete(checkpoint_id)
        for name, handle in previous.items():
            if name not in self._base_uploads and isinstance(handle, FileStateHandle):
                fs, path = fsspec.core.url_to_fs(handle.path)
                if fs.exists(path):
                    fs.rm(path)


# 34. RocksDB: an aborted checkpoint's uploads become the base of the next incremental one.
class _AbortedIsBase(RocksDBKeyedStateBackend):
    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        if checkpoint_id in self._uploaded:
            self._base_uploads = self._uploaded.pop(checkpoint_id)


# 35. RocksDB: a native savepoint references the checkpoints' shared files instead of holding its own.
class _SavepointReusesShared(RocksDBKeyedStateBackend):
    def _native_writer(self, *args: Any) -> Any:
        *head, _base, incremental = args
        return super()._native_writer(*head, dict(self._base_uploads), incremental)


# 37. RocksDB: clearing one key's map deletes the range of the key in every namespace (the prefix stops short).
class _WideMapClearStore(ColumnFamilyStore):
    def delete(self, key_group: int, key: Any) -> None:
        if self.meta.kind is StateKind.MAP:
            raw = composite_key(key_group, *key)
            self._delete_prefix(raw[: len(raw) - len(key[1]) - 4])
        else:
            super().delete(key_group, key)


class _WideMapClear(RocksDBKeyedStateBackend):
    def create_store(self, meta: Any) -> Any:
        store = super().create_store(meta)
        store.__class__ = _WideMapClearStore
        return store


# 42. RocksDB: a creation that fails (a damaged checkpoint's restore) closes the database but keeps its working
# directory; a disposed backend still removes it.
class _KeepsFailedRestoreFiles(RocksDBKeyedStateBackend):
    def __init__(self, *args: Any) -> None:
        self._built = False
        super().__init__(*args)
        self._built = True

    def release_resources(self) -> None:
        if self._built:
            super().release_resources()
        elif self._db is not None:
            self._db.close()
            self._db = None


# 36. configure() lets configuration override what the backend already decided (an explicit setting).
class _ConfigWins(EmbeddedRocksDBStateBackend):
    def configure(self, config: Mapping[str, object]) -> Any:
        from dataclasses import replace

        from statecert.reference.rocksdb.settings import settings_from_config

        return replace(self, incremental=settings_from_config(config).incremental)


class _NewestFirstQueue(TimerQueue):
    """Pops the latest due timer first."""

    def poll_due(self, time: int) -> Any:
        due = [entry for entry in self._heap if entry[0] <= time and entry[2] in self._live]
        if not due:
            return None
        newest = max(due)
        self._heap.remove(newest)
        heapq.heapify(self._heap)
        timer = self._live.pop(newest[2])
        self._backend.set_current_key(timer.key)
        self._state.set_current_namespace(timer.namespace)
        self._state.remove(timer.timestamp)
        return timer


class _DuplicatingQueue(TimerQueue):
    """Keeps a second registration of the same timer as another timer."""

    def add(self, namespace: Any, time: int) -> None:
        if self._identity(self._current_key(), namespace, time) in self._live:
            self._sequence += 1
            heapq.heappush(self._heap, (time, self._sequence, ("dup", self._sequence)))  # type: ignore[arg-type]
            self._live[("dup", self._sequence)] = InternalTimer(time, self._current_key(), namespace)  # type: ignore[index]
        super().add(namespace, time)


class _StaleKeyQueue(TimerQueue):
    """Fires with the key that was current before the advance."""

    def poll_due(self, time: int) -> Any:
        previous = self._backend.get_current_key()
        timer = super().poll_due(time)
        if timer is not None and previous is not None:
            self._backend.set_current_key(previous)
        return timer


class _ForgetsRestoredQueue(TimerQueue):
    """Keeps restored timers in the state but never loads them into the queue."""

    def _load(self, state_name: str) -> None:
        pass


class _DeleteKeepsDueQueue(TimerQueue):
    """Deletes a timer from the state but leaves it queued."""

    def remove(self, namespace: Any, time: int) -> None:
        self._state.set_current_namespace(namespace)
        self._state.remove(time)


# 38. TTL: adding to reducing state folds the new value into an expired one instead of starting again.
class _FoldsExpired(ReducingStateImpl):
    def add(self, value: Any) -> None:
        key, key_group = self._entry_key()
        stored = self.store.get(key_group, key)
        if value is None or stored is None or not self._ttl_enabled:
            super().add(value)
            return
        current = self._ser.deserialize(self._ttl.payload(stored))
        self._put_bytes(self._ser.serialize(self._reduce(current, value)))


# 39. A key serializer that is compatible once reconfigured is used as given, not reconfigured, after restore.
class _KeySerializerNotReconfigured(_KeyCheckOverride):
    def key_check(self, new: Any, old: Any, check: Any) -> Any:
        check(new, old)  # still refuses what needs migration or is incompatible
        return new


# 40. A key serializer that needs migration is accepted on restore, and reads the old keys' bytes as they are.
class _KeySerializerMigrationAccepted(_KeyCheckOverride):
    def key_check(self, new: Any, old: Any, check: Any) -> Any:
        if new.resolve_compatibility(old).kind is Compatibility.COMPATIBLE_AFTER_MIGRATION:
            return new
        return check(new, old)


# 41. TTL: a list merge stamps the merged elements with the merge's time, as if it were a write.
class _MergeRefreshesTtl(ListStateImpl):
    def merge_namespaces(self, target: Any, sources: Any) -> None:
        _, key_group = self._backend.current_key_bytes_and_group()
        merged: list[bytes] = []
        for source in sources:
            key = self._entry_key_for(source)
            elements = self.store.get_list(key_group, key) or []
            self.store.delete(key_group, key)
            merged.extend(self._ttl.wrap(self._ttl.payload(e)) for e in elements if not self._ttl.expired(e))
        if merged:
            self.set_current_namespace(target)
            key, _ = self._entry_key()
            self.store.append_list(key_group, key, merged)


class _FiresOnlyWhenTimeMoves(KeyedTimerService):
    """An advance that does not move time forward fires nothing, so a timer registered at or before the current
    time waits for a later advance (timers registered by callbacks during an advance still fire in it)."""

    def advance_watermark(self, time: int) -> None:
        if time > self.current_watermark():
            super().advance_watermark(time)

    def advance_processing_time(self, time: int) -> None:
        if time > self.current_processing_time():
            super().advance_processing_time(time)


# 52. Broadcast state keyed by the deserialized user key: `1`, `True` and `1.0` are one entry (OS-3, KS-3).
class _BroadcastByEquality(BroadcastStateImpl):
    def _load(self) -> dict[Any, Any]:
        return dict(self._state.serializer.deserialize(e) for e in self._state.elements)

    def _store(self, entries: dict[Any, Any]) -> None:
        self._state.elements[:] = [self._state.serializer.serialize((k, v)) for k, v in entries.items()]

    def get(self, key: Any) -> Any:
        return self._load().get(key)

    def put(self, key: Any, value: Any) -> None:
        self._store({**self._load(), key: value})

    def remove(self, key: Any) -> None:
        entries = self._load()
        entries.pop(key, None)
        self._store(entries)

    def contains(self, key: Any) -> bool:
        return key in self._load()

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._load().items())


# 53. Operator list state's update() appends the new elements instead of replacing the old ones (OS-7).
class _UpdateAppends(OperatorListStateImpl):
    def update(self, values: Any) -> None:
        self.add_all(values)


def _with_broadcast(broadcast_class: type[BroadcastStateImpl]) -> type[DefaultOperatorStateBackend]:
    """The reference operator backend whose broadcast states behave as `broadcast_class`."""

    class Operator(DefaultOperatorStateBackend):
        def get_broadcast_state(self, descriptor: Any) -> Any:
            return broadcast_class(self, super().get_broadcast_state(descriptor)._state)

    return Operator


def _with_operator_list(
    list_class: type[OperatorListStateImpl], base: type[DefaultOperatorStateBackend] = DefaultOperatorStateBackend
) -> type[DefaultOperatorStateBackend]:
    """The operator backend `base` (the reference's) whose split and union list states behave as `list_class`."""

    class Operator(base):  # type: ignore[valid-type,misc]
        def get_list_state(self, descriptor: Any) -> Any:
            return list_class(self, super().get_list_state(descriptor)._state)

        def get_union_list_state(self, descriptor: Any) -> Any:
            return list_class(self, super().get_union_list_state(descriptor)._state)

    return Operator


# 54. Restored operator elements are not checked: a damaged one fails only when read, as the decoder's ValueError
# (OS-8), and a broadcast entry that is not a pair is never noticed. The spec-only example did this at first.
class _SkipsElementCheckBackend(DefaultOperatorStateBackend):
    def __init__(self, params: OperatorBackendParameters) -> None:
        from statecert.reference import operator_state

        original = operator_state.check_elements
        operator_state.check_elements = lambda *args: None
        try:
            super().__init__(params)
        finally:
            operator_state.check_elements = original


# 55. A value serializer that resolves as compatible once reconfigured is used as given, not as reconfigured
# (SER-3): restored bytes are read with the new serializer's encoding.
class _ValueSerializerNotReconfigured(HeapKeyedStateBackend):
    def _create_state(self, descriptor: Any, store: Any, ns_serializer: Any, serializers: Any) -> Any:
        return super()._create_state(descriptor, store, ns_serializer, descriptor_serializers(descriptor))


# 56. The same for operator state: the restored elements are read with the serializer as registered (SER-3).
class _OperatorSerializerNotReconfigured(DefaultOperatorStateBackend):
    def _register(self, name: str, mode: Any, serializer: Any) -> Any:
        state = super()._register(name, mode, serializer)
        state.serializer = serializer
        return state


# 57. A closed operator backend still registers state, snapshots and serves its states (OS-9).
class _OperatorBackendOpenAfterClose(DefaultOperatorStateBackend):
    def _check_open(self) -> None:
        pass


# 58. Aggregating state's get_internal reads a fresh accumulator where nothing is stored: wrapped in the changelog
# backend, a merge of empty namespaces is logged as a value, and the target restores as get_result([]) (CL-9).
class _EmptyAccumulatorInternal(AggregatingStateImpl):
    def get_internal(self) -> Any:
        accumulator = super().get_internal()
        return self._fn.create_accumulator() if accumulator is None else accumulator


# 59. Aggregating state without get_internal/update_internal (the spec's InternalAppendingState): wrapped in the
# changelog backend, which logs accumulators through them, it cannot register aggregating state at all (CL-9).
class _NoInternalAccessors(AggregatingStateImpl):
    def __getattribute__(self, name: str) -> Any:
        if name in ("get_internal", "update_internal"):
            raise AttributeError(name)
        return super().__getattribute__(name)


# 60. A list read returns the expired elements it may return (RETURN_EXPIRED_IF_NOT_CLEANED_UP) but leaves them
# stored, so every later read returns them again (TTL-3).
class _ListKeepsReturnedExpired(ListStateImpl):
    def get(self) -> list[Any] | None:
        key, key_group = self._entry_key()
        stored = self.store.get_list(key_group, key)
        if stored is None or not self._ttl.return_expired:
            return super().get()
        return [self._ser.deserialize(self._ttl.payload(e)) for e in stored] or None


# 62. A key outside the key-group range is accepted and its state stored in the range's first key group, where a
# rescale hands it to a subtask that does not own the key (KB-KEY-2; Flink's RocksDB backend does not check the key
# group either).
class AcceptsKeysOutsideRange(HeapKeyedStateBackend):
    """`set_current_key` accepts a key outside the range, current in the key group `key_group_outside(key)` gives
    (tests/lenient_backends.py refuses it on access instead, as KB-KEY-2 allows)."""

    def key_group_outside(self, key: Any) -> int:
        raise NotImplementedError

    def set_current_key(self, key: Any) -> None:
        if key is None or self._closed or self.key_group_of(key) in self.key_group_range:
            super().set_current_key(key)
        else:
            self._current_key = key
            self._current_key_bytes = self._key_serializer.serialize(key)
            self._current_key_group = self.key_group_outside(key)


class _StoresOutsideRange(AcceptsKeysOutsideRange):
    def key_group_outside(self, key: Any) -> int:
        return self.key_group_range.start


# 63. `add_all([])` on a list without elements stores an empty list: the key then has an entry (it is counted and
# `get_keys` yields it) and a snapshot writes an empty list entry, which the canonical format forbids (KS-LIST-2, IF-4).
class _AddAllStoresEmpty(ListStateImpl):
    def add_all(self, values: Any) -> None:
        encoded = self._encode_all(values)
        key, key_group = self._entry_key()
        self.store.append_list(key_group, key, encoded)


# 64. A map's `contains` of a key with nothing stored creates the key's (empty) map entry, as a read that fetches
# the container for writing would: the key is then counted and yielded by `get_keys` (KS-5).
class _ContainsCreatesEntry(MapStateImpl):
    def contains(self, user_key: Any) -> bool:
        key, key_group = self._entry_key()
        self.store.map_put(key_group, key, {})
        return super().contains(user_key)


# 65. Key iteration walks stored elements, not entries: `get_keys_and_namespaces` yields a (key, namespace) once per
# list element or map user key, so a caller visiting every key visits some several times (KB-KEYS-1).
class _KeysPerElement(HeapKeyedStateBackend):
    def get_keys_and_namespaces(self, state_name: str) -> Any:
        self.check_open()
        namespaces = self._namespace_serializer(state_name)
        return iter(
            [
                (self._key_serializer.deserialize(key), namespaces.deserialize(namespace))
                for _, key, namespace, payload in self._stores[state_name].entries()
                for _ in (payload if isinstance(payload, list) else [payload])
            ]
        )


# 66. Deleting a timer deletes every key's timer of that namespace and time, not only the current key's (TM-4): a
# window operator's cleanup of one key's window drops the same window's timers of every other key.
class _DeletesEveryKeysTimer(TimerQueue):
    def remove(self, namespace: Any, time: int) -> None:
        current = self._backend.get_current_key()
        for timer in list(self._live.values()):
            if timer.namespace == namespace and timer.timestamp == time:
                self._backend.set_current_key(timer.key)
                super().remove(namespace, time)
        self._backend.set_current_key(current)


# 67. Value state skips an update that stores the value already stored, as a no-op optimization would: with TTL the
# write does not refresh the entry, which expires counted from the first write (TTL-2).
class _SkipsEqualUpdate(ValueStateImpl):
    def update(self, value: Any) -> None:
        if value is None or value != self.value():
            super().update(value)


# 68. `for_each_*_timer` lists from a registry that deletion does not reach: deleted timers are listed, as a lazily
# cleaned priority queue iterated raw would list them (TM-6).
class _ListsDeletedTimers(TimerQueue):
    def __init__(self, *args: Any) -> None:
        self._registered: dict[Any, Any] = {}
        super().__init__(*args)

    def _remember(self, timer: Any) -> Any:
        identity = super()._remember(timer)
        self._registered[identity] = timer
        return identity

    def poll_due(self, time: int) -> Any:
        timer = super().poll_due(time)
        if timer is not None:
            self._registered.pop(self._identity(timer.key, timer.namespace, timer.timestamp), None)
        return timer

    def __iter__(self) -> Any:
        return iter(list(self._registered.values()))


# 69. Value state reads a stored falsy value (0, "", False, [], {}) as nothing stored, as `stored or default` would:
# it returns the default instead (KS-VALUE-1).
class _FalsyReadsDefault(ValueStateImpl):
    def value(self) -> Any:
        stored = super().value()
        if stored:
            return stored
        return None if self._default_bytes is None else self._ser.deserialize(self._default_bytes)


# 70. Reducing state takes a falsy accumulated value (0, "") for nothing stored, as `added if not current else
# reduce(current, added)` would: after a value of 0 the next add starts over (KS-RED-1).
class _RestartsAfterFalsy(ReducingStateImpl):
    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError("reducing state does not accept None")
        current = self.get()
        self._put_bytes(self._ser.serialize(self._reduce(current, value) if current else value))


# 71. An aggregating merge takes a falsy accumulator for an absent one: a target or source accumulator of 0 is
# replaced by the next one instead of merged with it (KS-MERGE-1).
class _MergeDropsFalsy(AggregatingStateImpl):
    def merge_namespaces(self, target: Any, sources: Any) -> None:
        accumulators = [self._ser.deserialize(p) for p in self._pop_single(sources)]
        if accumulators:
            self.set_current_namespace(target)
            current = self._accumulator()
            for accumulator in accumulators:
                current = self._fn.merge(current, accumulator) if current else accumulator
            self._put_bytes(self._ser.serialize(current))


# 72. Timers are de-duplicated by key and time alone: of two timers of one key that differ only in namespace (two
# windows ending together) one is dropped (TM-3).
class _NamespaceBlindQueue(TimerQueue):
    def _identity(self, key: Any, namespace: Any, time: int) -> Any:
        return (self._backend.key_serializer.serialize(key), b"", time)


# 73. `get_keys` de-duplicates the keys it lists with a set of the deserialized keys (the usual fix for listing a key
# once per element, 65): keys Python finds equal, 1, True and 1.0, are listed as one (KB-KEYS-1, KS-3).
class _KeysDeduplicatedByEquality(HeapKeyedStateBackend):
    def get_keys(self, state_name: str, namespace: Any) -> Any:
        return iter(set(super().get_keys(state_name, namespace)))


# 74. Timers are told apart by their key and namespace objects, as a set of (key, namespace, time) tuples would: the
# timers of keys 1 and True (equal in Python, different keys, KS-3) at one time are one timer (TM-3).
class _TimersByEquality(TimerQueue):
    def _identity(self, key: Any, namespace: Any, time: int) -> Any:
        return (key, namespace, time)


# 75. A restore takes the states the first handle it reads describes: a state that only a later handle holds (a
# state registered in only some of the old subtasks) is dropped when their handles are restored together
# (KB-RESTORE-2).
class _DropsOnPayload:
    def put_payload(self, key_group: int, key: Any, payload: Any) -> None:
        pass


class _StatesOfFirstHandle(HeapKeyedStateBackend):
    def _restored_store(self, meta: Any, source: str) -> Any:
        first, names = self.__dict__.setdefault("_first_handle", (source, set()))
        if source == first:
            names.add(meta.name)
        elif meta.name not in names:
            return _DropsOnPayload()
        return super()._restored_store(meta, source)


# 76. List state walks the values of `add_all` and `update` twice, once to refuse None and once to store them: a
# generator (the protocol takes any Iterable) is used up by the first walk and nothing is stored (KS-LIST-2).
class _WalksValuesTwice(ListStateImpl):
    def _encode_all(self, values: Any) -> list[bytes]:
        if any(v is None for v in values):
            raise InvalidStateValueError("list state does not accept None elements")
        return [self._ttl.wrap(self._ser.serialize(v)) for v in values]


# 77. Copy-on-write stops when a snapshot finishes, as if it were the only one pending: with two snapshots pending,
# the later finishing first, writes after it change the dicts the earlier one is still to write (KB-SNAP-5).
class _CopyOnWriteUntilAnyDone(HeapKeyedStateBackend):
    def snapshot(self, *args: Any, **kwargs: Any) -> Any:
        task = super().snapshot(*args, **kwargs)
        run = task.run

        def run_then_release() -> Any:
            handle = run()
            for table in self._stores.values():
                table._map_versions = [table.version] * len(table._map_versions)
            return handle

        task.run = run_then_release
        return task


# 78. The operator backend's snapshot captures its element lists by reference, not by copy: what is added, replaced
# or cleared before the asynchronous part writes them is in the snapshot (OS-10).
class _SharesElementLists(DefaultOperatorStateBackend):
    def snapshot(self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, options: Any = None) -> Any:
        self._check_open()
        captured = {n: (s.mode, s.serializer.snapshot_configuration(), s.elements) for n, s in self._states.items()}
        captured.update(self._restored)

        def write(cancelled: Any) -> Any:
            return write_operator_snapshot(stream_factory, captured, cancelled)

        task = AsyncSnapshotTask(write, self._pending.discard)
        self._pending.add(task)
        return task


# 79. Each entry stores its expiry instant instead of its last access: alike while the duration stays, but restored
# with another duration an entry keeps the old one (TTL-5). Without canonical savepoints, no other backend reads it.
class _ExpiryInstantTtl(TtlPolicy):
    def wrap(self, payload: bytes) -> bytes:
        return payload if self.ttl is None else struct.pack(">q", self.clock.now_ms() + self.ttl.ttl_ms) + payload

    def expired(self, stored: bytes) -> bool:
        return self.ttl is not None and struct.unpack_from(">q", stored)[0] <= self.clock.now_ms()


class _NativeSavepointsOnly(_Backend):
    keyed_class = _with_ttl_policy(_ExpiryInstantTtl)
    capabilities = dataclasses.replace(_Backend.capabilities, canonical_savepoints=False)


# 80. A reducing merge folds every source's stored value in, expired or not (TTL-3).
class _MergeFoldsExpired(ReducingStateImpl):
    def _pop_single(self, sources: Any) -> list[bytes]:
        self._ttl.expired = lambda stored: False
        try:
            return super()._pop_single(sources)
        finally:
            del self._ttl.expired


# 81. Reading aggregating state never refreshes its TTL, whatever the update type (TTL-2).
class _AggregateReadNeverRefreshes(AggregatingStateImpl):
    def _get_bytes(self) -> bytes | None:
        update_on_read, self._ttl.update_on_read = self._ttl.update_on_read, False
        try:
            return super()._get_bytes()
        finally:
            self._ttl.update_on_read = update_on_read


# 82. Migration on restore (SER-5) rewrites value, list and map state but leaves reducing and aggregating state in the
# old serializer's bytes.
class _FoldingStateNotMigrated(HeapKeyedStateBackend):
    def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
        store = self._stores.get(descriptor.name)
        if store is None or descriptor.kind not in (StateKind.REDUCING, StateKind.AGGREGATING):
            return super().get_or_create_state(descriptor, namespace_serializer)
        before = list(store.entries())
        state = super().get_or_create_state(descriptor, namespace_serializer)
        for key_group, key, namespace, payload in before:
            store.put_payload(key_group, (key, namespace), payload)
        return state


# 83. Operator state migrated on restore (SER-5) keeps the old serializer's snapshot, so its next snapshot declares
# the old serializer over the new one's bytes.
class _OperatorMigrationKeepsOldSnapshot(DefaultOperatorStateBackend):
    def _register(self, name: str, mode: Any, serializer: Any) -> Any:
        restored = self._restored.get(name)
        state = super()._register(name, mode, serializer)
        if restored is not None:
            old = restored[1]
            if serializer.resolve_compatibility(old).kind is Compatibility.COMPATIBLE_AFTER_MIGRATION:
                state.serializer = copy.copy(state.serializer)
                state.serializer.snapshot_configuration = lambda: old
        return state


# 84. Asking for a state under its name as another kind replaces it with a new, empty state of that kind: the old
# kind's entries are silently gone (KS-2).
class _ReplacesStateOfAnotherKind(HeapKeyedStateBackend):
    def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
        store = self._stores.get(descriptor.name)
        if store is not None and store.meta.kind is not descriptor.kind:
            del self._stores[descriptor.name]
            self._states.pop(descriptor.name, None)
        return super().get_or_create_state(descriptor, namespace_serializer)


# 85. A refused operator state registration (another mode, OS-6; an incompatible serializer, SER-7) has already
# taken the restored state out: registered again as it should be, the state is empty (the reference did this).
class _RefusalDropsRestored(DefaultOperatorStateBackend):
    def _register(self, name: str, mode: Any, serializer: Any) -> Any:
        try:
            return super()._register(name, mode, serializer)
        except StateMigrationError:
            self._restored.pop(name, None)
            raise


# 86. Restored state registered with TTL switched on or off is taken over as it is, unmigrated: switched off, the
# timestamps are read as part of the values; switched on, the values' first bytes as timestamps (TTL-5).
class _TtlSwitchUnmigrated(HeapKeyedStateBackend):
    def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
        store = self._stores.get(descriptor.name)
        if store is not None and store.meta.ttl != (descriptor.ttl is not None):
            store.meta = dataclasses.replace(store.meta, ttl=descriptor.ttl is not None)
        return super().get_or_create_state(descriptor, namespace_serializer)


# 87. With RETURN_EXPIRED_IF_NOT_CLEANED_UP, a map iteration returns an expired entry without cleaning it up, so every
# later iteration returns it again (get() cleans up as it should) (TTL-3).
class _MapIterationKeepsReturnedExpired(MapStateImpl):
    def items(self) -> Any:
        key, key_group = self._entry_key()
        user_keys = [user_key for user_key, _ in self.store.map_items(key_group, key)]

        def entries() -> Any:
            for user_key in user_keys:
                stored = self.store.map_get(key_group, key, user_key)
                if stored is not None and self._ttl.expired(stored):
                    payload = self._ttl.payload(stored) if self._ttl.return_expired else None
                else:
                    payload = None if stored is None else self._read(key_group, key, user_key, stored)
                if payload is not None:
                    yield self._kser.deserialize(user_key), self._vser.deserialize(payload)

        return entries()


def _with_timer_queue(queue: type[TimerQueue]) -> type[HeapKeyedStateBackend]:
    return _with_timer_service(type("Service", (KeyedTimerService,), {"queue_class": queue}))


# 88. RocksDB: disposing an instance removes the whole local directory, not only its own subdirectory: other
# backends working in the same local directory lose their databases (KB-LOCAL-1).
class _DisposeRemovesLocalDir(RocksDBKeyedStateBackend):
    def release_resources(self) -> None:
        super().release_resources()
        shutil.rmtree(self.instance_dir.parent, ignore_errors=True)


# 112. RocksDB: the instance works in the system temp dir, ignoring `local_dir`, and its disposal closes the database
# but leaves the directory to the operating system's temp cleaner: a worker restoring many times fills its disk
# (KB-LOCAL-1). The local-dir test saw nothing, as nothing was ever under the local dir.
class _KeepsTempInstanceDir(RocksDBKeyedStateBackend):
    def __init__(self, params: Any, settings: Any, max_value_bytes: int) -> None:
        super().__init__(
            dataclasses.replace(params, local_dir=None), dataclasses.replace(settings, local_dir=None), max_value_bytes
        )

    def release_resources(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


# 122. RocksDB: the instance works under a relative path, in the process's working directory, ignoring `local_dir`,
# and its disposal closes the database but leaves the directory: every restore leaves one more in the directory the
# worker was started from (KB-LOCAL-1).
class _KeepsInstanceDirInWorkingDirectory(_KeepsTempInstanceDir):
    def __init__(self, params: Any, settings: Any, max_value_bytes: int) -> None:
        RocksDBKeyedStateBackend.__init__(  # past _KeepsTempInstanceDir's, which sets no local dir
            self,
            dataclasses.replace(params, local_dir=Path("rocksdb-work")),
            dataclasses.replace(settings, local_dir=None),
            max_value_bytes,
        )


# 89. RocksDB: a full checkpoint (the first after a restore from a snapshot) is taken incrementally, referencing the
# files of the snapshot the job started from, which its owner may delete once the checkpoint completes (KB-SNAP-10).
class _FullTakenIncrementally(RocksDBKeyedStateBackend):
    def snapshot(self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, options: Any = None) -> Any:
        options = dataclasses.replace(options or CheckpointOptions(), full=False)
        return super().snapshot(checkpoint_id, timestamp_ms, stream_factory, options)


# 90. The serializers a restored snapshot names are looked up by import path (`module:attr`, as Flink's snapshots
# name Java classes): a hostile savepoint runs the code of any module it names (SER-4, SER-8).
class _ImportsNamedSerializers(HeapKeyedStateBackend):
    def _restored_store(self, meta: Any, source: str) -> Any:
        for snapshot in (meta.namespace_serializer, *meta.serializers.values()):
            module, sep, attr = snapshot.serializer_id.partition(":")
            if sep:
                with contextlib.suppress(ImportError, AttributeError):
                    getattr(importlib.import_module(module), attr)
        return super()._restored_store(meta, source)


# 91. Snapshots written into memory and returned as inline bytes, past the checkpoint's stream factory: the state
# lands in `_metadata` whatever the storage's inline threshold or size limit says (KB-SNAP-1, IF-7).
class _InMemoryStream(io.BytesIO):
    def close_and_get_handle(self) -> ByteStreamStateHandle:
        return ByteStreamStateHandle(f"in-memory-{id(self)}", self.getvalue())

    def discard(self) -> None:
        pass


class _InMemoryStreams:
    def create_checkpoint_state_output_stream(self, scope: Any) -> _InMemoryStream:
        return _InMemoryStream()


class _BypassesStreamFactory(HeapKeyedStateBackend):
    def snapshot(self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, options: Any = None) -> Any:
        return super().snapshot(checkpoint_id, timestamp_ms, _InMemoryStreams(), options or CheckpointOptions())


# 92. Due timers are taken from the queue in a batch and then fired: a timer a callback deletes before its turn (a
# window's cleanup timer, deleted when the window fires) fires anyway (TM-4).
class _FiresDueTimersInBatches(KeyedTimerService):
    def _fire(self, queue: TimerQueue, time: int, target: Any) -> None:
        self._backend.check_open()
        while due := list(iter(lambda: queue.poll_due(time), None)):
            for timer in due:
                self._backend.set_current_key(timer.key)
                target(timer)


# 93. The time is set after the due timers have fired: callbacks read the time before the advance, so a window
# operator's lateness or cleanup check sees the old watermark (TM-2).
class _SetsTimeAfterFiring(KeyedTimerService):
    def advance_watermark(self, time: int) -> None:
        self._fire(self._event, max(self._watermark, check_timestamp(time)), self.triggerable.on_event_time)
        self._watermark = max(self._watermark, time)

    def advance_processing_time(self, time: int) -> None:
        self._fire(
            self._processing, max(self._processing_time, check_timestamp(time)), self.triggerable.on_processing_time
        )
        self._processing_time = max(self._processing_time, time)


# 94. Deletion is lazy: a deleted timer stays in the queue under a tombstone until it surfaces, and registering it
# again is taken for a duplicate of the queued one, so the new registration is lost (TM-4, TM-3).
class _TombstonedTimers(TimerQueue):
    def __init__(self, *args: Any) -> None:
        self._deleted: set[Any] = set()
        super().__init__(*args)

    def remove(self, namespace: Any, time: int) -> None:
        identity = self._identity(self._current_key(), namespace, check_timestamp(time))
        if identity in self._live and identity not in self._deleted:
            self._deleted.add(identity)
            self._state.set_current_namespace(namespace)
            self._state.remove(time)

    def poll_due(self, time: int) -> Any:
        while (timer := super().poll_due(time)) is not None:
            identity = self._identity(timer.key, timer.namespace, timer.timestamp)
            if identity not in self._deleted:
                return timer
            self._deleted.discard(identity)  # surfaced under its tombstone: skipped
        return None

    def __len__(self) -> int:
        return len(self._live) - len(self._deleted)

    def __iter__(self) -> Any:
        return iter([timer for identity, timer in self._live.items() if identity not in self._deleted])


# 95. A snapshot holds the timers of the services asked for since the restore only: an operator that creates a timer
# service lazily loses its restored timers at the first checkpoint before it does (TM-9, KB-RESTORE-3).
class _SnapshotsAskedTimersOnly(HeapKeyedStateBackend):
    def snapshot(self, *args: Any, **kwargs: Any) -> Any:
        for name in [name for name in self._stores if name.startswith("_timer_state/")]:
            if name.removeprefix("_timer_state/").split("_", 1)[1] not in self._timer_services:
                del self._stores[name]
        return super().snapshot(*args, **kwargs)


# 96. Restored timers are kept apart from the ones registered since, and de-duplication looks at the latter only: a
# restored timer registered again (a window operator re-registers its window's timer for every element after a
# recovery) is queued twice and its window fires twice (TM-3).
class _RegisteredFirst(dict[Any, Any]):
    """Timers registered since the restore; `pop` falls back on the restored ones, which `in` does not see."""

    def __init__(self, restored: dict[Any, Any]) -> None:
        super().__init__()
        self.restored = restored

    def pop(self, identity: Any, default: Any = None) -> Any:
        return super().pop(identity, None) or self.restored.pop(identity, default)


class _RestoredTimersApart(TimerQueue):
    def _load(self, state_name: str) -> None:
        super()._load(state_name)
        self._live = self._registered = _RegisteredFirst(self._live)

    def __len__(self) -> int:
        return len(self._registered) + len(self._registered.restored)

    def __iter__(self) -> Any:
        return iter([*self._registered.values(), *self._registered.restored.values()])


# 97. The same, with counting and listing looking at the registered timers only: restored timers fire but are not
# counted or listed until registered again, so an operator that lists its timers after a recovery finds none (TM-6).
class _RestoredTimersUnlisted(_RestoredTimersApart):
    __len__ = TimerQueue.__len__
    __iter__ = TimerQueue.__iter__


# 98. A snapshot task's `cancel()` answers True and does nothing; only `close()` cancels: a checkpoint aborted while
# its asynchronous part waits still uploads its files, which nothing will ever delete (KB-SNAP-6).
class _CancelIgnored(AsyncSnapshotTask[Any]):
    def cancel(self) -> bool:
        return not self.done


class _IgnoresCancel(HeapKeyedStateBackend):
    def track_snapshot(self, task: Any) -> Any:
        task.__class__ = _CancelIgnored
        return super().track_snapshot(task)

    def close(self) -> None:
        for task in list(self._pending):
            task._cancelled.set()
        super().close()


# 99. The backend remembers only its latest pending snapshot: `close()` cancels that one, and an earlier one still
# waiting to run writes its files after the backend is gone (KB-SNAP-6). Found by mutating the spec-only example.
class _TracksLatestSnapshot(HeapKeyedStateBackend):
    def track_snapshot(self, task: Any) -> Any:
        self._pending.clear()
        return super().track_snapshot(task)


# 100. The snapshot captures each state's tables copy-on-write in its synchronous part, but lists the states when
# its asynchronous part writes: a state first registered after the call (a window operator's, on its first element)
# joins the snapshot with what was written to it since, which the replay after a restore writes again (KB-SNAP-3).
class _ListsStatesWhenWriting(HeapKeyedStateBackend):
    def snapshot(self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, options: Any = None) -> Any:
        self.check_open()
        early = {n: t.capture() for n, t in self._stores.items() if len(t)}
        key_group_range = self.key_group_range

        def write(cancelled: Any) -> Any:
            names = sorted(n for n, t in self._stores.items() if n in early or len(t))
            if not names:
                return None
            captured = [early[n] if n in early else self._stores[n].capture() for n in names]
            metas = tuple(self._stores[n].meta for n in names)
            header = CanonicalHeader(self.backend_name, self._key_serializer.snapshot_configuration(), metas)
            blocks = entry_blocks(captured, key_group_range.start)
            return write_canonical_snapshot(stream_factory, header, key_group_range, blocks, cancelled)

        return self.track_snapshot(AsyncSnapshotTask(write, self._pending.discard))


# 101. The operator backend copies its states' elements in the synchronous part, but adds the states registered by
# the time the asynchronous part writes: a state first registered after the call is in the snapshot (OS-10).
class _ListsOperatorStatesWhenWriting(DefaultOperatorStateBackend):
    def snapshot(self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, options: Any = None) -> Any:
        self._check_open()
        early = self.captured_states()

        def write(cancelled: Any) -> Any:
            captured = {**self.captured_states(), **early}
            return write_operator_snapshot(stream_factory, captured, cancelled) if captured else None

        task = AsyncSnapshotTask(write, self._pending.discard)
        self._pending.add(task)
        return task


# 102. An operator list's `update` clears the list and then adds the new elements (as Flink's
# `PartitionableListState` does), which are checked only then: an update refused for a None element has lost the
# list (OS-5). The reference did this; the suite checked the refusal on an empty list only.
class _UpdateClearsFirst(OperatorListStateImpl):
    def update(self, values: Any) -> None:
        self._state.elements.clear()
        self.add_all(values)


# 103. Broadcast states kept in a registry of their own, as Flink's `DefaultOperatorStateBackend` keeps them: a list
# state and a broadcast state of one name sit side by side, and the snapshot, whose stream names each state once
# (IF-6), keeps only the list state (OS-6).
class _SeparateBroadcastRegistry(DefaultOperatorStateBackend):
    def __init__(self, params: OperatorBackendParameters) -> None:
        super().__init__(params)
        self._broadcasts = DefaultOperatorStateBackend(OperatorBackendParameters(params.job_id, params.operator_id))

    def get_broadcast_state(self, descriptor: Any) -> Any:
        self._check_open()
        if descriptor.name in self._restored or descriptor.name in self._broadcasts.registered_state_names:
            return (super() if descriptor.name in self._restored else self._broadcasts).get_broadcast_state(descriptor)
        if descriptor.name in self._states and self._states[descriptor.name].mode is OperatorStateMode.BROADCAST:
            return super().get_broadcast_state(descriptor)
        return self._broadcasts.get_broadcast_state(descriptor)

    @property
    def registered_state_names(self) -> set[str]:
        return super().registered_state_names | self._broadcasts.registered_state_names

    def captured_states(self) -> dict[str, Any]:
        return {**self._broadcasts.captured_states(), **super().captured_states()}

    def close(self) -> None:
        self._broadcasts.close()
        super().close()


# 104. The TTL cleanup of a list read writes the unexpired elements back, also when none is left: an empty list
# entry stays, counted and listed, and snapshots hold it, which no reader accepts (IF-4; FLINK-21413, Flink's
# TtlListState on the heap backend).
class _ListCleanupLeavesEmpty(ListStateImpl):
    def get(self) -> Any:
        key, key_group = self._entry_key()
        stored = self.store.get_list(key_group, key)
        if self._ttl.enabled and stored and all(self._ttl.expired(e) for e in stored):
            self.store._write(key_group)[key] = Cell(self.store.version, [])
            return None
        return super().get()


# 105. The same for map state: the cleanup of the last expired entry leaves the map entry without user keys
# (FLINK-21413, Flink's TtlMapState on the heap backend).
class _MapCleanupLeavesEmpty(MapStateImpl):
    def _read(self, key_group: int, key: Any, user_key: bytes, stored: bytes) -> Any:
        cell = self.store._read(key_group).get(key)
        if self._ttl.expired(stored) and cell is not None and list(cell.data) == [user_key]:
            self.store._write(key_group)[key] = Cell(self.store.version, {})
            return self._ttl.payload(stored) if self._ttl.return_expired else None
        return super()._read(key_group, key, user_key, stored)


# 106. The asynchronous part catches a storage error and reports that there was nothing to snapshot (None): the
# checkpoint completes without the keyed state, which the next recovery loses (KB-SNAP-1). Only the changelog
# chapter's materialization-failure test saw it, and only with --changelog.
def _forgiving(write: Any) -> Any:
    def forgiving(cancelled: Any) -> Any:
        try:
            return write(cancelled)
        except OSError:
            return None

    return forgiving


class _SwallowsStorageErrors(HeapKeyedStateBackend):
    def track_snapshot(self, task: Any) -> Any:
        task._write = _forgiving(task._write)
        return super().track_snapshot(task)


# 107. The same in the operator backend: the operator state is missing from the completed checkpoint (OS-4).
class _OperatorSwallowsStorageErrors(DefaultOperatorStateBackend):
    def snapshot(self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, options: Any = None) -> Any:
        task = super().snapshot(checkpoint_id, timestamp_ms, stream_factory)
        task._write = _forgiving(task._write)
        return task


# 108. Restore leaves out a handle one of whose files is gone, as if that subtask had had no state: a checkpoint
# whose file was deleted (by hand, or by a cleanup racing the restore) restores the other key groups only, a smaller
# state instead of an error (FMT-12).
class _SkipsHandlesWithMissingFiles(HeapKeyedStateBackend):
    def restore_handles(self, handles: Any) -> None:
        def present(handle: Any) -> bool:
            for url in files_of(handle):
                fs, path = fsspec.core.url_to_fs(url)
                if not fs.exists(path):
                    return False
            return True

        super().restore_handles([handle for handle in handles if present(handle)])


# 109. The same in the operator backend: a subtask's stream whose file is gone is left out of the restore (FMT-12).
class _OperatorSkipsMissingStreams(DefaultOperatorStateBackend):
    def __init__(self, params: OperatorBackendParameters) -> None:
        def present(handle: OperatorStateHandle) -> bool:
            if not isinstance(handle.delegate, FileStateHandle):
                return True
            fs, path = fsspec.core.url_to_fs(handle.delegate.path)
            return bool(fs.exists(path))

        kept = tuple(handle for handle in params.restore_state if present(handle))
        super().__init__(dataclasses.replace(params, restore_state=kept))


# 110. Restore reads state files without the handle's checksum (as a reader opening the path itself would, checking
# the size at most): a byte changed after the file was written restores as a different value (FMT-12).
def _without_checksum(handle: Any) -> Any:
    delegate = getattr(handle, "delegate", None)
    if isinstance(delegate, FileStateHandle):
        return dataclasses.replace(handle, delegate=dataclasses.replace(delegate, checksum=None))
    return handle


class _ReadsWithoutChecksum(HeapKeyedStateBackend):
    def restore_handles(self, handles: Any) -> None:
        super().restore_handles([_without_checksum(handle) for handle in handles])


# 111. The same for operator state: a changed byte gives another element (FMT-12, OS-8).
class _OperatorReadsWithoutChecksum(DefaultOperatorStateBackend):
    def __init__(self, params: OperatorBackendParameters) -> None:
        unchecked = tuple(_without_checksum(handle) for handle in params.restore_state)
        super().__init__(dataclasses.replace(params, restore_state=unchecked))


# 113. Value state keeps the object `update` was given on the heap, serialized only when a snapshot is written, and
# `value()` returns that object: one read after `snapshot()` returned, changed in place and written back, changes the
# object the snapshot holds, where Flink's `CopyOnWriteStateMap.get` copies it first (KB-SNAP-3).
class _Held:
    """A state object kept as it was given, with the serializer that writes it into a snapshot."""

    __slots__ = ("serializer", "value")

    def __init__(self, value: Any, serializer: Any) -> None:
        self.value = value
        self.serializer = serializer


def _held(state: Any) -> _Held | None:
    """What `state` holds as an object for its current key and namespace; None where it holds bytes or nothing."""
    key, key_group = state._entry_key()
    stored = state.store.get(key_group, key)
    return stored if type(stored) is _Held else None


def _hold(state: Any, value: Any) -> None:
    """Keep `value` itself as `state`'s value for the current key and namespace (refused now if it cannot be
    serialized, as a write that serializes at once refuses it)."""
    state._ser.serialize(value)
    key, key_group = state._entry_key()
    state.store.put(key_group, key, _Held(value, state._ser))


class _HoldsValueObjects(ValueStateImpl):
    def value(self) -> Any:
        held = _held(self)
        return super().value() if held is None else held.value

    def update(self, value: Any) -> None:
        if value is None or self._ttl_enabled:
            super().update(value)
        else:
            _hold(self, value)


# 114. The same for aggregating state's accumulator: `add` hands the held accumulator to the function, which may
# change it in place, as Flink's `CopyOnWriteStateMap.transform` copies it first to allow (KB-SNAP-3).
class _HoldsAccumulators(AggregatingStateImpl):
    def _accumulator(self) -> Any:
        held = _held(self)
        return super()._accumulator() if held is None else held.value

    def add(self, value: Any) -> None:
        if self._ttl_enabled:
            super().add(value)
            return
        accumulator = self._accumulator()
        _hold(self, self._fn.add(value, self._fn.create_accumulator() if accumulator is None else accumulator))

    def merge_namespaces(self, target: Any, sources: Any) -> None:
        sources = list(sources)
        _, key_group = self._backend.current_key_bytes_and_group()
        for namespace in (target, *sources):  # the merge reads bytes: serialize what is held first
            key = self._entry_key_for(namespace)
            stored = self.store.get(key_group, key)
            if type(stored) is _Held:
                self.store.put(key_group, key, stored.serializer.serialize(stored.value))
        super().merge_namespaces(target, sources)


# 125. The same accumulators, copied before `add` hands them to the function (so 114's write stays out of a pending
# snapshot), but merged in place: a namespace merge whose `merge(a, b)` extends `a` changes the target's accumulator
# a pending snapshot holds (KB-SNAP-3).
class _MergesHeldAccumulatorsInPlace(_HoldsAccumulators):
    def _accumulator(self) -> Any:
        return copy.deepcopy(super()._accumulator())

    def merge_namespaces(self, target: Any, sources: Any) -> None:
        if self._ttl_enabled:  # stored with timestamps: 114's merge
            super().merge_namespaces(target, sources)
            return
        # without TTL, `_pop_single` returns what is stored: a held accumulator or its bytes
        merged = [p.value if type(p) is _Held else self._ser.deserialize(p) for p in self._pop_single(sources)]
        if merged:
            self.set_current_namespace(target)
            current = super()._accumulator()  # 114's: the held object itself, not a copy
            for accumulator in merged:
                current = accumulator if current is None else self._fn.merge(current, accumulator)
            _hold(self, current)


class _SerializesHeldObjects(_RewritesSnapshotEntries):
    """Serializes the objects states hold when the snapshot's asynchronous part writes them, as they are then."""

    def entry_rewriter(self, names: list[str]) -> Callable[[list[Any]], list[Any]]:
        def serialized(entry: list[Any]) -> list[Any]:
            payload = entry[3]
            return [*entry[:3], payload.serializer.serialize(payload.value)] if type(payload) is _Held else entry

        return serialized


def _holding_objects(base: type[Any], broken: type[Any]) -> type[HeapKeyedStateBackend]:
    """A heap keyed backend whose `base` states hold objects as `broken` does, serialized by the snapshot's
    asynchronous part."""
    return _with_state(base, broken, keyed=_SerializesHeldObjects)


# 115. A restored state's namespace serializer is taken as the registration gives it, never checked against the one
# that wrote the state: a window job whose namespace type changed reads every restored namespace with the new
# serializer (SER-6).
class _NamespaceSerializerUnchecked(HeapKeyedStateBackend):
    def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
        store = self._stores.get(descriptor.name)
        if store is not None and namespace_serializer is not None:
            configuration = namespace_serializer.snapshot_configuration()
            store.meta = dataclasses.replace(store.meta, namespace_serializer=configuration)
        return super().get_or_create_state(descriptor, namespace_serializer)


# 116. Entries told apart by their key and namespace bytes joined, as a flat key-value store's composite key without
# lengths: ("a", "m60n0") and ("am60", "n0"), of one key group, are one entry, and the later write replaces the
# earlier one's value under the earlier one's key and namespace (KS-3).
class _JoinedEntryKey(tuple[bytes, bytes]):
    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self[0] + self[1])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, tuple) and self[0] + self[1] == other[0] + other[1]


class _JoinedKeysTable(StateTable):
    pass


def _joining(name: str) -> Any:
    method = getattr(StateTable, name)
    return lambda self, key_group, key, *args: method(self, key_group, _JoinedEntryKey(key), *args)


_KEYED_METHODS = ("get", "put", "delete", "get_list", "set_list", "append_list", "map_get", "map_put", "map_remove")
for _name in (*_KEYED_METHODS, "map_items", "put_payload"):
    setattr(_JoinedKeysTable, _name, _joining(_name))


# 117. Union list state restored as a union of sets: an element equal to one an earlier handle gave is dropped, so
# what every subtask held (a default, a shared offset) comes back once instead of once per old subtask (OS-2).
class _UnionDeduplicatedAcrossSubtasks(DefaultOperatorStateBackend):
    def __init__(self, params: OperatorBackendParameters) -> None:
        super().__init__(params)
        merged: dict[str, list[bytes]] = {}
        for handle in params.restore_state:
            for name, (mode, _, elements) in read_operator_states(handle).items():
                if mode is OperatorStateMode.UNION:
                    seen = set(merged.get(name, ()))
                    merged.setdefault(name, []).extend(e for e in elements if e not in seen)
        for name, elements in merged.items():
            mode, snapshot, _ = self._restored[name]
            self._restored[name] = (mode, snapshot, elements)


# 118. A restore claims the checkpoint: it deletes the files it restored from once they are read, as Flink's CLAIM
# mode lets the job own them, where the default (NO_CLAIM) leaves them: the next restore of that checkpoint, after
# a second failure or by another new subtask reading the same old handle, finds them gone (KB-RESTORE-1).
class _ClaimsRestoredFiles(HeapKeyedStateBackend):
    def restore_handles(self, handles: Any) -> None:
        super().restore_handles(handles)
        for handle in handles:
            for url in files_of(handle):
                fs, path = fsspec.core.url_to_fs(url)
                fs.rm(path)


# 119. Operator list state keeps its elements as the objects it was given, serialized when the snapshot is written,
# and its synchronous part copies the lists but not the elements: an element read after `snapshot()` returned,
# changed in place and written back, is changed in the snapshot too, where Flink deep-copies operator state in the
# synchronous part (OS-10).
class _HoldsElements(OperatorListStateImpl):
    def get(self) -> list[Any]:
        self._backend._check_open()
        serializer = self._state.serializer
        return [e.value if type(e) is _Held else serializer.deserialize(e) for e in self._state.elements]

    def _encode_all(self, values: Any) -> list[Any]:
        values = list(values)
        super()._encode_all(values)  # refuses None and what cannot be serialized
        return [_Held(v, self._state.serializer) for v in values]


class _RewritesOperatorElements(DefaultOperatorStateBackend):
    """The reference operator backend whose snapshot writes each element as `element_rewriter`, asked in the
    synchronous part, returns it when the asynchronous part runs."""

    def element_rewriter(self) -> Callable[[Any], bytes]:
        return lambda element: element  # type: ignore[no-any-return]

    def list_rewriter(self) -> Callable[[list[bytes]], list[bytes]]:
        """What the snapshot writes of a state's elements (each rewritten), as written."""
        return lambda elements: elements

    def snapshot(self, checkpoint_id: Any, timestamp_ms: Any, stream_factory: Any, options: Any = None) -> Any:
        self._check_open()
        captured, rewrite, rewrite_list = self.captured_states(), self.element_rewriter(), self.list_rewriter()

        def write(cancelled: Any) -> Any:
            rewritten = {
                name: (mode, snapshot, rewrite_list([rewrite(e) for e in elements]))
                for name, (mode, snapshot, elements) in captured.items()
            }
            return write_operator_snapshot(stream_factory, rewritten, cancelled) if rewritten else None

        task: AsyncSnapshotTask[Any] = AsyncSnapshotTask(write, self._pending.discard)
        self._pending.add(task)
        return task


class _HoldsOperatorElements(_RewritesOperatorElements):
    def get_list_state(self, descriptor: Any) -> Any:
        state = super().get_list_state(descriptor)
        state.__class__ = _HoldsElements
        return state

    def get_union_list_state(self, descriptor: Any) -> Any:
        state = super().get_union_list_state(descriptor)
        state.__class__ = _HoldsElements
        return state

    def element_rewriter(self) -> Callable[[Any], bytes]:
        return lambda e: e.serializer.serialize(e.value) if type(e) is _Held else e  # type: ignore[no-any-return]


# 120. Value state takes stored bytes that are empty for nothing stored (`if not stored`): the empty text, whose
# `StringSerializer` bytes are none, reads as None (KS-1).
class _EmptyBytesReadAsNothing(ValueStateImpl):
    def value(self) -> Any:
        key, key_group = self._entry_key()
        if not self.store.get(key_group, key):
            return None if self._default_bytes is None else self._ser.deserialize(self._default_bytes)
        return super().value()


# 121. The snapshot keeps each payload's length in 16 bits, as a native format sized for small values would: a value,
# element, user key or user value of 64 KiB or more comes back cut to its length modulo 65,536 (KS-1).
def _cut(data: bytes) -> bytes:
    return data[: len(data) % 65_536]


def _cut_payload(payload: Any) -> Any:
    if isinstance(payload, bytes):
        return _cut(payload)
    return [[_cut(p[0]), _cut(p[1])] if isinstance(p, list) else _cut(p) for p in payload]  # map pairs, elements


class _SixteenBitLengths(_RewritesSnapshotEntries):
    def entry_rewriter(self, names: list[str]) -> Callable[[list[Any]], list[Any]]:
        return lambda entry: [*entry[:3], _cut_payload(entry[3])]


# 123. Restored states not registered since are written into the next snapshot with the state index they had in the
# restored header, as a backend keeping them as the raw entries it read would: once a state that sorts before them is
# registered, their entries point at another state of the new header (KB-RESTORE-3). Only a timer test (TM-9)
# rejected it, through the timer states a restore keeps, so a backend without timers was certified.
class _RestoredIndexesKept(_RewritesSnapshotEntries):
    def restore_handles(self, handles: Any) -> None:
        self.restored_index: dict[str, int] = {}
        for handle in handles:
            if isinstance(handle, KeyGroupsStateHandle):
                with CanonicalReader(handle) as reader:
                    for index, meta in enumerate(reader.header.states):
                        self.restored_index.setdefault(meta.name, index)
        super().restore_handles(handles)

    def entry_rewriter(self, names: list[str]) -> Callable[[list[Any]], list[Any]]:
        kept = {
            i: self.restored_index[n] for i, n in enumerate(names) if n not in self._states and n in self.restored_index
        }
        return lambda entry: [kept.get(entry[0], entry[0]), *entry[1:]]


# 124. Operator states restored and not registered since are written into the next snapshot with the element offsets
# they had in the restored stream, as a backend copying their bytes over would: once a state registered since
# comes before them in the new stream, their offsets point at its elements (OS-6).
class _RestoredOffsetsKept(DefaultOperatorStateBackend):
    def __init__(self, params: OperatorBackendParameters) -> None:
        super().__init__(params)
        self.restored_partitions = {n: p for handle in params.restore_state for n, p in handle.states.items()}

    def snapshot(self, checkpoint_id: Any, timestamp_ms: Any, stream_factory: Any, options: Any = None) -> Any:
        self._check_open()
        captured = self.captured_states()
        unregistered = set(self._restored) & set(self.restored_partitions)

        def write(cancelled: Any) -> Any:
            handle = write_operator_snapshot(stream_factory, captured, cancelled) if captured else None
            if handle is None:
                return None
            states = {**handle.states, **{n: self.restored_partitions[n] for n in unregistered}}
            return dataclasses.replace(handle, states=states)

        task: AsyncSnapshotTask[Any] = AsyncSnapshotTask(write, self._pending.discard)
        self._pending.add(task)
        return task


# 126. A read's TTL refresh (ON_READ_AND_WRITE) writes the new timestamp into the stored entry past the table's
# copy-on-write, as "only a timestamp": a read after `snapshot()` returned refreshes the entry the snapshot holds, and
# the restored entry lives past its time (TTL-6).
class _RefreshesPastCopyOnWrite(ValueStateImpl):
    def _get_bytes(self) -> bytes | None:
        key, key_group = self._entry_key()
        stored = self.store.get(key_group, key)
        if stored is None or not self._ttl_enabled or self._ttl.expired(stored) or not self._ttl.update_on_read:
            return super()._get_bytes()
        self.store._read(key_group)[key] = self._ttl.wrap(self._ttl.payload(stored))
        return self._ttl.payload(stored)


# 127. A value written over an existing entry goes into the key group's dict in place, copy-on-write only for new
# entries ("the dict keeps its size"): an update after `snapshot()` returned changes the value the snapshot holds.
# The snapshot tests wrote the same values again over existing keys, so nothing saw it (KB-SNAP-3).
class _OverwritesInPlaceTable(StateTable):
    def put(self, key_group: int, key: Any, value: bytes) -> None:
        entries = self._read(key_group)
        if key in entries:
            entries[key] = value
        else:
            super().put(key_group, key, value)


# 128. The same for map state: a put into an existing map entry updates its dict in place, past the copy-on-write, so
# a user value changed after `snapshot()` returned is changed in the snapshot. Only a timer test (TM-6) saw it, as
# the reference keeps timers in map state (KB-SNAP-3).
class _MapPutsInPlaceTable(StateTable):
    def map_put(self, key_group: int, key: Any, entries: Mapping[bytes, bytes]) -> None:
        cell = self._read(key_group).get(key)
        if cell is None:
            super().map_put(key_group, key, entries)
        else:
            cell.data.update(entries)


# 129. `clear()` of a list or map entry empties its container in place before removing the entry (copy-on-write for
# the removal only): a list or map cleared after `snapshot()` returned is empty in the snapshot, which then holds an
# entry without elements no reader accepts. No snapshot test cleared a list or map after the call (KB-SNAP-3).
class _EmptiesInPlaceTable(StateTable):
    def delete(self, key_group: int, key: Any) -> None:
        cell = self._read(key_group).get(key)
        if type(cell) is Cell:
            cell.data.clear()
        super().delete(key_group, key)


# 130. A map's `remove` of one of several user keys deletes it from the map's dict in place (copy-on-write only when
# the entry goes): a user key removed after `snapshot()` returned is missing from the snapshot (KB-SNAP-3).
class _RemovesUserKeysInPlaceTable(StateTable):
    def map_remove(self, key_group: int, key: Any, user_key: bytes) -> None:
        cell = self._read(key_group).get(key)
        if cell is not None and user_key in cell.data and len(cell.data) > 1:
            del cell.data[user_key]
        else:
            super().map_remove(key_group, key, user_key)


# 131. A list's `update` replaces the elements of an existing list in place: a list replaced after `snapshot()`
# returned is replaced in the snapshot too (KB-SNAP-3).
class _ReplacesElementsInPlaceTable(StateTable):
    def set_list(self, key_group: int, key: Any, elements: list[bytes]) -> None:
        cell = self._read(key_group).get(key)
        if cell is not None and elements:
            cell.data[:] = elements
        else:
            super().set_list(key_group, key, elements)


# 132. The task thread and the snapshot's asynchronous part copy bytes through one reusable buffer of the backend
# (clear, extend, `bytes(buffer)`), as a backend reusing one output buffer for all serialization would: one after
# the other, every value is right; interleaved, values written or snapshotted are another's. Flink duplicates its
# serializers for the asynchronous part so that they share no such buffer. The run_while tests wrote 5 keys and left
# the switching to the interpreter (every 5 ms, or slower on a busy machine), so the two parts never met (KB-SNAP-2).
def _through(buffer: bytearray, data: bytes) -> bytes:
    buffer.clear()
    buffer.extend(data)
    return bytes(buffer)


class _SharedBufferTable(StateTable):
    buffer = bytearray()  # the backend's, set by _SharesBuffer

    def put(self, key_group: int, key: Any, value: bytes) -> None:
        super().put(key_group, key, _through(self.buffer, value))


# 134. The asynchronous parts of all snapshots copy bytes through one reusable buffer of the backend, which the task
# thread never uses: right while one runs at a time, mixed when two concurrent checkpoints' asynchronous parts run
# side by side, as Flink's task thread pool runs them; no test ran two at once (KB-SNAP-5).
class _AsynchronousPartsShareBuffer(_RewritesSnapshotEntries):
    def __init__(self, params: Any) -> None:
        self.buffer = bytearray()
        super().__init__(params)

    def entry_rewriter(self, names: list[str]) -> Callable[[list[Any]], list[Any]]:
        return lambda entry: [*entry[:3], _through(self.buffer, entry[3])] if type(entry[3]) is bytes else entry


class _SharesBuffer(_AsynchronousPartsShareBuffer):  # 132: the task thread's value writes use it too
    def create_store(self, meta: Any) -> StateTable:
        table = _SharedBufferTable(meta, self.key_group_range)
        table.buffer = self.buffer
        return table


# 133. The same for operator state: elements added and elements snapshotted go through one buffer (KB-SNAP-2, OS-10).
class _SharedBufferList(OperatorListStateImpl):
    def _encode_all(self, values: Any) -> list[bytes]:
        buffer = self._backend.buffer  # type: ignore[attr-defined]
        return [_through(buffer, element) for element in super()._encode_all(values)]


# 135. The asynchronous parts of all operator snapshots copy elements through one buffer of the backend (KB-SNAP-5).
class _SharesOperatorBuffer(_RewritesOperatorElements):
    def __init__(self, params: OperatorBackendParameters) -> None:
        self.buffer = bytearray()
        super().__init__(params)

    def element_rewriter(self) -> Callable[[Any], bytes]:
        return functools.partial(_through, self.buffer)


# 136. The snapshot records how many entries a key group holds in 16 bits (a `struct` "H", say) and the restore
# reads that many: a key group of more than 65,535 entries (keys x namespaces x states) comes back with the count's
# remainder (KB-RESTORE-1). The suite's largest state held 2,000 keys over 128 or 1,024 key groups.
class _SixteenBitEntryCounts(_RewritesSnapshotEntries):
    def block_rewriter(self) -> Callable[[list[list[Any]]], list[list[Any]]]:
        return lambda entries: entries[: len(entries) & 0xFFFF]


# 137. The snapshot records how many elements a list, or user keys a map, holds in 16 bits: a list or map of more
# than 65,535 comes back with the remainder (KS-MAP-2, KS-LIST-1 through a restore). The suite's largest map held
# 2,049 user keys, its largest list 1,000 elements.
def _collection_counted_in_16_bits(entry: list[Any]) -> list[Any]:
    """An IF-4 entry whose list or map payload is cut to its length modulo 65,536; a single value's entry as it is."""
    payload = entry[3]
    return entry if isinstance(payload, bytes) else [*entry[:3], payload[: len(payload) & 0xFFFF]]


class _SixteenBitCollectionSizes(_RewritesSnapshotEntries):
    def entry_rewriter(self, names: list[str]) -> Callable[[list[Any]], list[Any]]:
        return _collection_counted_in_16_bits


# 138. Writes go to a memtable that is frozen and replaced when it reaches 16,384 puts, as an LSM store's is; the
# put that fills it is written to the frozen one after its contents were taken, and is lost (KS-VALUE-1: a later
# read gives the default). Only a state of more than 16,383 writes meets it.
class _MemtableLosesTheFillingPut(StateTable):
    MEMTABLE_PUTS = 16_384

    def put(self, key_group: int, key: Any, value: bytes) -> None:
        self.puts = getattr(self, "puts", 0) + 1
        if self.puts % self.MEMTABLE_PUTS:
            super().put(key_group, key, value)


# 139. An operator snapshot records how many elements (offsets) a list or broadcast state holds in 16 bits: one of
# more than 65,535 comes back with the remainder (OS-7). The suite's largest operator list held 1,000 elements.
class _SixteenBitOffsetCounts(_RewritesOperatorElements):
    def list_rewriter(self) -> Callable[[list[bytes]], list[bytes]]:
        return lambda elements: elements[: len(elements) & 0xFFFF]


# 140. RocksDB: whichever checkpoint is notified complete becomes the base of the next incremental one, a late
# notification too: after checkpoint 2's notification, checkpoint 1's moves the base back to 1, whose files the
# coordinator discarded when 2 subsumed it (KB-SNAP-9; Flink keeps the highest completed id).
class _LateNotificationBecomesTheBase(RocksDBKeyedStateBackend):
    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if checkpoint_id in self._uploaded:
            self._base_uploads = self._uploaded[checkpoint_id]


# 141. RocksDB: a native savepoint's uploads are remembered as a checkpoint's, so once the savepoint is notified
# complete the next checkpoint references its files, in the savepoint's directory, which the user may delete
# (KB-SNAP-9, SP-4; Flink's incremental snapshots build only on checkpoints they uploaded).
class _SavepointBecomesTheBase(RocksDBKeyedStateBackend):
    def _native_writer(self, *args: Any) -> Any:
        *rest, _incremental = args
        return super()._native_writer(*rest, True)


# 142. Changelog: a savepoint is taken for a materialization, the wrapped backend's full snapshot holding every change
# so far, and the log up to it is never uploaded; but the checkpoints after it still build on the last
# materialization, and restore without the changes made between that and the savepoint (CL-5).
class _SavepointTakenForAMaterialization(ChangelogKeyedStateBackend):
    def snapshot(self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, options: Any = None) -> Any:
        options = options or CheckpointOptions()
        task = super().snapshot(checkpoint_id, timestamp_ms, stream_factory, options)
        if options.snapshot_type is not SnapshotType.CHECKPOINT:
            self._writer.skip_to(self._writer.last_sequence)
        return task


# 143. The snapshot keeps each key's and namespace's length in 16 bits, as 121 does a value's: a key or namespace of
# 64 KiB or more comes back cut to its length modulo 65,536, another key or none (KS-3). The suite's keys and
# namespaces were a few bytes long.
class _SixteenBitKeyLengths(_RewritesSnapshotEntries):
    def entry_rewriter(self, names: list[str]) -> Callable[[list[Any]], list[Any]]:
        return lambda entry: [entry[0], _cut(entry[1]), _cut(entry[2]), entry[3]]


# 144. The snapshot numbers each entry's state in 8 bits, as a compact native format might (Flink's full snapshots
# use 16): in a backend of more than 255 states, state 256's entries come back as state 0's (KB-RESTORE-1). The
# suite's backends held a few states each.
class _EightBitStateIndexes(_RewritesSnapshotEntries):
    def entry_rewriter(self, names: list[str]) -> Callable[[list[Any]], list[Any]]:
        return lambda entry: [entry[0] & 0xFF, *entry[1:]]


# 145-147. State names: the suite's were short ASCII words. A restore splitting a state's name at ":" (as a format
# writing "name:kind" and parsing it back would) restores "a:b" as "a" (KB-RESTORE-1); a backend encoding names as
# ASCII fails on "ünï" (KS-2); a snapshot leaving out states whose name is falsy loses the state named ""
# (KB-RESTORE-1).
class _NamesSplitAtColon(HeapKeyedStateBackend):
    def _restored_store(self, meta: Any, source: str) -> Any:
        return super()._restored_store(dataclasses.replace(meta, name=meta.name.split(":")[0]), source)


class _NamesAsciiOnly(HeapKeyedStateBackend):
    def create_store(self, meta: Any) -> Any:
        meta.name.encode("ascii")
        return super().create_store(meta)


class _UnnamedStateNotSnapshotted(HeapKeyedStateBackend):
    def snapshot(self, *args: Any, **kwargs: Any) -> Any:
        stores = self._stores
        self._stores = {name: store for name, store in stores.items() if name}
        try:
            return super().snapshot(*args, **kwargs)
        finally:
            self._stores = stores


# 148-149. Operator state names, as 145 and 147 for keyed state: a restore splitting names at ":" gives "a:b"'s
# elements to "a", and a snapshot leaving out the states named "" loses them (OS-7).
class _OperatorNamesSplitAtColon(DefaultOperatorStateBackend):
    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self._restored = {name.split(":")[0]: restored for name, restored in self._restored.items()}


class _OperatorUnnamedNotSnapshotted(DefaultOperatorStateBackend):
    def captured_states(self) -> Any:
        return {name: captured for name, captured in super().captured_states().items() if name}


# 150. Timer services named as files may be: every character but letters, digits, "_" and "-" becomes "_", as a
# backend keeping a file or column family per service might do, so "a:b", "a/b" and "../a" share one service and
# fire into whichever asked last (TM-9). The suite's services were named by plain words.
class _TimerServiceNamesSanitized(HeapKeyedStateBackend):
    def get_timer_service(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return super().get_timer_service(re.sub(r"[^A-Za-z0-9_-]", "_", name), *args, **kwargs)


# 151. Serializer configurations written with texts' lengths in 16 bits (a port of Java's `writeUTF`, which Flink used
# for serializer snapshots until Avro schemas of more than 64 KiB broke it): a restored state's serializer snapshot
# comes back with its long texts cut, and the serializer that wrote it finds it incompatible (SER-2).
def _cut_text(value: Any) -> Any:
    if isinstance(value, str):
        return _cut(value.encode()).decode(errors="ignore")
    if isinstance(value, dict):
        return {k: _cut_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_text(v) for v in value]
    return value


def _with_texts_cut(snapshot: SerializerSnapshot) -> SerializerSnapshot:
    return SerializerSnapshot(snapshot.serializer_id, snapshot.version, _cut_text(dict(snapshot.config)))


class _SerializerConfigTextsIn16Bits(HeapKeyedStateBackend):
    def _restored_store(self, meta: Any, source: str) -> Any:
        meta = dataclasses.replace(
            meta,
            namespace_serializer=_with_texts_cut(meta.namespace_serializer),
            serializers={role: _with_texts_cut(s) for role, s in meta.serializers.items()},
        )
        return super()._restored_store(meta, source)


# 152. The same for operator state: restored operator states' serializer snapshots come back with long texts cut
# (SER-2).
class _OperatorSerializerConfigTextsIn16Bits(DefaultOperatorStateBackend):
    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self._restored = {
            name: (mode, _with_texts_cut(snapshot), elements)
            for name, (mode, snapshot, elements) in self._restored.items()
        }


# 153. Timers counted in 16 bits per key and namespace in the snapshot (a timer store of its own, sized for a few
# timers per key): a key with 70,000 timers (a timer per element) restores 4,464 of them (TM-6). The suite's keys had
# a few timers each.
class _SixteenBitTimerCounts(_RewritesSnapshotEntries):
    def entry_rewriter(self, names: list[str]) -> Callable[[list[Any]], list[Any]]:
        timers = {i for i, name in enumerate(names) if name.startswith("_timer_state/")}
        return lambda entry: _collection_counted_in_16_bits(entry) if entry[0] in timers else entry


# 154. The snapshot counts each key's namespaces in 16 bits (a nested key -> namespace layout): a key in more than
# 65,535 namespaces (a window per element) comes back with the count's remainder (KB-RESTORE-1). The suite's keys were
# in a few namespaces each.
class _SixteenBitNamespaceCounts(_RewritesSnapshotEntries):
    def block_rewriter(self) -> Callable[[list[list[Any]]], list[list[Any]]]:
        def cut(entries: list[list[Any]]) -> list[list[Any]]:
            totals = collections.Counter((entry[0], entry[1]) for entry in entries)
            taken: collections.Counter[tuple[Any, Any]] = collections.Counter()
            kept = []
            for entry in entries:
                taken[(entry[0], entry[1])] += 1
                if taken[(entry[0], entry[1])] <= totals[(entry[0], entry[1])] & 0xFFFF:
                    kept.append(entry)
            return kept

        return cut


# 155. A key's group taken as murmur(hash) & (max parallelism - 1), which is the modulo only when max parallelism is a
# power of two, as Flink's default always is (KG-5) and as every max parallelism the suite used was: at 1000 keys land
# in other key groups, and after a rescale in no subtask's (KG-2).
class _MaskedKeyGroups(HeapKeyedStateBackend):
    def key_group_of(self, key: Any) -> int:
        return flink_murmur_hash(self.key_serializer.key_hash(key)) & (self.number_of_key_groups - 1)


# 156. Timer states registered without a descriptor's check of the name (as a backend keeping timers apart from user
# state would): a service named with a lone surrogate is taken, and every snapshot then fails writing its name into
# the IF-3 header, which UTF-8 cannot encode (TM-9). The suite's odd names were all encodable.
class _UncheckedTimerNames(TimerQueue):
    def descriptor(self, state_name: str) -> Any:
        descriptor = super().descriptor("unchecked")
        object.__setattr__(descriptor, "name", state_name)
        return descriptor


# 157. Each string key's bytes and key group remembered by its stable `key_hash` (the one the spec gives; Python's
# `hash()` is salted): "BB", sharing Java's `String.hashCode` with "Aa", reads and writes "Aa"'s entries (KS-3). The
# suite's string keys never shared a hash (long keys 0 and -1 do, and caught the same cache over every key type).
class _KeyCacheByHash(HeapKeyedStateBackend):
    def set_current_key(self, key: Any) -> None:
        if type(key) is not str or self._closed:
            super().set_current_key(key)
            return
        cache: dict[int, tuple[bytes, int]] = self.__dict__.setdefault("_by_hash", {})
        key_hash = self.key_serializer.key_hash(key)
        if key_hash not in cache:
            super().set_current_key(key)
            cache[key_hash] = (self._current_key_bytes, self._current_key_group)
        self._current_key = key
        self._current_key_bytes, self._current_key_group = cache[key_hash]


# 158. The same for map user keys: each user key's bytes remembered by its `key_hash`, so user keys "Aa" and "BB"
# share one entry (KS-3).
class _BytesByHash:
    def __init__(self, inner: Any) -> None:
        self.inner, self.cache = inner, {}

    def serialize(self, value: Any) -> bytes:
        key_hash = self.inner.key_hash(value)
        if key_hash not in self.cache:
            self.cache[key_hash] = self.inner.serialize(value)
        return self.cache[key_hash]  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _UserKeysByHash(MapStateImpl):
    def _cached(self) -> None:
        if not isinstance(self._kser, _BytesByHash):
            self._kser = _BytesByHash(self._kser)

    def get(self, user_key: Any) -> Any:
        self._cached()
        return super().get(user_key)

    def contains(self, user_key: Any) -> bool:
        self._cached()
        return super().contains(user_key)

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        self._cached()
        super().put_all(entries)

    def remove(self, user_key: Any) -> None:
        self._cached()
        super().remove(user_key)


# 159. Expiry taken as last access + TTL in 64-bit two's complement, as Java's `long` sum (before Flink's saturating
# `TtlUtils.getExpirationTimestamp`) and a numpy int64 sweep compute it: under a TTL near Long.MAX_VALUE, a user's
# "never expire", every entry expires at once (TTL-1). The suite's TTLs were 10 ms to 2e9 ms.
class _WrappingExpiry(TtlPolicy):
    def expired(self, stored: bytes) -> bool:
        if self.ttl is None:
            return False
        (last_access,) = struct.unpack_from(">q", stored)
        expiry = (last_access + self.ttl.ttl_ms + 2**63) % 2**64 - 2**63
        return bool(expiry <= self.clock.now_ms())


# 160. The reference's cache of recent keys' bytes and key groups extended to float keys: a dict finds -0.0 under 0.0,
# so -0.0 takes 0.0's bytes and entries (KS-3). The suite's equal-but-distinct keys held no two floats of one value.
class _FloatKeysCached(HeapKeyedStateBackend):
    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self._key_caches[float] = {}


# 161. An operator snapshot keeps each element's length in 16 bits (a 32-bit field, as IF-6 says, holding the length
# modulo 65,536): an element of 64 KiB or more, a split, union or broadcast one, comes back cut (OS-7). The suite's
# operator elements were a few bytes long.
class _OperatorElementLengthsIn16Bits(_RewritesOperatorElements):
    def element_rewriter(self) -> Callable[[Any], bytes]:
        return _cut


# 162. Timers kept by a key group of their own, taken from the key hash's low bits (as a backend keeping timers in a
# key-group-partitioned queue apart from its state might, Flink's `HeapPriorityQueueSet`): the same as Flink's modulo
# at a max parallelism that is a power of two, another group (or none of the subtask's) at others (KG-2, TM-7).
# State used the right key groups, and every timer test ran at max parallelism 128.
class _MaskedTimerKeyGroups(TimerQueue):
    def add(self, namespace: Any, time: int) -> None:
        backend = self._backend
        right = backend.current_key_group
        key_hash = backend.key_serializer.key_hash(self._current_key())
        backend._current_key_group = flink_murmur_hash(key_hash) & (backend.number_of_key_groups - 1)
        try:
            super().add(namespace, time)
        finally:
            backend._current_key_group = right


# 163. Broadcast entries found through the user key serializer's stable `key_hash` alone, as an open-addressing
# table that compares hashes and never the keys' bytes might: string user keys "Aa" and "BB" (one Java
# `String.hashCode`) share one entry (OS-3, KS-3). The 11th hunt's test of keys of one hash covered keyed state and
# map state; broadcast user keys were drawn from msgpack keys, whose murmur hashes rarely meet.
class _BroadcastByHash(BroadcastStateImpl):
    def _slot(self, key_bytes: bytes) -> bytes:
        serializer = self._state.serializer.fields[0]
        return int(serializer.key_hash(serializer.deserialize(key_bytes))).to_bytes(4, "big", signed=True)

    def _key_bytes(self, key: Any) -> bytes:
        return self._slot(super()._key_bytes(key))

    def _element_key(self, element: bytes) -> bytes:
        return self._slot(super()._element_key(element))


# 164. Timers told apart by their key's stable `key_hash` (with the namespace's bytes and the time), as a timer set
# indexed by hash and never comparing keys might: the timers of string keys "Aa" and "BB" at one namespace and time
# are one timer, so one key's never fires and deleting it deletes the other's (TM-3, TM-4). The timer tests' keys
# were short words of "a" to "h", none sharing a hash.
class _TimersByKeyHash(TimerQueue):
    def _identity(self, key: Any, namespace: Any, time: int) -> Any:
        return (self._backend.key_serializer.key_hash(key), self._namespaces.serialize(namespace), time)


# 165. Each value state's namespace bytes remembered by the namespace serializer's stable `key_hash`, as a cache of
# window namespaces might: long namespaces whose two halves XOR alike (one `Long.hashCode`) share one entry (KS-3).
# The keys-of-one-hash test wrote in the void namespace only.
class _NamespacesByHash(ValueStateImpl):
    def set_current_namespace(self, namespace: Any) -> None:
        if namespace is None:
            super().set_current_namespace(namespace)
            return
        cache = self.__dict__.setdefault("_namespaces_by_hash", {})
        key_hash = self.namespace_serializer.key_hash(namespace)
        if key_hash not in cache:
            super().set_current_namespace(namespace)
            cache[key_hash] = self._ns_bytes
        self._ns_bytes = cache[key_hash]


# 166. An entry's age taken as the distance between the clock and its last access, `abs(now - last) >= ttl`: the
# same while the clock only moves forward, but after a restore on a machine whose clock is behind the writer's by
# more than the TTL, every entry is expired at once (TTL-1). The suite's clocks never went back.
class _AgeAsDistance(TtlPolicy):
    def expired(self, stored: bytes) -> bool:
        if self.ttl is None:
            return False
        (last_access,) = struct.unpack_from(">q", stored)
        return abs(self.clock.now_ms() - last_access) >= self.ttl.ttl_ms


# 167. The key-group range check compares with the range's end alone: a key of a key group below the start is taken,
# and its entry lands at a negative index of the per-key-group tables, another key group's (KB-KEY-2). Flink's check
# is what finds a job's non-deterministic keys. The test probed one key above subtask 0's range, which starts at 0.
class _RangeCheckedAtTheEndOnly(AcceptsKeysOutsideRange):
    def set_current_key(self, key: Any) -> None:
        if key is not None and not self._closed and self.key_group_of(key) < self.key_group_range.start:
            super().set_current_key(key)
        else:
            HeapKeyedStateBackend.set_current_key(self, key)

    def key_group_outside(self, key: Any) -> int:
        return self.key_group_of(key)


# 168. An operator snapshot cancelled (by `close()` or its task's `cancel()`) while its asynchronous part writes
# returns without discarding the stream it began, whose file stays in the checkpoint directory (OS-9, KB-SNAP-6).
# The suite cancelled operator snapshots only before their `run()` started, and keyed ones only by `close()`.
class _KeptStream(DelegatingStream):
    def discard(self) -> None:
        pass


class _CancelledKeepsStream(DefaultOperatorStateBackend):
    def snapshot(self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, options: Any = None) -> Any:
        return super().snapshot(checkpoint_id, timestamp_ms, WrappingStreamFactory(stream_factory, _KeptStream))


# 169-170. The changelog backend logs neither a value state's `update(None)` (which clears it, KS-VALUE-3) nor a list
# state's `add_all`: live state is right, and a restore replaying the log brings back the cleared value and loses the
# added elements (CL-4). The suite's changelog steps and its model tier never called either between two checkpoints.
class _NoneUpdateNotLogged(LoggingValueState):
    def update(self, value: Any) -> None:
        if value is None:
            self.delegate.update(None)
        else:
            super().update(value)


class _AddAllNotLogged(LoggingListState):
    def add_all(self, values: Any) -> None:
        self.delegate.add_all(list(values))


def _with_logging_state(state: type[LoggingState]) -> type[ChangelogKeyedStateBackend]:
    """The changelog keyed backend, with `state` in place of the logging state class it subclasses."""
    replaced = state.__bases__[0]

    class Keyed(ChangelogKeyedStateBackend):
        def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
            made = super().get_or_create_state(descriptor, namespace_serializer)
            if type(made) is replaced:
                made.__class__ = state
            return made

    return Keyed


# 171. The changelog backend keeps no track of its snapshot tasks: `close()` cancels only what the wrapped backend
# runs, a materialization, so a snapshot that materializes nothing (any after the first, with Flink's 10-minute
# interval) still uploads its log segment and returns a handle after `close()` (KB-SNAP-6). The suite closed
# backends only around their first snapshots.
class _UntrackedSnapshots(ChangelogKeyedStateBackend):
    def snapshot(self, *args: Any, **kwargs: Any) -> Any:
        task = super().snapshot(*args, **kwargs)
        self._pending.discard(task)
        return task


# 172. The changelog writer resets for an aborted checkpoint even when a later snapshot's synchronous part already
# built on the aborted checkpoint's log segment: the segment is dropped and its changes queued again, after the later
# snapshot captured the changes past it, so that snapshot holds neither (CL-5). The suite never called a checkpoint
# while another was in flight.
class _ResettingWriter(StateChangelogWriter):
    def reset(self, checkpoint_id: int) -> None:
        self._latest_captured = False
        super().reset(checkpoint_id)


class _ResetsCapturedUpload(ChangelogKeyedStateBackend):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._writer.__class__ = _ResettingWriter


# 173. The msgpack default serializer as msgpack's `packb` is called plainly: a tuple is written as an array, which
# reads back as a list (unequal to the tuple), and a map keyed by tuples not at all, so the savepoint holding one
# does not restore (SER-10). The reference's own default did this until the fifteenth hunt, and the spec-only example
# too; the suite wrote only plain data under the default.
class _TupleTakingMsgpack(MsgpackSerializer):
    def serialize(self, value: Any) -> bytes:
        return bytes(msgpack.packb(value, use_bin_type=True))


_DEFAULTED_ROLES = (
    "serializer",
    "element_serializer",
    "user_key_serializer",
    "user_value_serializer",
    "accumulator_serializer",
)


# 174. The msgpack default serializer reads with msgpack's own default `strict_map_key=True`: a map keyed by ints,
# bytes or None is written, and its restore fails (SER-9, IF-1). The suite's plain data had maps keyed by text only.
class _StrictMapKeysMsgpack(MsgpackSerializer):
    def deserialize(self, data: bytes) -> Any:
        return msgpack.unpackb(data, raw=False)


def _with_default_serializer(serializer: TypeSerializer[Any]) -> type[HeapKeyedStateBackend]:
    """The heap backend, with `serializer` in every role a state descriptor leaves out."""

    class Keyed(HeapKeyedStateBackend):
        def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
            fields = dataclasses.fields(descriptor)
            left_out = [f.name for f in fields if f.name in _DEFAULTED_ROLES and getattr(descriptor, f.name) is None]
            given = dataclasses.replace(descriptor, **dict.fromkeys(left_out, serializer))
            return super().get_or_create_state(given, namespace_serializer)

    return Keyed


# 175. A backend keeping state objects (tests/object_backends.py) copies an object a pending snapshot captured with
# `copy.copy` when it hands it out: an application changing the copy at depth (a list inside a value) changes the
# snapshot's object too (KB-SNAP-3). Flink's `CopyOnWriteStateMap` copies with the serializer's `copy`, which is deep.
class _ShallowCopyingHolder(HoldingSerializer):
    def copy(self, value: Any) -> Any:
        return copy.copy(value)


class _CopiesShallow(ObjectKeyedStateBackend):
    holding_serializer = _ShallowCopyingHolder


# 176. The same backend copies what a map's `get` hands out but not what its iteration (`items()`, `values()`) does:
# a user value read by iterating after `snapshot()` returned, changed in place and put back, changes the snapshot's
# object (KB-SNAP-3). The suite changed map values read by `get` only.
class _IteratesUncopied(MapStateImpl):
    def items(self) -> Any:
        raw = self._live_items()
        return ((self._kser.deserialize(k), v.value if type(v) is Held else self._vser.deserialize(v)) for k, v in raw)


class _MapIterationUncopied(ObjectKeyedStateBackend):
    def _create_state(self, *args: Any) -> Any:
        state = super()._create_state(*args)
        if type(state) is MapStateImpl and not state._ttl_enabled:
            state.__class__ = _IteratesUncopied
        return state


# 177. The same backend stops copying what it hands out once any snapshot finishes, as if it were the only one pending
# (Flink's `CopyOnWriteStateMap.releaseSnapshot` keeps the highest version still pending): with two snapshots pending,
# an object changed in place after the later one finished changes the earlier one's (KB-SNAP-5, KB-SNAP-3). Broken
# backend 77 makes the same mistake for the tables, which writes of new objects reveal; the suite changed no object in
# place while two snapshots were pending.
class _ReleasesEverySnapshot(ObjectStateTable):
    def release(self, version: int) -> None:
        self.pending = ()


class _CopiesUntilAnyDone(ObjectKeyedStateBackend):
    table_class = _ReleasesEverySnapshot


# 178. The same backend's operator state copies each list element with `copy.copy` in the snapshot's synchronous part:
# an element read after `snapshot()` returned and changed at depth changes the snapshot's copy (OS-10). Flink's
# `PartitionableListState.deepCopy` copies each element with the serializer's `copy`.
class _ShallowOperatorCopy(ObjectOperatorStateBackend):
    copy_element = staticmethod(copy.copy)


# 179. The same backend's asynchronous part writes its stream without closing it on an error: a value its serializer
# refuses (SER-10), met only there, leaves the partly written file behind, which nothing references or deletes (Flink
# closes the streams of a failed asynchronous part through its `CloseableRegistry`, and the file system stream
# deletes its file).
class _RefusedSnapshotKeepsStream(ObjectKeyedStateBackend):
    def write_snapshot(
        self, stream_factory: Any, header: Any, key_group_range: KeyGroupRange, blocks: Any, cancelled: Any
    ) -> Any:
        out = stream_factory.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE)
        offsets = write_key_groups(out, header, key_group_range, blocks, cancelled)
        return KeyGroupsStateHandle(key_group_range, offsets, out.close_and_get_handle(), CANONICAL_FORMAT)


# 180. The handles are checked when the backend is created (every entry validated, FMT-15), but the restored entries
# are loaded only when the job first registers a state, to keep memory free until then; a snapshot taken before that
# writes the restored state from the checkpoint's files, as KB-RESTORE-3 asks it to hold it. A job that registers
# its state on its first element, after a checkpoint since the restore completed and the checkpoint it was restored
# from was subsumed and deleted, fails to read it (KB-RESTORE-6). Every suite test read the restored state while the
# checkpoint was still there.
class _RestoresOnRegistration(HeapKeyedStateBackend):
    def __init__(self, params: Any) -> None:
        HeapKeyedStateBackend(params).dispose()  # the check: every handle read and validated, then let go
        super().__init__(dataclasses.replace(params, restore_state=()))
        self._deferred = tuple(params.restore_state)

    def _restored_now(self) -> None:
        if self._deferred:
            handles, self._deferred = self._deferred, ()
            self.restore_handles(handles)

    def get_or_create_state(self, *args: Any, **kwargs: Any) -> Any:
        self._restored_now()
        return super().get_or_create_state(*args, **kwargs)

    def get_partitioned_state(self, *args: Any, **kwargs: Any) -> Any:
        self._restored_now()
        return super().get_partitioned_state(*args, **kwargs)

    def get_timer_service(self, *args: Any, **kwargs: Any) -> Any:
        self._restored_now()
        return super().get_timer_service(*args, **kwargs)

    def get_keys(self, *args: Any) -> Any:
        self._restored_now()
        return super().get_keys(*args)

    def get_keys_and_namespaces(self, *args: Any) -> Any:
        self._restored_now()
        return super().get_keys_and_namespaces(*args)

    def num_state_entries(self, *args: Any) -> Any:
        self._restored_now()
        return super().num_state_entries(*args)

    def snapshot(self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, *args: Any) -> Any:
        if not self._deferred:
            return super().snapshot(checkpoint_id, timestamp_ms, stream_factory, *args)
        params = dataclasses.replace(self._params, restore_state=self._deferred)
        reader = HeapKeyedStateBackend(params)  # the restored state, read from the checkpoint for this snapshot only
        task = reader.snapshot(checkpoint_id, timestamp_ms, stream_factory, *args)
        self._pending.add(task)
        return task


# 181. The same for operator state: restored elements are read from the checkpoint when their state is first
# registered, and a snapshot before that carries them over from the checkpoint's files (OS-11).
class _RestoresOperatorStateOnRegistration(DefaultOperatorStateBackend):
    def __init__(self, params: OperatorBackendParameters) -> None:
        super().__init__(dataclasses.replace(params, restore_state=()))
        self._deferred = tuple(params.restore_state)

    def _restored_now(self) -> None:
        if self._deferred:
            handles, self._deferred = self._deferred, ()
            reader = DefaultOperatorStateBackend(dataclasses.replace(self._params, restore_state=handles))
            self._restored = reader._restored

    def _register(self, *args: Any) -> Any:
        self._restored_now()
        return super()._register(*args)

    @property
    def registered_state_names(self) -> set[str]:
        self._restored_now()
        return super().registered_state_names

    def captured_states(self) -> dict[str, Any]:
        if not self._deferred:
            return super().captured_states()
        reader = DefaultOperatorStateBackend(dataclasses.replace(self._params, restore_state=self._deferred))
        return {**reader.captured_states(), **super().captured_states()}


# 182. The same for timers alone: restored timers are loaded from the checkpoint when their service is first asked
# for, and a snapshot before that takes them from the checkpoint's files. An operator asking for its timer service
# on its first element after the checkpoint it was restored from was deleted loses every restored timer
# (KB-RESTORE-6, TM-6).
class _RestoresTimersOnRequest(HeapKeyedStateBackend):
    def __init__(self, params: Any) -> None:
        super().__init__(params)
        timers = [n for n in self._stores if n.startswith("_timer_state/")]
        self._deferred_timers = tuple(params.restore_state) if timers else ()
        for name in timers:
            del self._stores[name]

    def _timer_stores(self) -> dict[str, Any]:
        """The restored timers' stores, read from the checkpoint again."""
        reader = HeapKeyedStateBackend(self._params)
        return {n: store for n, store in reader._stores.items() if n.startswith("_timer_state/")}

    def get_timer_service(self, *args: Any, **kwargs: Any) -> Any:
        if self._deferred_timers:
            self._deferred_timers = ()
            for name, store in self._timer_stores().items():
                self._stores.setdefault(name, store)
        return super().get_timer_service(*args, **kwargs)

    def snapshot(self, *args: Any, **kwargs: Any) -> Any:
        if not self._deferred_timers:
            return super().snapshot(*args, **kwargs)
        restored = {n: s for n, s in self._timer_stores().items() if n not in self._stores}
        self._stores.update(restored)
        try:
            return super().snapshot(*args, **kwargs)
        finally:
            for name in restored:
                del self._stores[name]


# 183. A backend whose checkpoints are incremental by key group (tests/incremental_backends.py) marks a key group
# changed on the writes that add or replace entries but not on those that delete them (`clear()`, a map's
# `remove()`, a list set empty); its timers are tracked whole. A checkpoint after a completed one references the
# base's file for a key group whose only change was a deletion, so the deleted entries come back on restore
# (KB-SNAP-8). Every incremental test wrote or replaced entries only; only timer tests deleted between checkpoints.
class _TracksAddingWritesOnly(StateTable):
    def __init__(self, meta: Any, key_group_range: KeyGroupRange, changed: set[int]) -> None:
        super().__init__(meta, key_group_range)
        self._changed = changed

    def put(self, key_group: int, key: Any, value: bytes) -> None:
        self._changed.add(key_group)
        super().put(key_group, key, value)

    def set_list(self, key_group: int, key: Any, elements: list[bytes]) -> None:
        if elements:
            self._changed.add(key_group)
        super().set_list(key_group, key, elements)

    def append_list(self, key_group: int, key: Any, elements: list[bytes]) -> None:
        self._changed.add(key_group)
        super().append_list(key_group, key, elements)

    def map_put(self, key_group: int, key: Any, entries: Any) -> None:
        self._changed.add(key_group)
        super().map_put(key_group, key, entries)

    def put_payload(self, key_group: int, key: Any, payload: Any) -> None:
        self._changed.add(key_group)
        super().put_payload(key_group, key, payload)


class _DeletionsUntracked(ByKeyGroupKeyedStateBackend):
    def create_store(self, meta: Any) -> StateTable:
        if meta.name.startswith("_timer_state/"):
            return super().create_store(meta)
        return _TracksAddingWritesOnly(meta, self.key_group_range, self._changed)


# 184. The same backend references the base's file for every key group it does not write again, and it writes only
# key groups holding entries: a key group emptied since the base (its every key cleared) keeps the base's file,
# and its entries come back on restore (KB-SNAP-8).
class _KeepsEmptiedKeyGroups(ByKeyGroupKeyedStateBackend):
    def reused_key_groups(self, base: Any, changed: set[int], occupied: set[int]) -> dict[int, tuple[str, int]]:
        return {kg: base.key_groups[kg] for kg in base.key_groups if kg not in changed & occupied}


# 185. The same backend writes each checkpoint's file of changed key groups to the checkpoint's exclusive scope, as
# a canonical snapshot is written, and later checkpoints reference it. When the coordinator subsumes that
# checkpoint it deletes its directory, and every later checkpoint referencing the file no longer restores
# (KB-SNAP-8, CS-3). No test deleted a subsumed checkpoint's exclusive directory.
class _DeltaInExclusiveScope(ByKeyGroupKeyedStateBackend):
    delta_scope = CheckpointedStateScope.EXCLUSIVE


# 186. The same backend writes its key-group map (`meta_state`) as one msgpack object per row and reads it with
# msgpack's streaming `Unpacker` until the stream ends, which stops without a word at an incomplete last object.
# A cut map restores the key groups of its whole rows and loses the rest: a smaller state instead of an error
# (FMT-8). Its size and checksum had given any cut away (FMT-12); the suite had cut canonical streams only.
class _KeyGroupMapReadToTheEnd(ByKeyGroupKeyedStateBackend):
    @staticmethod
    def pack_key_group_map(rows: list[list[Any]]) -> bytes:
        return b"".join(msgpack.packb(row, use_bin_type=True) for row in rows)

    @staticmethod
    def unpack_key_group_map(handle: Any) -> Any:
        with handle.meta_state.open() as f:
            return list(msgpack.Unpacker(f, raw=False))


# 187. The same backend, when a checkpoint completes, counts no key group changed since it: true when the
# notification comes before the next checkpoint, but Flink's notifications are asynchronous. Heard after the next
# checkpoint's synchronous part, it drops the changes that checkpoint holds; should that one then abort, the one
# after builds on the completed checkpoint without them (KB-SNAP-9). Every test notified at once.
class _CompletionForgetsLaterChanges(ByKeyGroupKeyedStateBackend):
    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        base = self._base
        super().notify_checkpoint_complete(checkpoint_id)
        if self._base is not base:
            self._epochs = []


# 188. A heap backend whose asynchronous part looks for a cancel between key groups and deletes its stream when it
# sees one, as the reference did until the eighteenth hunt: a cancel that comes while the last stream closes (every
# key group written) makes `run()` raise, and the closed file stays, referenced by nothing (KB-SNAP-6). The suite
# cancelled only before `run()` or at a stream's first write.
def _keeping_what_it_wrote(base: type[Any]) -> type[Any]:
    """`base`, whose snapshot tasks delete nothing they wrote when cancelled or failed."""

    class Keeping(base):  # type: ignore[valid-type,misc]
        def snapshot(self, *args: Any, **kwargs: Any) -> Any:
            task = super().snapshot(*args, **kwargs)
            task._discard = None
            return task

    return Keeping


_CancelLookedForBetweenKeyGroups = _keeping_what_it_wrote(HeapKeyedStateBackend)


# 189. The same, with a task that returns the handle written when the cancel came after the writing: `cancel()` said
# True, the checkpoint is declined, and its file stays (KB-SNAP-6). The spec-only example did this until the
# eighteenth hunt.
class _LateCancelReturnsHandle(AsyncSnapshotTask[Any]):
    def run(self) -> Any:
        try:
            if self._cancelled.is_set():
                raise SnapshotCancelledError("snapshot cancelled before its asynchronous part ran")
            return self._write(self._cancelled.is_set)
        finally:
            self._done.set()
            self._on_done(self)


class _ReturnsHandleAfterLateCancel(HeapKeyedStateBackend):
    def snapshot(self, *args: Any, **kwargs: Any) -> Any:
        task = super().snapshot(*args, **kwargs)
        task.__class__ = _LateCancelReturnsHandle
        return task


# 190. Bug 188 in the operator state backend: an operator snapshot cancelled once its stream closed keeps the file
# (OS-9, KB-SNAP-6).
_OperatorCancelLookedForWhileWriting = _keeping_what_it_wrote(DefaultOperatorStateBackend)


# 191. The changelog backend keeps a log segment uploaded for a checkpoint whose asynchronous part is then cancelled
# (by `close()`, or its task's `cancel()` while it materializes): the next checkpoint builds on the materialization
# and references the segment no more, and after a `close()` none follows; the file stays (KB-SNAP-6). Flink deletes a
# declined checkpoint's uploads that no later checkpoint uses.
_CancelledUploadKept = _keeping_what_it_wrote(ChangelogKeyedStateBackend)


# 192. The by-key-group backend deletes what a snapshot wrote when the snapshot is cancelled, but not when the storage
# fails one of its streams: the file of changed key groups, in the shared scope, stays when the key-group map after it
# cannot be written, referenced by no checkpoint and deleted by nobody (KB-SNAP-1). The suite failed every stream of
# a snapshot at once, never a later one after an earlier was written.
class _FailedSnapshotKeepsUploads(ByKeyGroupKeyedStateBackend):
    def snapshot(self, *args: Any, **kwargs: Any) -> Any:
        task = super().snapshot(*args, **kwargs)
        discard = task._discard
        task._discard = lambda: discard() if task.cancelled and discard is not None else None
        return task


# 193. RocksDB: an instance's directory is numbered by a counter of the process instead of named with a fresh UUID.
# Unique within a process, so two live instances never share one; but a worker restarted after a crash numbers its
# instances from 1 again, and its first backend opens the database the crashed worker's first one left in the local
# directory: the dead instance's entries come back in a backend that restored nothing (KB-LOCAL-3). Every test
# before ran its backends in one process.
_INSTANCE_NUMBERS = itertools.count(1)


class _InstanceDirNumberedPerProcess(RocksDBKeyedStateBackend):
    def _instance_dir_name(self, params: Any) -> str:
        rng = params.key_group_range
        return f"rocksdb-{params.job_id}-{params.operator_id}-{rng.start}-{rng.end}-{next(_INSTANCE_NUMBERS)}"


# 194-208: one bug each against a requirement no broken backend stood for yet (2026-11-29). The suite rejected each at
# once, naming that requirement; they pin those requirements' tests.
# 194. `update(None)` on value state does nothing, keeping the old value, where it clears (KS-VALUE-3).
class _ValueUpdateNoneIgnored(ValueStateImpl):
    def update(self, value: Any) -> None:
        if value is not None:
            super().update(value)


# 195. List state's `get()` of nothing returns an empty list, where it returns None (KS-LIST-1).
class _ListGetOfNothingEmpty(ListStateImpl):
    def get(self) -> Any:
        got = super().get()
        return [] if got is None else got


# 196. `put_all({})` stores a map without user keys: an entry for the key that holds nothing (KS-MAP-3).
class _MapPutAllOfNothingStores(MapStateImpl):
    def put_all(self, entries: Mapping[Any, Any]) -> None:
        if entries:
            super().put_all(entries)
        else:
            key, key_group = self._entry_key()
            self.store.map_put(key_group, key, {})


# 197. The map iterator's `remove()` may be called again for the same entry, where the second call raises (KS-MAP-5).
class _RemovableTwice(MapIterator):
    def remove(self) -> None:
        if self._last is None:
            raise IllegalStateError("remove() called before next()")
        self._remove(self._last[0])


class _MapIteratorRemovesTwice(MapStateImpl):
    def iterator(self) -> MapIterator:
        key, key_group = self._entry_key()
        return _RemovableTwice(self.items(), lambda user_key: self._remove_from(key_group, key, user_key))


# 198. Aggregating state's `get()` of nothing is the result of a fresh accumulator, where it is None (KS-AGG-1).
class _AggregateOfNothingIsResult(AggregatingStateImpl):
    def get(self) -> Any:
        accumulator = self._accumulator()
        return self._fn.get_result(self._fn.create_accumulator() if accumulator is None else accumulator)


# 199. `notify_checkpoint_aborted` of a checkpoint the backend never snapshotted raises (KB-NOTIFY-1).
class _AbortOfUnknownCheckpointRaises(HeapKeyedStateBackend):
    def __init__(self, params: Any) -> None:
        self._snapshotted: set[int] = set()
        super().__init__(params)

    def snapshot(self, checkpoint_id: int, *args: Any, **kwargs: Any) -> Any:
        self._snapshotted.add(checkpoint_id)
        return super().snapshot(checkpoint_id, *args, **kwargs)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        if checkpoint_id not in self._snapshotted:
            raise KeyError(f"no snapshot {checkpoint_id} to abort")


# 200. A second `close()` raises, where it does nothing (KB-LIFE-1).
class _ClosesOnce(HeapKeyedStateBackend):
    def close(self) -> None:
        if self._closed:
            raise IllegalStateError("the backend is closed already")
        super().close()

    def dispose(self) -> None:
        if not self._closed:
            super().close()


# 201. Merging reducing state drops the target namespace's own value: the sources' reduction replaces it (KS-MERGE-3,
# "values spread over target and sources").
class _MergeDropsTarget(ReducingStateImpl):
    def merge_namespaces(self, target: Any, sources: Any) -> None:
        values = [self._ser.deserialize(p) for p in self._pop_single(sources)]
        if values:
            self.set_current_namespace(target)
            current = values[0]
            for value in values[1:]:
                current = self._reduce(current, value)
            self._put_bytes(self._ser.serialize(current))


# 202. `get_keys` of a closed backend iterates nothing instead of raising BackendClosedError (KB-LIFE-2).
class _KeysOfClosedEmpty(HeapKeyedStateBackend):
    def get_keys(self, state_name: str, namespace: Any) -> Any:
        return iter(()) if self._closed else super().get_keys(state_name, namespace)


# 203. `get_partitioned_state` selects the namespace only the first time a state is asked for: the state object is
# cached, and later calls for another namespace return it still in the first one (KB-STATE-1).
class _PartitionedStateKeepsFirstNamespace(HeapKeyedStateBackend):
    def get_partitioned_state(self, namespace: Any, descriptor: Any, namespace_serializer: Any = None) -> Any:
        state = self.get_or_create_state(descriptor, namespace_serializer)
        if state._ns_bytes is None:
            state.set_current_namespace(namespace)
        return state


# 204. A timer service's watermark and processing time start at 0, not at Long.MIN_VALUE: a timer for a negative time
# fires before the first advance reaches it, and a new or restored service reports time 0 (TM-8).
class _TimeFromZero(KeyedTimerService):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._watermark = 0
        self._processing_time = 0


# 205. A None namespace is taken for the void namespace instead of being rejected: state written under None lands in
# the void namespace's entry (KS-NS-1).
class _NoneNamespaceIsVoid(HeapKeyedStateBackend):
    def _create_state(self, descriptor: Any, store: Any, ns: Any, serializers: Any) -> Any:
        state = super()._create_state(descriptor, store, ns, serializers)

        def set_current_namespace(namespace: Any) -> None:
            state._ns_bytes = state.namespace_serializer.serialize(VOID_NAMESPACE if namespace is None else namespace)

        state.set_current_namespace = set_current_namespace
        return state


# 206. `number_of_key_groups` reports the size of the backend's key-group range, not the max parallelism (KB-1).
class _KeyGroupsCountedInRange(HeapKeyedStateBackend):
    @property
    def number_of_key_groups(self) -> int:
        return self.key_group_range.end - self.key_group_range.start + 1


# 207. Timer queues are kept as map states under the backend's own names (`_timers/<service>/event`), not Flink's
# `_timer_state/event_<service>`: its canonical savepoints restore their timers into itself only; another backend
# finds two map states of the user's and no timers (IF-8).
class _TimersUnderOwnNames(KeyedTimerService):
    def __init__(self, backend: Any, name: str, namespace_serializer: Any, triggerable: Any) -> None:
        super().__init__(backend, name, namespace_serializer, triggerable)
        self._event = self.queue_class(backend, f"_timers/{name}/event", namespace_serializer)
        self._processing = self.queue_class(backend, f"_timers/{name}/processing", namespace_serializer)


# 208. The canonical header says `"ttl": false` for every state, while the values keep their last-access timestamps:
# a restore reads each timestamp as the start of the value's bytes (IF-5). The contract tier names it as TTL-6
# (restore keeps the timestamps); only the model tier's TTL test, which cites IF-5 too, names IF-5.
class _TtlFlagDropped(HeapKeyedStateBackend):
    def capture_states(self) -> tuple[CanonicalHeader, list[list[dict[Any, Any]]]]:
        header, captured = super().capture_states()
        states = tuple(dataclasses.replace(meta, ttl=False) for meta in header.states)
        return dataclasses.replace(header, states=states), captured


# 209. Restored entries are used as they are read, unchecked: a key in another key group than its own, a value its
# serializer cannot read, an entry given twice, all restore as state (FMT-15).
class _ChecksNothing(EntryValidator):
    def check(self, key_group: int, index: int, key: bytes, namespace: bytes, payload: Any) -> None:
        return None


class _RestoresEntriesUnchecked(HeapKeyedStateBackend):
    entry_validator = _ChecksNothing


# 210. A savepoint of the changelog backend is a changelog handle like a checkpoint's, not the wrapped backend's own
# snapshot (CL-7): no backend without changelog restores it as a savepoint, and it references the log's shared files.
class _SavepointLogged(ChangelogKeyedStateBackend):
    def snapshot(
        self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, options: CheckpointOptions | None = None
    ) -> Any:
        if options is not None and options.snapshot_type is not SnapshotType.CHECKPOINT:
            options = dataclasses.replace(options, snapshot_type=SnapshotType.CHECKPOINT)
        return super().snapshot(checkpoint_id, timestamp_ms, stream_factory, *([options] if options else []))


# 211. Failed materializations are tolerated without bound: the count of failures in a row is reset before each
# materialization, so checkpoints go on referencing an ever older materialization and an ever longer log (CL-8).
class _MaterializationFailuresUnbounded(ChangelogKeyedStateBackend):
    def _materialize(self, materialization: Any, required: bool) -> Any:
        self.failed_materializations = 0
        return super()._materialize(materialization, required)


# 212. A None key is accepted as the current key, its state stored under msgpack's nil in the range's first key
# group (KB-KEY-1).
class _NoneKeyAccepted(HeapKeyedStateBackend):
    def set_current_key(self, key: Any) -> None:
        if key is not None:
            super().set_current_key(key)
            return
        self._current_key = None
        self._current_key_bytes, self._current_key_group = b"\xc0", self.key_group_range.start


# 213. A timer's time outside Java's long range wraps into it, as a Java long would overflow, instead of being
# rejected: a timer registered for 2**63 fires at once, at Long.MIN_VALUE (TM-1).
class _WrappingTimerQueue(TimerQueue):
    def add(self, namespace: Any, time: Any) -> None:
        if isinstance(time, int) and not isinstance(time, bool):
            time = (time + 2**63) % 2**64 - 2**63
        super().add(namespace, time)


class _TimesWrapped(KeyedTimerService):
    queue_class = _WrappingTimerQueue


# 214. Canonical snapshots are labelled `native:hashmap`, and this backend restores that label as canonical: its
# savepoints restore into itself only, every other backend refusing them as another backend's native format (IF-7).
class _CanonicalLabelledNative(HeapKeyedStateBackend):
    def snapshot(self, *args: Any) -> Any:
        task = super().snapshot(*args)
        write = task._write

        def labelled(cancelled: Callable[[], bool]) -> Any:
            handle = write(cancelled)
            return None if handle is None else dataclasses.replace(handle, snapshot_format="native:hashmap")

        task._write = labelled
        return task

    def restore_handles(self, handles: Any) -> None:
        def relabelled(handle: Any) -> Any:
            if getattr(handle, "snapshot_format", "") == "native:hashmap":
                return dataclasses.replace(handle, snapshot_format=CANONICAL_FORMAT)
            return handle

        super().restore_handles([relabelled(h) for h in handles])


# 215. A canonical header's serializer roles beyond its state's kind are dropped on restore instead of refused (a list
# state with a `value` serializer beside its `element` one restores), so a header no writer may write reads (IF-3).
class _RolesBeyondTheKindReader(CanonicalReader):
    def _unpack(self, data: bytes) -> Any:
        plain = super()._unpack(data)
        if isinstance(plain, dict) and isinstance(plain.get("states"), list):
            for state in plain["states"]:
                kind, serializers = state.get("kind"), state.get("serializers")
                if isinstance(serializers, dict) and kind in {k.value for k in SERIALIZER_ROLES}:
                    roles = SERIALIZER_ROLES[StateKind(kind)]
                    state["serializers"] = {r: v for r, v in serializers.items() if r in roles}
        return plain


class _RolesBeyondTheKindDropped(HeapKeyedStateBackend):
    canonical_reader = _RolesBeyondTheKindReader


# 216. Timers are written into checkpoints but left out of savepoints: a job restored from a savepoint has lost every
# timer, and the windows they would have closed never fire (TM-10).
class _SavepointsWithoutTimers(HeapKeyedStateBackend):
    _savepoint = False

    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: Any,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> Any:
        self._savepoint = options.snapshot_type is not SnapshotType.CHECKPOINT
        try:
            return super().snapshot(checkpoint_id, timestamp_ms, stream_factory, options)
        finally:
            self._savepoint = False

    def capture_states(self) -> tuple[CanonicalHeader, list[list[dict[Any, Any]]]]:
        header, captured = super().capture_states()
        if not self._savepoint:
            return header, captured
        kept = [i for i, meta in enumerate(header.states) if not meta.name.startswith("_timer_state/")]
        return dataclasses.replace(header, states=tuple(header.states[i] for i in kept)), [captured[i] for i in kept]


# 217. Removing an absent user key of map state raises KeyError, as `del` of a dict does, instead of changing nothing
# (KS-MAP-1).
class _MapRemoveAbsentRaises(MapStateImpl):
    def remove(self, key: Any) -> None:
        if not self.contains(key):
            raise KeyError(key)
        super().remove(key)


# 218. The changelog writer never moves its upload mark: every checkpoint uploads again every change since the
# materialization, so the segments a checkpoint references repeat changes, breaking CL-3's strictly ascending
# sequence numbers. The reference's segment reader refuses the checkpoint; the suite names the restore's CL-4 and
# CL-5.
class _UploadsEveryChangeAgain(StateChangelogWriter):
    def upload(self, pending: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            before, uploaded_to = list(self._appended), self._uploaded_to
        result = super().upload(pending, *args, **kwargs)
        with self._lock:
            self._appended = [c for c in before if c.sequence <= pending.up_to] + self._appended
            self._uploaded_to = uploaded_to
        return result


def _changelog_writing_with(writer: type[StateChangelogWriter]) -> type[ChangelogKeyedStateBackend]:
    """The changelog keyed backend with its log written by `writer` instead of StateChangelogWriter."""

    class Keyed(ChangelogKeyedStateBackend):
        def __init__(self, delegate_factory: Any, params: Any, settings: ChangelogSettings) -> None:
            super().__init__(delegate_factory, params, settings)
            self._writer = writer(params.key_serializer.snapshot_configuration(), self._writer._inline)

    return Keyed


def _declaring_off(
    off: tuple[str, ...], keyed: type[HeapKeyedStateBackend], name: str | None = None
) -> Callable[[Mapping[str, object]], HashMapStateBackend]:
    """The heap backend declaring the capabilities `off` unsupported, with `keyed` as its keyed backend (and no
    operator state backend, refused with UnsupportedFeatureError, when `operator_state` is among them)."""
    declared = dataclasses.replace(HashMapStateBackend.capabilities, **dict.fromkeys(off, False))

    class Declaring(HashMapStateBackend):
        capabilities = declared

        def create_keyed_state_backend(self, params: Any) -> Any:
            return keyed(params)

        def create_operator_state_backend(self, params: Any) -> Any:
            if "operator_state" in off:
                raise UnsupportedFeatureError("this backend has no operator state")
            return super().create_operator_state_backend(params)

    if name is not None:
        Declaring.name = name
    return lambda config: Declaring()


# 219. A backend declaring timers unsupported whose `get_timer_service` raises NotImplementedError, not the documented
# UnsupportedFeatureError: a job cannot tell a backend without timers from a broken one (TM-11).
class _TimersNotImplemented(HeapKeyedStateBackend):
    def get_timer_service(self, name: str, namespace_serializer: Any, triggerable: Any) -> Any:
        raise NotImplementedError("timers")


# 220. A backend declaring canonical savepoints unsupported whose canonical savepoint raises NotImplementedError, not
# the documented UnsupportedFeatureError (SB-3).
class _CanonicalSavepointsNotImplemented(HeapKeyedStateBackend):
    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: Any,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> Any:
        if options.snapshot_type is SnapshotType.SAVEPOINT_CANONICAL:
            raise NotImplementedError("canonical savepoints")
        return super().snapshot(checkpoint_id, timestamp_ms, stream_factory, options)


# 221. The changelog writer uploads its log segments into the checkpoint's exclusive scope: a later checkpoint
# references a segment in the directory of an earlier one, deleted when that one is subsumed (KB-SNAP-8, CS-3; CL-2
# puts segments in the shared scope).
class _ExclusiveScope:
    def __init__(self, factory: Any) -> None:
        self._factory = factory

    def create_checkpoint_state_output_stream(self, scope: CheckpointedStateScope) -> Any:
        return self._factory.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE)


class _SegmentsInExclusiveScope(StateChangelogWriter):
    def upload(self, pending: Any, factory: Any, checkpoint_id: int) -> Any:
        return super().upload(pending, _ExclusiveScope(factory), checkpoint_id)


# 222. List elements go into the canonical stream last first and are read back reversed again: the backend restores
# its own savepoints, while every other backend reads each list backwards (SP-1; IF-4 says elements are in list order).
def _backwards(payload: Any) -> Any:
    return list(reversed(payload.data if type(payload) is Cell else payload))


class _ListsBackwardsReader(CanonicalReader):
    def key_group(self, key_group: int) -> Any:
        lists = [meta.kind is StateKind.LIST for meta in self.header.states]
        return [[i, k, ns, _backwards(p) if lists[i] else p] for i, k, ns, p in super().key_group(key_group)]


class _CanonicalListsBackwards(HeapKeyedStateBackend):
    canonical_reader = _ListsBackwardsReader

    def capture_states(self) -> Any:
        header, captured = super().capture_states()
        for index, meta in enumerate(header.states):
            if meta.kind is StateKind.LIST:
                captured[index] = [{entry: _backwards(p) for entry, p in group.items()} for group in captured[index]]
        return header, captured


# 223. The msgpack default falls back to `pickle.loads` for bytes msgpack cannot read ("state an older version of the
# backend pickled"), and the backend checks restored values with its own default: a savepoint holding a pickle where
# a value is runs that pickle's code on restore (SER-8). The suite gave the default plain data and tuples to write,
# never bytes to read that it had not written.
class _PickleFallbackMsgpack(MsgpackSerializer):
    def deserialize(self, data: bytes) -> Any:
        try:
            return super().deserialize(data)
        except ValueError:
            return pickle.loads(data)  # the bug this backend stands for


_PICKLE_FALLBACK = _PickleFallbackMsgpack()


class _ValuesCheckedWithOwnDefault(EntryValidator):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._values = [
            {role: _PICKLE_FALLBACK if isinstance(s, MsgpackSerializer) else s for role, s in roles.items()}
            for roles in self._values
        ]


class _MsgpackDefaultUnpickles(_with_default_serializer(_PICKLE_FALLBACK)):  # type: ignore[misc]
    entry_validator = _ValuesCheckedWithOwnDefault


# 224. A RocksDB backend downloads a native handle's files to `<working dir>/<name>` by the names the handle gives
# them, as RocksDB's SST names, before anything checks a name: a checkpoint naming a file `../../x` or by an absolute
# path makes the restore write outside the backend's local directory (KB-LOCAL-1; a zip-slip). The suite restored
# only handles the backend had written itself.
class _DownloadsByHandleName(RocksDBKeyedStateBackend):
    def _open_from_files(self, handle: Any) -> None:
        self._db_dir.mkdir(parents=True, exist_ok=True)
        for name, stream in {**handle.shared_state, **handle.private_state}.items():
            with stream.open() as source, (self._db_dir / name).open("wb") as sink:
                shutil.copyfileobj(source, sink)
        super()._open_from_files(handle)


# 225. The msgpack default refuses tuples, as SER-10 names them, and converts whatever else msgpack cannot write as
# json's `default=str` idiom does: a set to a list, a datetime, a decimal or a user's object to its `str`. State
# holding one reads back as another value, in this backend and in any other (SER-10). The suite wrote only tuples as
# values that are not plain data.
def _converted(value: Any) -> Any:
    if isinstance(value, tuple):
        raise TypeError(f"{type(value).__name__} is not plain data")
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    try:
        return _as_plain(value)
    except TypeError:
        return str(value)  # the bug this backend stands for


class _ConvertingMsgpack(MsgpackSerializer):
    def serialize(self, value: Any) -> bytes:
        return bytes(msgpack.packb(value, use_bin_type=True, strict_types=True, default=_converted))


# 226. The msgpack default tells msgpack `unicode_errors="surrogatepass"` on both sides, so text holding a lone
# surrogate (what `os.fsdecode` makes of a file name's undecodable bytes) is written as a str that is no UTF-8: it
# reads back in this backend and in no other (SER-10, IF-1). The suite wrote no such text.
class _SurrogatePassingMsgpack(MsgpackSerializer):
    def serialize(self, value: Any) -> bytes:
        try:
            return super().serialize(value)
        except UnicodeEncodeError:
            return bytes(msgpack.packb(value, use_bin_type=True, default=_as_plain, unicode_errors="surrogatepass"))

    def deserialize(self, data: bytes) -> Any:
        try:
            return super().deserialize(data)
        except ValueError:
            value = msgpack.unpackb(data, raw=False, strict_map_key=False, unicode_errors="surrogatepass")
            if _holds_extension(value):
                raise
            return value


# 227. Reducing state stores the added value before the reduce function runs, then the result over it, as Flink's
# heap backend once did (`keyedMap.put(key, value)`, then `reduceFunction.reduce(currentValue, value)`, before its
# `StateTable.transform`): a function that raises for one bad input leaves that input as the state's value, and what
# every earlier add built is gone (KS-RED-1). The suite's reduce functions never raised.
class _StoresBeforeReducing(ReducingStateImpl):
    def add(self, value: Any) -> None:
        if value is None:
            super().add(value)
            return
        current = self.get()
        self._put_bytes(self._ser.serialize(value))  # the bug this backend stands for
        if current is not None:
            self._put_bytes(self._ser.serialize(self._reduce(current, value)))


# 228. Operator list state's `add_all` hands a generator of serialized elements to `list.extend`, which appends each
# as it comes: an element the serializer refuses raises after the ones before it were appended (OS-5), and a caller
# that retries the batch holds them twice. The spec-only example did this until the twenty-sixth hunt; the suite
# checked a batch holding None, which is refused before anything is serialized.
class _AppendsUntilRefused(OperatorListStateImpl):
    def add_all(self, values: Any) -> None:
        self._backend._check_open()
        values = list(values)
        if any(v is None for v in values):
            raise InvalidStateValueError("operator list state does not accept None elements (OS-5)")
        self._state.elements.extend(self._state.serializer.serialize(v) for v in values)  # the bug


# 229. `get_keys` and `get_keys_and_namespaces` of a restored state refuse it until the application registers it
# again: the backend knows a state's namespace serializer only from its registration, and passes over the one its
# snapshot names (KB-KEYS-1). The spec-only example did this (for states with a namespace) until the twenty-eighth
# hunt; Flink's backends register a restored state's meta information while restoring.
class _RestoredUnlistedUntilRegistered(HeapKeyedStateBackend):
    def _namespace_serializer(self, state_name: str) -> Any:
        if state_name not in self._namespace_serializers:
            raise KeyError(f"state {state_name!r}: register it to read its namespaces")
        return super()._namespace_serializer(state_name)


# 230. A map's `contains` asks `get(...) is not None`, the Python idiom for "present": a user value of None, which
# the msgpack default writes and Flink's map state stores, is taken for absent (KS-MAP-1).
class _ContainsByValue(MapStateImpl):
    def contains(self, user_key: Any) -> bool:
        return self.get(user_key) is not None


# 231. Broadcast state takes `put(key, None)` for a removal, as a Python dict-backed cache often does: the entry a
# user stored with a None value is gone, live and in the snapshot (OS-3).
class _BroadcastNoneRemoves(BroadcastStateImpl):
    def put(self, key: Any, value: Any) -> None:
        if value is None:
            self.remove(key)
        else:
            super().put(key, value)


# 232. A backend keeping a file per state finds a state's file by the state's name, and the file system takes one
# name for another: macOS's by default (case-insensitive, normalization-insensitive, case-preserving) holds "A" in
# the file of "a" and "é" decomposed in the file of "é" composed, so two states share one (KS-2). Linux's file
# systems tell the names apart, so the bug shows on the author's Mac, not in Linux CI; a registry of states that
# finds names as that file system does stands for it here.
class _NamesAsOnMacOS(dict[str, Any]):
    @staticmethod
    def _folded(name: str) -> str:
        return unicodedata.normalize("NFD", name).casefold()

    def _on_disk(self, name: Any) -> Any:
        folded = self._folded(name) if isinstance(name, str) else name
        return next((k for k in self if self._folded(k) == folded), name)

    def __getitem__(self, name: str) -> Any:
        return super().__getitem__(self._on_disk(name))

    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(self._on_disk(name), value)

    def __contains__(self, name: object) -> bool:
        return super().__contains__(self._on_disk(name))

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(self._on_disk(name), default)


class _StateFilesOnMacOS(HeapKeyedStateBackend):
    @property  # type: ignore[override]
    def _stores(self) -> Any:
        return self.__dict__["_stores_on_disk"]

    @_stores.setter
    def _stores(self, stores: Any) -> None:
        self.__dict__["_stores_on_disk"] = _NamesAsOnMacOS(stores)


# 233. Restore checks that each key decodes and hashes into its key group, and each namespace and map user key
# decodes, but not that their bytes are those the serializer writes for what they decode to: a key written in a
# msgpack format the serializer never picks (an int as int64) is restored where no lookup finds it, and listed by
# `get_keys` all the same (FMT-15). The reference did this until the twenty-eighth hunt.
class _AnyEncodingRestored(EntryValidator):
    def _in_its_encoding(self, *args: Any) -> None:
        pass


class _RestoresKeysInAnyEncoding(HeapKeyedStateBackend):
    entry_validator = _AnyEncodingRestored


# 234. Restored broadcast entries are decoded, but their user keys are not checked to be in the bytes the key
# serializer writes: a user key written in a msgpack format the serializer never picks (1 as int64) is listed by
# `items()` and never found by `get` (FMT-15). The reference did this until the twenty-eighth hunt.
class _BroadcastKeysInAnyEncodingBackend(DefaultOperatorStateBackend):
    def __init__(self, params: OperatorBackendParameters) -> None:
        from statecert.reference import operator_state

        original = operator_state.check_elements
        operator_state.check_elements = lambda name, mode, *rest: original(name, OperatorStateMode.SPLIT, *rest)
        try:
            super().__init__(params)
        finally:
            operator_state.check_elements = original


# 235. TTL: `add_all` appends by writing the whole list back, every element stamped with the write's time, as a
# backend that stores a list as one value easily does: elements that should expire live on after every batch (a
# bigger state instead of expiry). Flink's `TtlListState.addAll` stamps only the values it is given (TTL-4); the
# suite's TTL tests and model added one element at a time until the twenty-ninth hunt, and certified it.
class _AddAllRestampsTtl(ListStateImpl):
    def add_all(self, values: Any) -> None:
        encoded = self._encode_all(values)
        if not encoded:
            return
        key, key_group = self._entry_key()
        if self._ttl.enabled:
            stored = self.store.get_list(key_group, key) or []
            kept = [self._ttl.wrap(self._ttl.payload(e)) for e in stored if not self._ttl.expired(e)]
            self.store.set_list(key_group, key, kept + encoded)
        else:
            self.store.append_list(key_group, key, encoded)


# 236. TTL: `put_all` rewrites the whole map, every entry stamped with the write's time: entries the batch did not
# touch live on (TTL-4; Flink's `TtlMapState.putAll` stamps only the entries it puts).
class _PutAllRestampsTtl(MapStateImpl):
    def put(self, user_key: Any, value: Any) -> None:
        MapStateImpl.put_all(self, {user_key: value})  # one entry at a time, as the reference

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        if entries and self._ttl.enabled:
            key, key_group = self._entry_key()
            stored = self.store.map_items(key_group, key)
            kept = {u: self._ttl.wrap(self._ttl.payload(e)) for u, e in stored if not self._ttl.expired(e)}
            kept.update({self._kser.serialize(k): self._ttl.wrap(self._vser.serialize(v)) for k, v in entries.items()})
            self.store.map_put(key_group, key, kept)
        else:
            super().put_all(entries)


# 237. One current namespace for the whole backend, as it has one current key: `set_current_namespace` on any
# windowed state selects the namespace of every windowed state, so a state written after another state's namespace
# was selected writes into that one (KS-NS-2). The suite selected a namespace right before each access, or used one
# namespaced state at a time, until the twenty-ninth hunt, and certified it.
class _NamespaceSharedByStates(HeapKeyedStateBackend):
    def _create_state(self, descriptor: Any, store: Any, ns: Any, serializers: Any) -> Any:
        state = super()._create_state(descriptor, store, ns, serializers)
        if state.namespace_serializer.serializer_id != "void-namespace":
            del state.__dict__["_ns_bytes"]
            state.__class__ = _shared_namespace_state(type(state))
        return state


@functools.cache
def _shared_namespace_state(state_class: type[Any]) -> type[Any]:
    """`state_class` reading and selecting its namespace on the backend (`_current_namespace`)."""

    def get(state: Any) -> bytes | None:
        namespace = getattr(state._backend, "_current_namespace", None)
        return None if namespace is None else bytes(state.namespace_serializer.serialize(namespace))

    def select(state: Any, namespace_bytes: bytes | None) -> None:
        state._backend._current_namespace = (
            None if namespace_bytes is None else state.namespace_serializer.deserialize(namespace_bytes)
        )

    return type(f"Shared{state_class.__name__}", (state_class,), {"_ns_bytes": property(get, select)})


# 238. Every `get_or_create_state` and `get_partitioned_state` call hands out a new value-state handle that caches
# the value it last read or wrote for its (key, namespace), to spare a lookup and a deserialization, and forgets it
# only on its own writes: a handle serves the value another handle of the same state has since overwritten
# (KB-STATE-1; Flink's backends keep one state object per name). The suite used one handle per state, or fresh
# handles that had cached nothing, until the twenty-ninth hunt, and certified it.
class _CachingValueHandle:
    def __init__(self, state: ValueStateImpl) -> None:
        self._state = state
        self._cached_at: Any = None
        self._cached: Any = None

    def _at(self) -> Any:
        return self._state._backend.current_key_bytes_and_group(), self._state._ns_bytes

    def value(self) -> Any:
        if self._state._ttl_enabled:
            return self._state.value()
        at = self._at()
        if at == self._cached_at:
            return copy.deepcopy(self._cached)
        value = self._state.value()
        if self._state._get_bytes() is not None:  # a stored value, not the default
            self._cached_at, self._cached = at, copy.deepcopy(value)
        return value

    def update(self, value: Any) -> None:
        self._state.update(value)
        self._cached_at = None
        if value is not None and not self._state._ttl_enabled:
            self._cached_at, self._cached = self._at(), self._state.value()

    def clear(self) -> None:
        self._state.clear()
        self._cached_at = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)


class _CachingHandles(HeapKeyedStateBackend):
    def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
        state = super().get_or_create_state(descriptor, namespace_serializer)
        return _CachingValueHandle(state) if isinstance(state, ValueStateImpl) else state


# 239. Union list state restored from the subtask's own old stream only: the one handle that also carries split or
# broadcast state is taken for the subtask's whole old state, and the union elements the other handles bring are
# dropped, as an assignment that hands every subtask its own handles back at unchanged parallelism gives them (the
# reference's did until OS-2 said "on every restore"): after a restart from a checkpoint each subtask reads only
# what it wrote itself (OS-2; Flink's RoundRobinOperatorStateRepartitioner broadcasts union state at unchanged
# parallelism too).
class _UnionFromOwnStream(DefaultOperatorStateBackend):
    def __init__(self, params: OperatorBackendParameters) -> None:
        super().__init__(params)
        own = [
            h
            for h in params.restore_state
            if any(part.mode is not OperatorStateMode.UNION for part in h.states.values())
        ]
        if len(own) != 1:
            return
        for name, (mode, _, elements) in read_operator_states(own[0]).items():
            if mode is OperatorStateMode.UNION:
                self._restored[name] = (mode, self._restored[name][1], elements)


def _by_key_group(keyed: type[ByKeyGroupKeyedStateBackend]) -> Any:
    backend_class = type("Broken", (ByKeyGroupStateBackend,), {"create_keyed_state_backend": lambda _, p: keyed(p)})
    return lambda config: backend_class()


def _with_timer_service(service: type[KeyedTimerService]) -> type[HeapKeyedStateBackend]:
    class Keyed(HeapKeyedStateBackend):
        def __init__(self, params: Any) -> None:
            super().__init__(params)
            self.timer_service_class = service

    return Keyed


class _TruncatesEarly(ChangelogKeyedStateBackend):
    """Truncates the log as soon as a materialization is written, before a checkpoint holding it completes."""

    def _materialize(self, materialization: Any, required: bool) -> Any:
        done = super()._materialize(materialization, required)
        if done is not None:
            self._writer.truncate(done.sequence)
        return done


def _reversed_changes(handles: Any, params: Any) -> Any:
    states, changes = read_changes(handles, params)
    return states, list(reversed(changes))


class _ReplaysOutOfOrder(ChangelogKeyedStateBackend):
    """Replays the log newest change first."""

    change_reader = staticmethod(_reversed_changes)


class _IgnoresLog(ChangelogKeyedStateBackend):
    """Restores the materialization and drops the log."""

    change_reader = staticmethod(lambda handles, params: ({}, []))


class _CleanupNotLogged(ChangelogKeyedStateBackend):
    """Logs TTL reads only where they refresh (ON_READ_AND_WRITE), not where they clean up an expired entry they
    may return (RETURN_EXPIRED_IF_NOT_CLEANED_UP): after a restore, the entry is back and returned again."""

    def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
        state = super().get_or_create_state(descriptor, namespace_serializer)
        ttl = descriptor.ttl
        state._touches = ttl is not None and ttl.update_type is TtlUpdateType.ON_READ_AND_WRITE
        return state


_FLINK_DEFAULTS = ChangelogSettings()
"""Materialization every 10 minutes: in a test, only a changelog backend's first checkpoint materializes."""


def _changelog_factory(
    keyed: type[ChangelogKeyedStateBackend] = ChangelogKeyedStateBackend,
    wrapped: Any = None,
    settings: ChangelogSettings = ChangelogSettings(materialize_interval_ms=0),  # noqa: B008 - frozen
) -> Any:
    """The changelog backend with `keyed` as its keyed backend, wrapping the heap backend or the backend the
    factory `wrapped` makes; by default it materializes whenever no materialization runs (with Flink's default of
    10 minutes, `ChangelogSettings()`, only a backend's first checkpoint materializes in a test)."""

    class Broken(ChangelogStateBackend):
        def create_keyed_state_backend(self, params: Any) -> Any:
            return keyed(self.delegate, params, self.settings)

    def factory(config: Any) -> Any:
        delegate = HashMapStateBackend() if wrapped is None else wrapped(config)
        return Broken(delegate, settings)

    return factory


def _rocksdb_factory(keyed: type[RocksDBKeyedStateBackend]) -> Any:
    class Broken(EmbeddedRocksDBStateBackend):
        def create_keyed_state_backend(self, params: Any) -> Any:
            return keyed(params, self.settings, self.max_value_bytes)

    return lambda config: Broken(incremental=True).configure(config)


shared_snapshot = _factory(_with_table(_SharingTable))
stale_restore = _StaleRestoreBackend
off_by_one_rescale = _factory(_OffByOne)
clear_not_snapshotted = _factory(_with_table(_TombstoneTable))
map_iteration_skips = _factory(_with_table(_SkippingTable))
list_accepts_null = _factory(_with_state(ListStateImpl, _NullList))
default_by_reference = _factory(_with_state(ValueStateImpl, _SharedDefault))
loader_ignores_application = lambda config: _IgnoresApplication()  # noqa: E731
salted_key_groups = _factory(_SaltedHash)
merge_keeps_sources = _factory(_MergeKeeps)
ttl_ignores_clock = _factory(_TtlIgnoresClock)
union_from_first_handle = _factory(operator=_UnionFromFirst)
close_keeps_snapshots = _factory(_CloseKeepsSnapshots)
empty_snapshot_is_something = _factory(_EmptyIsSomething)
ignores_foreign_handles = _factory(_IgnoresForeign)
no_serializer_check = _factory(_NoSerializerCheck)
reducing_null_clears = _factory(_with_state(ReducingStateImpl, _NullReduceClears))
map_remove_leaves_entry = _factory(_with_table(_EmptyMapTable))
ttl_reset_on_restore = _factory(_TtlResetOnRestore)
ttl_refresh_value_only = _factory(_RefreshValueOnly)
ttl_contains_expired = _factory(_with_state(MapStateImpl, _ContainsExpired))
ttl_little_endian = _factory(_with_ttl_policy(_LittleEndianTtl))
serializer_first_role_only = _factory(_FirstRoleOnly)
key_serializer_unchecked_on_rescale = _factory(_KeySerializerUncheckedOnRescale)
single_source_merge_keeps = _factory(_with_state(ListStateImpl, _SingleSourceMergeKeeps))
default_shallow_copy = _factory(_with_state(ValueStateImpl, _ShallowDefault))
reduce_arguments_swapped = _factory(_with_state(ReducingStateImpl, _SwappedReduce))
key_cache_conflates = _factory(_KeyCacheConflates)
entry_count_after_restore = _factory(_CountsTwiceAfterRestore)
map_iteration_pages = _factory(_with_table(_PagedMapTable))
short_key_group_offsets = _factory(_ShortOffsets)
close_cancels_only_unstarted = _factory(_CancelsOnlyUnstarted)
rocksdb_deletes_retained_shared = _rocksdb_factory(_DeletesOldShared)
rocksdb_aborted_is_base = _rocksdb_factory(_AbortedIsBase)
rocksdb_savepoint_reuses_shared = _rocksdb_factory(_SavepointReusesShared)
rocksdb_map_clear_too_wide = _rocksdb_factory(_WideMapClear)
rocksdb_failed_restore_keeps_files = _rocksdb_factory(_KeepsFailedRestoreFiles)
timers_fire_newest_first = _factory(_with_timer_queue(_NewestFirstQueue))
timers_not_deduplicated = _factory(_with_timer_queue(_DuplicatingQueue))
timers_fire_with_stale_key = _factory(_with_timer_queue(_StaleKeyQueue))
timers_forget_restored = _factory(_with_timer_queue(_ForgetsRestoredQueue))
timers_delete_keeps_due = _factory(_with_timer_queue(_DeleteKeepsDueQueue))
timers_past_wait_for_later_time = _factory(_with_timer_service(_FiresOnlyWhenTimeMoves))
broadcast_keys_by_equality = _factory(operator=_with_broadcast(_BroadcastByEquality))
operator_update_appends = _factory(operator=_with_operator_list(_UpdateAppends))
operator_restore_skips_element_check = _factory(operator=_SkipsElementCheckBackend)
value_serializer_not_reconfigured = _factory(_ValueSerializerNotReconfigured)
operator_serializer_not_reconfigured = _factory(operator=_OperatorSerializerNotReconfigured)
operator_backend_open_after_close = _factory(operator=_OperatorBackendOpenAfterClose)
changelog_truncates_early = _changelog_factory(_TruncatesEarly)
changelog_replays_out_of_order = _changelog_factory(_ReplaysOutOfOrder)
changelog_ignores_log = _changelog_factory(_IgnoresLog)
changelog_cleanup_not_logged = _changelog_factory(_CleanupNotLogged)
changelog_empty_accumulator_logged = _changelog_factory(
    wrapped=_factory(_with_state(AggregatingStateImpl, _EmptyAccumulatorInternal))
)
changelog_without_internal_accessors = _changelog_factory(
    wrapped=_factory(_with_state(AggregatingStateImpl, _NoInternalAccessors))
)
ttl_folds_expired = _factory(_with_state(ReducingStateImpl, _FoldsExpired))
key_serializer_not_reconfigured = _factory(_KeySerializerNotReconfigured)
key_serializer_migration_accepted = _factory(_KeySerializerMigrationAccepted)
ttl_merge_refreshes = _factory(_with_state(ListStateImpl, _MergeRefreshesTtl))
ttl_list_returns_expired_twice = _factory(_with_state(ListStateImpl, _ListKeepsReturnedExpired))
key_outside_range_stored = _factory(_StoresOutsideRange)
list_add_all_empty_entry = _factory(_with_state(ListStateImpl, _AddAllStoresEmpty))
map_contains_creates_entry = _factory(_with_state(MapStateImpl, _ContainsCreatesEntry))
keys_per_element = _factory(_KeysPerElement)
timer_delete_every_key = _factory(_with_timer_queue(_DeletesEveryKeysTimer))
value_equal_update_skipped = _factory(_with_state(ValueStateImpl, _SkipsEqualUpdate))
timers_list_deleted = _factory(_with_timer_queue(_ListsDeletedTimers))
value_falsy_reads_default = _factory(_with_state(ValueStateImpl, _FalsyReadsDefault))
reduce_restarts_after_falsy = _factory(_with_state(ReducingStateImpl, _RestartsAfterFalsy))
merge_drops_falsy_accumulator = _factory(_with_state(AggregatingStateImpl, _MergeDropsFalsy))
timers_namespace_blind = _factory(_with_timer_queue(_NamespaceBlindQueue))
keys_deduplicated_by_equality = _factory(_KeysDeduplicatedByEquality)
timers_by_equality = _factory(_with_timer_queue(_TimersByEquality))
restore_keeps_states_of_first_handle = _factory(_StatesOfFirstHandle)
list_walks_values_twice = _factory(_with_state(ListStateImpl, _WalksValuesTwice))
copy_on_write_until_any_done = _factory(_CopyOnWriteUntilAnyDone)
operator_snapshot_shares_lists = _factory(operator=_SharesElementLists)
ttl_stores_expiry_instants = lambda config: _NativeSavepointsOnly()  # noqa: E731
reduce_merge_folds_expired = _factory(_with_state(ReducingStateImpl, _MergeFoldsExpired))
aggregate_read_never_refreshes = _factory(_with_state(AggregatingStateImpl, _AggregateReadNeverRefreshes))
folding_state_not_migrated = _factory(_FoldingStateNotMigrated)
operator_migration_keeps_old_snapshot = _factory(operator=_OperatorMigrationKeepsOldSnapshot)
state_of_another_kind_replaces = _factory(_ReplacesStateOfAnotherKind)
operator_refusal_drops_restored = _factory(operator=_RefusalDropsRestored)
ttl_switch_unmigrated = _factory(_TtlSwitchUnmigrated)
map_iteration_keeps_returned_expired = _factory(_with_state(MapStateImpl, _MapIterationKeepsReturnedExpired))
rocksdb_dispose_removes_local_dir = _rocksdb_factory(_DisposeRemovesLocalDir)
rocksdb_full_checkpoint_incremental = _rocksdb_factory(_FullTakenIncrementally)
serializers_imported_by_name = _factory(_ImportsNamedSerializers)
snapshot_bypasses_stream_factory = _factory(_BypassesStreamFactory)
timers_fired_in_batches = _factory(_with_timer_service(_FiresDueTimersInBatches))
timers_time_set_after_firing = _factory(_with_timer_service(_SetsTimeAfterFiring))
timers_deleted_lazily = _factory(_with_timer_queue(_TombstonedTimers))
timers_of_unasked_services_dropped = _factory(_SnapshotsAskedTimersOnly)
restored_timers_duplicated = _factory(_with_timer_queue(_RestoredTimersApart))
restored_timers_unlisted = _factory(_with_timer_queue(_RestoredTimersUnlisted))
snapshot_cancel_ignored = _factory(_IgnoresCancel)
close_cancels_latest_snapshot_only = _factory(_TracksLatestSnapshot)
late_states_in_snapshot = _factory(_ListsStatesWhenWriting)
late_operator_states_in_snapshot = _factory(operator=_ListsOperatorStatesWhenWriting)
operator_update_clears_first = _factory(operator=_with_operator_list(_UpdateClearsFirst))
broadcast_registry_apart = _factory(operator=_SeparateBroadcastRegistry)
ttl_list_cleanup_leaves_empty = _factory(_with_state(ListStateImpl, _ListCleanupLeavesEmpty))
ttl_map_cleanup_leaves_empty = _factory(_with_state(MapStateImpl, _MapCleanupLeavesEmpty))
snapshot_swallows_storage_errors = _factory(_SwallowsStorageErrors)
operator_snapshot_swallows_storage_errors = _factory(operator=_OperatorSwallowsStorageErrors)
restore_skips_missing_files = _factory(_SkipsHandlesWithMissingFiles)
operator_restore_skips_missing_streams = _factory(operator=_OperatorSkipsMissingStreams)
restore_reads_without_checksum = _factory(_ReadsWithoutChecksum)
rocksdb_keeps_temp_instance_dir = _rocksdb_factory(_KeepsTempInstanceDir)
operator_restore_reads_without_checksum = _factory(operator=_OperatorReadsWithoutChecksum)
value_objects_held = _factory(_holding_objects(ValueStateImpl, _HoldsValueObjects))
accumulators_held = _factory(_holding_objects(AggregatingStateImpl, _HoldsAccumulators))
namespace_serializer_unchecked = _factory(_NamespaceSerializerUnchecked)
key_and_namespace_joined = _factory(_with_table(_JoinedKeysTable))
union_deduplicated_across_subtasks = _factory(operator=_UnionDeduplicatedAcrossSubtasks)
restore_claims_files = _factory(_ClaimsRestoredFiles)
operator_elements_held = _factory(operator=_HoldsOperatorElements)
empty_bytes_read_as_nothing = _factory(_with_state(ValueStateImpl, _EmptyBytesReadAsNothing))
payload_lengths_in_16_bits = _factory(_SixteenBitLengths)
rocksdb_keeps_instance_dir_in_working_directory = _rocksdb_factory(_KeepsInstanceDirInWorkingDirectory)
restored_state_indexes_kept = _factory(_RestoredIndexesKept)
operator_restored_offsets_kept = _factory(operator=_RestoredOffsetsKept)
accumulators_merged_in_place = _factory(_holding_objects(AggregatingStateImpl, _MergesHeldAccumulatorsInPlace))
ttl_refresh_past_copy_on_write = _factory(_with_state(ValueStateImpl, _RefreshesPastCopyOnWrite))
value_overwritten_in_place = _factory(_with_table(_OverwritesInPlaceTable))
map_put_in_place = _factory(_with_table(_MapPutsInPlaceTable))
clear_empties_in_place = _factory(_with_table(_EmptiesInPlaceTable))
map_remove_in_place = _factory(_with_table(_RemovesUserKeysInPlaceTable))
list_update_in_place = _factory(_with_table(_ReplacesElementsInPlaceTable))
task_thread_shares_buffer = _factory(_SharesBuffer)
operator_task_thread_shares_buffer = _factory(operator=_with_operator_list(_SharedBufferList, _SharesOperatorBuffer))
asynchronous_parts_share_buffer = _factory(_AsynchronousPartsShareBuffer)
operator_asynchronous_parts_share_buffer = _factory(operator=_SharesOperatorBuffer)
entry_counts_in_16_bits = _factory(_SixteenBitEntryCounts)
collection_sizes_in_16_bits = _factory(_SixteenBitCollectionSizes)
memtable_loses_the_filling_put = _factory(_with_table(_MemtableLosesTheFillingPut))
operator_offset_counts_in_16_bits = _factory(operator=_SixteenBitOffsetCounts)
late_notification_becomes_the_base = _rocksdb_factory(_LateNotificationBecomesTheBase)
savepoint_becomes_the_base = _rocksdb_factory(_SavepointBecomesTheBase)
savepoint_taken_for_a_materialization = _changelog_factory(_SavepointTakenForAMaterialization)
key_lengths_in_16_bits = _factory(_SixteenBitKeyLengths)
state_indexes_in_8_bits = _factory(_EightBitStateIndexes)
names_split_at_colon = _factory(_NamesSplitAtColon)
names_ascii_only = _factory(_NamesAsciiOnly)
unnamed_state_not_snapshotted = _factory(_UnnamedStateNotSnapshotted)
operator_names_split_at_colon = _factory(operator=_OperatorNamesSplitAtColon)
operator_unnamed_not_snapshotted = _factory(operator=_OperatorUnnamedNotSnapshotted)
timer_service_names_sanitized = _factory(_TimerServiceNamesSanitized)
serializer_config_texts_in_16_bits = _factory(_SerializerConfigTextsIn16Bits)
operator_serializer_config_texts_in_16_bits = _factory(operator=_OperatorSerializerConfigTextsIn16Bits)
timer_counts_in_16_bits = _factory(_SixteenBitTimerCounts)
namespace_counts_in_16_bits = _factory(_SixteenBitNamespaceCounts)
key_groups_by_bit_mask = _factory(_MaskedKeyGroups)
timer_names_unchecked = _factory(_with_timer_queue(_UncheckedTimerNames))
key_cache_by_hash = _factory(_KeyCacheByHash)
user_keys_by_hash = _factory(_with_state(MapStateImpl, _UserKeysByHash))
ttl_expiry_wraps = _factory(_with_ttl_policy(_WrappingExpiry))
float_keys_cached = _factory(_FloatKeysCached)
operator_element_lengths_in_16_bits = _factory(operator=_OperatorElementLengthsIn16Bits)
timer_key_groups_by_bit_mask = _factory(_with_timer_queue(_MaskedTimerKeyGroups))
broadcast_user_keys_by_hash = _factory(operator=_with_broadcast(_BroadcastByHash))
timers_by_key_hash = _factory(_with_timer_queue(_TimersByKeyHash))
namespaces_by_hash = _factory(_with_state(ValueStateImpl, _NamespacesByHash))
ttl_age_as_distance = _factory(_with_ttl_policy(_AgeAsDistance))
range_checked_at_the_end_only = _factory(_RangeCheckedAtTheEndOnly)
cancelled_operator_snapshot_keeps_stream = _factory(operator=_CancelledKeepsStream)
changelog_none_update_not_logged = _changelog_factory(_with_logging_state(_NoneUpdateNotLogged), None, _FLINK_DEFAULTS)
changelog_add_all_not_logged = _changelog_factory(_with_logging_state(_AddAllNotLogged), None, _FLINK_DEFAULTS)
changelog_snapshots_untracked = _changelog_factory(_UntrackedSnapshots, None, _FLINK_DEFAULTS)
changelog_resets_captured_upload = _changelog_factory(_ResetsCapturedUpload, None, _FLINK_DEFAULTS)
msgpack_default_takes_tuples = _factory(_with_default_serializer(_TupleTakingMsgpack()))
msgpack_default_strict_map_keys = _factory(_with_default_serializer(_StrictMapKeysMsgpack()))
object_copies_shallow = _factory(_CopiesShallow, ObjectOperatorStateBackend)
object_map_iteration_uncopied = _factory(_MapIterationUncopied, ObjectOperatorStateBackend)
object_copies_until_any_done = _factory(_CopiesUntilAnyDone, ObjectOperatorStateBackend)
object_operator_copy_shallow = _factory(ObjectKeyedStateBackend, _ShallowOperatorCopy)
object_refused_snapshot_keeps_stream = _factory(_RefusedSnapshotKeepsStream, ObjectOperatorStateBackend)
restores_on_registration = _factory(_RestoresOnRegistration)
restores_operator_state_on_registration = _factory(operator=_RestoresOperatorStateOnRegistration)
restores_timers_on_request = _factory(_RestoresTimersOnRequest)
by_key_group_deletions_untracked = _by_key_group(_DeletionsUntracked)
by_key_group_keeps_emptied_key_groups = _by_key_group(_KeepsEmptiedKeyGroups)
by_key_group_delta_in_exclusive_scope = _by_key_group(_DeltaInExclusiveScope)
by_key_group_key_group_map_read_to_the_end = _by_key_group(_KeyGroupMapReadToTheEnd)
by_key_group_completion_forgets_later_changes = _by_key_group(_CompletionForgetsLaterChanges)
cancel_looked_for_between_key_groups = _factory(_CancelLookedForBetweenKeyGroups)
returns_handle_after_late_cancel = _factory(_ReturnsHandleAfterLateCancel)
operator_cancel_looked_for_while_writing = _factory(operator=_OperatorCancelLookedForWhileWriting)
changelog_cancelled_upload_kept = _changelog_factory(_CancelledUploadKept)
by_key_group_failed_snapshot_keeps_uploads = _by_key_group(_FailedSnapshotKeepsUploads)
rocksdb_instance_dir_numbered_per_process = _rocksdb_factory(_InstanceDirNumberedPerProcess)
value_update_none_ignored = _factory(_with_state(ValueStateImpl, _ValueUpdateNoneIgnored))
list_get_of_nothing_empty = _factory(_with_state(ListStateImpl, _ListGetOfNothingEmpty))
map_put_all_of_nothing_stores = _factory(_with_state(MapStateImpl, _MapPutAllOfNothingStores))
map_iterator_removes_twice = _factory(_with_state(MapStateImpl, _MapIteratorRemovesTwice))
aggregate_of_nothing_is_result = _factory(_with_state(AggregatingStateImpl, _AggregateOfNothingIsResult))
abort_of_unknown_checkpoint_raises = _factory(_AbortOfUnknownCheckpointRaises)
closes_once = _factory(_ClosesOnce)
merge_drops_target = _factory(_with_state(ReducingStateImpl, _MergeDropsTarget))
keys_of_closed_empty = _factory(_KeysOfClosedEmpty)
partitioned_state_keeps_first_namespace = _factory(_PartitionedStateKeepsFirstNamespace)
time_from_zero = _factory(_with_timer_service(_TimeFromZero))
none_namespace_is_void = _factory(_NoneNamespaceIsVoid)
key_groups_counted_in_range = _factory(_KeyGroupsCountedInRange)
timers_under_own_names = _factory(_with_timer_service(_TimersUnderOwnNames))
ttl_flag_dropped = _factory(_TtlFlagDropped)
restore_entries_unchecked = _factory(_RestoresEntriesUnchecked)
changelog_savepoint_logged = _changelog_factory(_SavepointLogged)
changelog_materialization_failures_unbounded = _changelog_factory(_MaterializationFailuresUnbounded)
none_key_accepted = _factory(_NoneKeyAccepted)
timer_times_wrapped = _factory(_with_timer_service(_TimesWrapped))
canonical_labelled_native = _factory(_CanonicalLabelledNative)
header_roles_beyond_the_kind_dropped = _factory(_RolesBeyondTheKindDropped)
savepoints_without_timers = _factory(_SavepointsWithoutTimers)
map_remove_absent_raises = _factory(_with_state(MapStateImpl, _MapRemoveAbsentRaises))
changelog_uploads_every_change_again = _changelog_factory(_changelog_writing_with(_UploadsEveryChangeAgain))
timers_unsupported_not_implemented = _declaring_off(("timers",), _TimersNotImplemented)
canonical_savepoints_unsupported_not_implemented = _declaring_off(
    ("canonical_savepoints",), _CanonicalSavepointsNotImplemented
)
changelog_segments_in_exclusive_scope = _changelog_factory(_changelog_writing_with(_SegmentsInExclusiveScope))
canonical_lists_backwards = _factory(_CanonicalListsBackwards)
msgpack_default_unpickles = _factory(_MsgpackDefaultUnpickles)
rocksdb_downloads_by_handle_name = _rocksdb_factory(_DownloadsByHandleName)
msgpack_default_converts = _factory(_with_default_serializer(_ConvertingMsgpack()))
msgpack_default_passes_surrogates = _factory(_with_default_serializer(_SurrogatePassingMsgpack()))
reducing_stores_before_reducing = _factory(_with_state(ReducingStateImpl, _StoresBeforeReducing))
operator_appends_until_refused = _factory(operator=_with_operator_list(_AppendsUntilRefused))
restored_unlisted_until_registered = _factory(_RestoredUnlistedUntilRegistered)
map_contains_by_value = _factory(_with_state(MapStateImpl, _ContainsByValue))
broadcast_none_removes = _factory(operator=_with_broadcast(_BroadcastNoneRemoves))
state_files_on_macos = _factory(_StateFilesOnMacOS)
restores_keys_in_any_encoding = _factory(_RestoresKeysInAnyEncoding)
broadcast_keys_in_any_encoding = _factory(operator=_BroadcastKeysInAnyEncodingBackend)
ttl_list_add_all_restamps = _factory(_with_state(ListStateImpl, _AddAllRestampsTtl))
ttl_map_put_all_restamps = _factory(_with_state(MapStateImpl, _PutAllRestampsTtl))
namespace_shared_by_states = _factory(_NamespaceSharedByStates)
value_handles_cache_reads = _factory(_CachingHandles)
union_from_own_stream = _factory(operator=_UnionFromOwnStream)
configure_drops_explicit_settings = lambda config: _ConfigWins().configure(config).configure({})  # noqa: E731

CAUGHT_BY = {
    "shared_snapshot": "KB-SNAP-3",
    "stale_restore": "KB-RESTORE-1",
    "off_by_one_rescale": "KB-RESTORE-2",
    "clear_not_snapshotted": "KB-SNAP-4",
    "map_iteration_skips": "KS-MAP-2",
    "list_accepts_null": "KS-LIST-3",
    "default_by_reference": "KS-VALUE-2",
    "loader_ignores_application": "LD-1",
    "salted_key_groups": "KG-2",
    "merge_keeps_sources": "KS-MERGE-2",
    "ttl_ignores_clock": "TTL-1",
    "union_from_first_handle": "OS-2",
    "close_keeps_snapshots": "KB-SNAP-6",
    "empty_snapshot_is_something": "KB-SNAP-7",
    "ignores_foreign_handles": "KB-RESTORE-5",
    "no_serializer_check": "SER-7",
    "reducing_null_clears": "KS-RED-2",
    "map_remove_leaves_entry": "KS-MAP-4",
    "ttl_reset_on_restore": "TTL-6",
    "ttl_refresh_value_only": "TTL-2",
    "ttl_contains_expired": "TTL-3",
    "ttl_little_endian": "TTL-6",
    "serializer_first_role_only": "SER-7",
    "key_serializer_unchecked_on_rescale": "SER-6",
    "single_source_merge_keeps": "KS-MERGE-2",
    "default_shallow_copy": "KS-VALUE-2",
    "reduce_arguments_swapped": "KS-RED-1",
    "key_cache_conflates": "KS-3",
    "entry_count_after_restore": "KS-4",
    "map_iteration_pages": "KS-MAP-2",
    "short_key_group_offsets": "FMT-6",
    "close_cancels_only_unstarted": "KB-SNAP-6",
    "rocksdb_deletes_retained_shared": "KB-SNAP-8",
    "rocksdb_aborted_is_base": "KB-SNAP-9",
    "rocksdb_savepoint_reuses_shared": "SP-4",
    "configure_drops_explicit_settings": "LD-2",
    "rocksdb_map_clear_too_wide": "KS-4",
    "rocksdb_failed_restore_keeps_files": "KB-LOCAL-2",
    "timers_fire_newest_first": "TM-2",
    "timers_not_deduplicated": "TM-3",
    "timers_fire_with_stale_key": "TM-2",
    "timers_forget_restored": "TM-6",
    "timers_delete_keeps_due": "TM-4",
    "timers_past_wait_for_later_time": "TM-5",
    "changelog_truncates_early": "CL-5",
    "changelog_replays_out_of_order": "CL-4",
    "changelog_ignores_log": "CL-4",
    "changelog_cleanup_not_logged": "CL-4",
    "changelog_empty_accumulator_logged": "CL-9",
    "changelog_without_internal_accessors": "CL-9",
    "ttl_folds_expired": "TTL-3",
    "key_serializer_not_reconfigured": "SER-6",
    "key_serializer_migration_accepted": "SER-6",
    "ttl_merge_refreshes": "TTL-4",
    "ttl_list_returns_expired_twice": "TTL-3",
    "broadcast_keys_by_equality": "OS-3",
    "operator_update_appends": "OS-7",
    "operator_restore_skips_element_check": "OS-8",
    "value_serializer_not_reconfigured": "SER-3",
    "operator_serializer_not_reconfigured": "SER-3",
    "operator_backend_open_after_close": "OS-9",
    "key_outside_range_stored": "KB-KEY-2",
    "list_add_all_empty_entry": "KS-LIST-2",
    "map_contains_creates_entry": "KS-5",
    "keys_per_element": "KB-KEYS-1",
    "timer_delete_every_key": "TM-4",
    "value_equal_update_skipped": "TTL-2",
    "timers_list_deleted": "TM-6",
    "value_falsy_reads_default": "KS-VALUE-1",
    "reduce_restarts_after_falsy": "KS-RED-1",
    "merge_drops_falsy_accumulator": "KS-MERGE-1",
    "timers_namespace_blind": "TM-3",
    "keys_deduplicated_by_equality": "KB-KEYS-1",
    "timers_by_equality": "TM-3",
    "restore_keeps_states_of_first_handle": "KB-RESTORE-2",
    "list_walks_values_twice": "KS-LIST-2",
    "copy_on_write_until_any_done": "KB-SNAP-5",
    "operator_snapshot_shares_lists": "OS-10",
    "ttl_stores_expiry_instants": "TTL-5",
    "reduce_merge_folds_expired": "TTL-3",
    "aggregate_read_never_refreshes": "TTL-2",
    "folding_state_not_migrated": "SER-5",
    "operator_migration_keeps_old_snapshot": "SER-5",
    "state_of_another_kind_replaces": "KS-2",
    "operator_refusal_drops_restored": "OS-6",
    "ttl_switch_unmigrated": "TTL-5",
    "map_iteration_keeps_returned_expired": "TTL-3",
    "rocksdb_dispose_removes_local_dir": "KB-LOCAL-1",
    "rocksdb_full_checkpoint_incremental": "KB-SNAP-10",
    "serializers_imported_by_name": "SER-4",
    "snapshot_bypasses_stream_factory": "KB-SNAP-1",
    "timers_fired_in_batches": "TM-4",
    "timers_time_set_after_firing": "TM-2",
    "timers_deleted_lazily": "TM-4",
    "timers_of_unasked_services_dropped": "TM-9",
    "restored_timers_duplicated": "TM-3",
    "restored_timers_unlisted": "TM-6",
    "snapshot_cancel_ignored": "KB-SNAP-6",
    "close_cancels_latest_snapshot_only": "KB-SNAP-6",
    "late_states_in_snapshot": "KB-SNAP-3",
    "late_operator_states_in_snapshot": "OS-10",
    "operator_update_clears_first": "OS-5",
    "broadcast_registry_apart": "OS-6",
    "ttl_list_cleanup_leaves_empty": "KS-LIST-2",
    "ttl_map_cleanup_leaves_empty": "KS-MAP-4",
    "snapshot_swallows_storage_errors": "KB-SNAP-1",
    "operator_snapshot_swallows_storage_errors": "OS-4",
    "restore_skips_missing_files": "FMT-12",
    "operator_restore_skips_missing_streams": "FMT-12",
    "restore_reads_without_checksum": "FMT-12",
    "rocksdb_keeps_temp_instance_dir": "KB-LOCAL-1",
    "operator_restore_reads_without_checksum": "FMT-12",
    "value_objects_held": "KB-SNAP-3",
    "accumulators_held": "KB-SNAP-3",
    "namespace_serializer_unchecked": "SER-6",
    "key_and_namespace_joined": "KS-3",
    "union_deduplicated_across_subtasks": "OS-2",
    "restore_claims_files": "KB-RESTORE-1",
    "operator_elements_held": "OS-10",
    "empty_bytes_read_as_nothing": "KS-1",
    "payload_lengths_in_16_bits": "KS-1",
    "rocksdb_keeps_instance_dir_in_working_directory": "KB-LOCAL-1",
    "restored_state_indexes_kept": "KB-RESTORE-3",
    "operator_restored_offsets_kept": "OS-6",
    "accumulators_merged_in_place": "KB-SNAP-3",
    "ttl_refresh_past_copy_on_write": "TTL-6",
    "value_overwritten_in_place": "KB-SNAP-3",
    "map_put_in_place": "KB-SNAP-3",
    "clear_empties_in_place": "KB-SNAP-3",
    "map_remove_in_place": "KB-SNAP-3",
    "list_update_in_place": "KB-SNAP-3",
    "task_thread_shares_buffer": "KB-SNAP-2",
    "operator_task_thread_shares_buffer": "KB-SNAP-2",
    "asynchronous_parts_share_buffer": "KB-SNAP-5",
    "operator_asynchronous_parts_share_buffer": "KB-SNAP-5",
    "entry_counts_in_16_bits": "KB-RESTORE-1",
    "collection_sizes_in_16_bits": "KS-MAP-2",
    "memtable_loses_the_filling_put": "KS-VALUE-1",
    "operator_offset_counts_in_16_bits": "OS-7",
    "late_notification_becomes_the_base": "KB-SNAP-9",
    "savepoint_becomes_the_base": "KB-SNAP-9",
    "savepoint_taken_for_a_materialization": "CL-5",
    "key_lengths_in_16_bits": "KS-3",
    "state_indexes_in_8_bits": "KB-RESTORE-1",
    "names_split_at_colon": "KB-RESTORE-1",
    "names_ascii_only": "KS-2",
    "unnamed_state_not_snapshotted": "KB-RESTORE-1",
    "operator_names_split_at_colon": "OS-7",
    "operator_unnamed_not_snapshotted": "OS-7",
    "timer_service_names_sanitized": "TM-9",
    "serializer_config_texts_in_16_bits": "SER-2",
    "operator_serializer_config_texts_in_16_bits": "SER-2",
    "timer_counts_in_16_bits": "TM-6",
    "namespace_counts_in_16_bits": "KB-RESTORE-1",
    "key_groups_by_bit_mask": "KG-2",
    "timer_names_unchecked": "TM-9",
    "key_cache_by_hash": "KS-3",
    "user_keys_by_hash": "KS-3",
    "ttl_expiry_wraps": "TTL-1",
    "float_keys_cached": "KS-3",
    "operator_element_lengths_in_16_bits": "OS-7",
    "timer_key_groups_by_bit_mask": "TM-7",
    "broadcast_user_keys_by_hash": "OS-3",
    "timers_by_key_hash": "TM-3",
    "namespaces_by_hash": "KS-3",
    "ttl_age_as_distance": "TTL-1",
    "range_checked_at_the_end_only": "KB-KEY-2",
    "cancelled_operator_snapshot_keeps_stream": "OS-9",
    "changelog_none_update_not_logged": "CL-4",
    "changelog_add_all_not_logged": "CL-4",
    "changelog_snapshots_untracked": "KB-SNAP-6",
    "changelog_resets_captured_upload": "KB-SNAP-9",
    "msgpack_default_takes_tuples": "SER-10",
    "msgpack_default_strict_map_keys": "SER-9",
    "object_copies_shallow": "KB-SNAP-3",
    "object_map_iteration_uncopied": "KB-SNAP-3",
    "object_copies_until_any_done": "KB-SNAP-5",
    "object_operator_copy_shallow": "OS-10",
    "object_refused_snapshot_keeps_stream": "SER-10",
    "restores_on_registration": "KB-RESTORE-6",
    "restores_operator_state_on_registration": "OS-11",
    "restores_timers_on_request": "KB-RESTORE-6",
    "by_key_group_deletions_untracked": "KB-SNAP-8",
    "by_key_group_keeps_emptied_key_groups": "KB-SNAP-8",
    "by_key_group_delta_in_exclusive_scope": "KB-SNAP-8",
    "by_key_group_key_group_map_read_to_the_end": "FMT-8",
    "by_key_group_completion_forgets_later_changes": "KB-SNAP-9",
    "cancel_looked_for_between_key_groups": "KB-SNAP-6",
    "returns_handle_after_late_cancel": "KB-SNAP-6",
    "operator_cancel_looked_for_while_writing": "OS-9",
    "changelog_cancelled_upload_kept": "KB-SNAP-6",
    "by_key_group_failed_snapshot_keeps_uploads": "KB-SNAP-1",
    "rocksdb_instance_dir_numbered_per_process": "KB-LOCAL-3",
    "value_update_none_ignored": "KS-VALUE-3",
    "list_get_of_nothing_empty": "KS-LIST-1",
    "map_put_all_of_nothing_stores": "KS-MAP-3",
    "map_iterator_removes_twice": "KS-MAP-5",
    "aggregate_of_nothing_is_result": "KS-AGG-1",
    "abort_of_unknown_checkpoint_raises": "KB-NOTIFY-1",
    "closes_once": "KB-LIFE-1",
    "merge_drops_target": "KS-MERGE-3",
    "keys_of_closed_empty": "KB-LIFE-2",
    "partitioned_state_keeps_first_namespace": "KB-STATE-1",
    "time_from_zero": "TM-8",
    "none_namespace_is_void": "KS-NS-1",
    "key_groups_counted_in_range": "KB-1",
    "timers_under_own_names": "IF-8",
    "ttl_flag_dropped": "TTL-6",
    "restore_entries_unchecked": "FMT-15",
    "changelog_savepoint_logged": "CL-7",
    "changelog_materialization_failures_unbounded": "CL-8",
    "none_key_accepted": "KB-KEY-1",
    "timer_times_wrapped": "TM-1",
    "canonical_labelled_native": "IF-7",
    "header_roles_beyond_the_kind_dropped": "IF-3",
    "savepoints_without_timers": "TM-10",
    "map_remove_absent_raises": "KS-MAP-1",
    "changelog_uploads_every_change_again": "CL-5",
    "timers_unsupported_not_implemented": "TM-11",
    "canonical_savepoints_unsupported_not_implemented": "SB-3",
    "changelog_segments_in_exclusive_scope": "KB-SNAP-8",
    "canonical_lists_backwards": "SP-1",
    "msgpack_default_unpickles": "SER-8",
    "rocksdb_downloads_by_handle_name": "KB-LOCAL-1",
    "msgpack_default_converts": "SER-10",
    "msgpack_default_passes_surrogates": "SER-10",
    "reducing_stores_before_reducing": "KS-RED-1",
    "operator_appends_until_refused": "OS-5",
    "restored_unlisted_until_registered": "KB-KEYS-1",
    "map_contains_by_value": "KS-MAP-1",
    "broadcast_none_removes": "OS-3",
    "state_files_on_macos": "KS-2",
    "restores_keys_in_any_encoding": "FMT-15",
    "broadcast_keys_in_any_encoding": "FMT-15",
    "ttl_list_add_all_restamps": "TTL-4",
    "ttl_map_put_all_restamps": "TTL-4",
    "namespace_shared_by_states": "KS-NS-2",
    "value_handles_cache_reads": "KB-STATE-1",
    "union_from_own_stream": "OS-2",
}
