"""Deliberately broken backends, one bug each, for checking that the conformance suite catches them.

Each is a factory usable as `statecert certify tests.broken_backends:<name>`; `CAUGHT_BY` names the requirement
whose test must fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.heap.keyed_backend import HeapKeyedStateBackend
from statecert.reference.heap.state_table import StateTable
from statecert.reference.keyed_states import ListStateImpl, ReducingStateImpl, ValueStateImpl
from statecert.reference.loader import load_state_backend
from statecert.reference.operator_state import DefaultOperatorStateBackend
from statecert.reference.rescale import restricted
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.operator_backend import OperatorBackendParameters


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
        def _create_store(self, meta: Any) -> StateTable:
            return table_class(meta, self.key_group_range)

    return Keyed


def _with_state(base: type[Any], broken: type[Any]) -> type[HeapKeyedStateBackend]:
    """A heap keyed backend whose `base` states (e.g. ListStateImpl) behave as `broken`."""

    class Keyed(HeapKeyedStateBackend):
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


# 2. Restore keeps stale entries: every instance of a range reuses the tables the previous one left.
_LEFT_BEHIND: dict[tuple[Any, ...], StateTable] = {}


class _StaleRestore(HeapKeyedStateBackend):
    def _create_store(self, meta: Any) -> StateTable:
        key = (self._params.operator_id, self.key_group_range, meta.name)
        table = _LEFT_BEHIND.get(key)
        if table is None:
            table = _LEFT_BEHIND[key] = StateTable(meta, self.key_group_range)
        table.meta = meta
        return table


# 3. Off-by-one key-group range on restore: the last key group of the range is never read.
class _OffByOne(HeapKeyedStateBackend):
    def _restore(self, handles: Any) -> None:
        rng = self.key_group_range
        super()._restore(restricted(handles, KeyGroupRange.of(rng.start, rng.end - 1)))


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
    def _restore_other(self, handles: Any) -> None:
        return None


# 16. Restored state is registered without any serializer compatibility check.
class _NoSerializerCheck(HeapKeyedStateBackend):
    def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
        from statecert.reference.keyed_backend_base import descriptor_serializers
        from statecert.reference.serializers import VOID_NAMESPACE_SERIALIZER

        store = self._stores.get(descriptor.name)
        if store is None or descriptor.name in self._states:
            return super().get_or_create_state(descriptor, namespace_serializer)
        ns = namespace_serializer or VOID_NAMESPACE_SERIALIZER
        state = self._create_state(descriptor, store, ns, descriptor_serializers(descriptor))
        self._states[descriptor.name] = state
        return state


# 17. Reducing state accepts None.
class _NullReduce(ReducingStateImpl):
    def add(self, value: Any) -> None:
        if value is None:
            return
        super().add(value)


# 18. Removing the last user key of a map leaves an empty entry behind.
class _EmptyMapTable(StateTable):
    def map_remove(self, key_group: int, key: Any, user_key: bytes) -> None:
        data: dict[bytes, bytes] = self._cell(key_group, key, dict, dict)
        data.pop(user_key, None)


shared_snapshot = _factory(_with_table(_SharingTable))
stale_restore = _factory(_StaleRestore)
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
reducing_accepts_null = _factory(_with_state(ReducingStateImpl, _NullReduce))
map_remove_leaves_entry = _factory(_with_table(_EmptyMapTable))

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
    "reducing_accepts_null": "KS-RED-2",
    "map_remove_leaves_entry": "KS-MAP-4",
}
