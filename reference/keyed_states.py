"""The five keyed state kinds over a StateStore (chapter KS), shared by the reference backends.

A state object is bound to its backend's current key and to its own current namespace; TTL is applied here, per
value, list element or map entry (TTL-1..TTL-4), so every backend gets the same semantics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from statecert.reference.heap.ttl import TtlPolicy
from statecert.reference.state_store import EntryKey, StateStore
from statecert.spec.errors import IllegalStateError, InvalidStateValueError
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import VOID_NAMESPACE


class KeyContext(Protocol):
    """What a state needs from its backend: the current key's bytes and key group."""

    def current_key_bytes_and_group(self) -> tuple[bytes, int]: ...


class KvState:
    """Shared plumbing: current (key, namespace) entry key, key group, TTL checks."""

    def __init__(
        self,
        backend: KeyContext,
        store: StateStore,
        name: str,
        namespace_serializer: TypeSerializer[Any],
        serializers: Mapping[str, TypeSerializer[Any]],
        ttl: TtlPolicy,
    ) -> None:
        self._backend = backend
        self.store = store
        self.name = name
        self.namespace_serializer = namespace_serializer
        self._serializers = dict(serializers)
        self._ttl = ttl
        self._ttl_enabled = ttl.enabled
        self._ns_bytes: bytes | None = None
        if namespace_serializer.serializer_id == "void-namespace":
            self._ns_bytes = namespace_serializer.serialize(VOID_NAMESPACE)

    def set_current_namespace(self, namespace: Any) -> None:
        if namespace is None:
            raise InvalidStateValueError("the namespace of a state access may not be None (KS-NS-1)")
        self._ns_bytes = self.namespace_serializer.serialize(namespace)

    def _entry_key(self) -> tuple[EntryKey, int]:
        key_bytes, key_group = self._backend.current_key_bytes_and_group()
        if self._ns_bytes is None:
            raise IllegalStateError(f"state {self.name!r}: set_current_namespace() was never called")
        return (key_bytes, self._ns_bytes), key_group

    def _entry_key_for(self, namespace: Any) -> EntryKey:
        key_bytes, _ = self._backend.current_key_bytes_and_group()
        return key_bytes, self.namespace_serializer.serialize(namespace)

    def clear(self) -> None:
        key, key_group = self._entry_key()
        self.store.delete(key_group, key)

    # -- single-value kinds (value, reducing, aggregating) ----------------------------------------------------------
    def _get_bytes(self) -> bytes | None:
        """The live payload for the current key and namespace, applying TTL visibility and cleanup."""
        key, key_group = self._entry_key()
        stored = self.store.get(key_group, key)
        if stored is None or not self._ttl_enabled:  # without TTL, the stored bytes are the payload
            return stored
        if self._ttl.expired(stored):
            self.store.delete(key_group, key)
            return self._ttl.payload(stored) if self._ttl.return_expired else None
        if self._ttl.update_on_read:
            self.store.put(key_group, key, self._ttl.wrap(self._ttl.payload(stored)))
        return self._ttl.payload(stored)

    def _put_bytes(self, payload: bytes) -> None:
        key, key_group = self._entry_key()
        self.store.put(key_group, key, self._ttl.wrap(payload) if self._ttl_enabled else payload)

    def _pop_single(self, sources: Iterable[Any]) -> list[bytes]:
        """Remove the sources' live values for the current key and return their payloads (KS-MERGE-2)."""
        _, key_group = self._backend.current_key_bytes_and_group()
        popped = []
        for source in sources:
            key = self._entry_key_for(source)
            stored = self.store.get(key_group, key)
            if stored is not None:
                self.store.delete(key_group, key)
                if not self._ttl.expired(stored):
                    popped.append(self._ttl.payload(stored))
        return popped


class ValueStateImpl(KvState):
    def __init__(self, *args: Any, default: Any = None) -> None:
        super().__init__(*args)
        self._ser = self._serializers["value"]
        self._default_bytes = None if default is None else self._ser.serialize(default)

    def value(self) -> Any:
        if self._ttl_enabled or self._ns_bytes is None:
            payload = self._get_bytes()
        else:  # `_get_bytes` without TTL, inlined: on every state read's path
            key_bytes, key_group = self._backend.current_key_bytes_and_group()
            payload = self.store.get(key_group, (key_bytes, self._ns_bytes))
        if payload is None:
            # A fresh copy each time: mutating the returned default never changes it (KS-VALUE-2).
            return None if self._default_bytes is None else self._ser.deserialize(self._default_bytes)
        return self._ser.deserialize(payload)

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
        elif self._ttl_enabled or self._ns_bytes is None:
            self._put_bytes(self._ser.serialize(value))
        else:  # `_put_bytes` without TTL, inlined: on every state write's path
            payload = self._ser.serialize(value)
            key_bytes, key_group = self._backend.current_key_bytes_and_group()
            self.store.put(key_group, (key_bytes, self._ns_bytes), payload)


class ReducingStateImpl(KvState):
    def __init__(self, *args: Any, reduce_function: Callable[[Any, Any], Any]) -> None:
        super().__init__(*args)
        self._ser = self._serializers["value"]
        self._reduce = reduce_function

    def get(self) -> Any:
        payload = self._get_bytes()
        return None if payload is None else self._ser.deserialize(payload)

    def add(self, value: Any) -> None:
        if value is None:
            raise InvalidStateValueError("reducing state does not accept None (KS-RED-2)")
        current = self.get()
        self._put_bytes(self._ser.serialize(value if current is None else self._reduce(current, value)))

    def get_internal(self) -> Any:
        """The stored value (Flink's `InternalAppendingState.getInternal`, CL-9)."""
        return self.get()

    def update_internal(self, value: Any) -> None:
        """Replace the stored value; None clears (Flink's `updateInternal`, CL-9)."""
        if value is None:
            self.clear()
        else:
            self._put_bytes(self._ser.serialize(value))

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        values = [self._ser.deserialize(p) for p in self._pop_single(sources)]
        if values:
            self.set_current_namespace(target)
            current = self.get()
            for v in values:
                current = v if current is None else self._reduce(current, v)
            self._put_bytes(self._ser.serialize(current))


class AggregatingStateImpl(KvState):
    def __init__(self, *args: Any, aggregate_function: Any) -> None:
        super().__init__(*args)
        self._ser = self._serializers["value"]
        self._fn = aggregate_function

    def _accumulator(self) -> Any:
        payload = self._get_bytes()
        return None if payload is None else self._ser.deserialize(payload)

    def get(self) -> Any:
        acc = self._accumulator()
        return None if acc is None else self._fn.get_result(acc)

    def get_internal(self) -> Any:
        """The accumulator (Flink's `InternalAppendingState.getInternal`, CL-9)."""
        return self._accumulator()

    def update_internal(self, accumulator: Any) -> None:
        """Replace the accumulator; None clears (Flink's `updateInternal`, CL-9)."""
        if accumulator is None:
            self.clear()
        else:
            self._put_bytes(self._ser.serialize(accumulator))

    def add(self, value: Any) -> None:
        acc = self._accumulator()
        acc = self._fn.add(value, self._fn.create_accumulator() if acc is None else acc)
        self._put_bytes(self._ser.serialize(acc))

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        accumulators = [self._ser.deserialize(p) for p in self._pop_single(sources)]
        if accumulators:
            self.set_current_namespace(target)
            current = self._accumulator()
            for acc in accumulators:
                current = acc if current is None else self._fn.merge(current, acc)
            self._put_bytes(self._ser.serialize(current))


class ListStateImpl(KvState):
    """Elements in insertion order, each TTL-checked on its own (KS-LIST-*, TTL-4)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._ser = self._serializers["element"]

    def _encode_all(self, values: Iterable[Any]) -> list[bytes]:
        values = list(values)
        if any(v is None for v in values):
            raise InvalidStateValueError("list state does not accept None elements (KS-LIST-3)")
        return [self._ttl.wrap(self._ser.serialize(v)) for v in values]

    def get(self) -> list[Any] | None:
        key, key_group = self._entry_key()
        stored = self.store.get_list(key_group, key)
        if stored is None:
            return None
        if self._ttl.enabled:
            visible = [e for e in stored if self._ttl.visible(e)]
            live = [e for e in stored if not self._ttl.expired(e)]
            if self._ttl.update_on_read:
                live = [self._ttl.wrap(self._ttl.payload(e)) for e in live]
            if live != stored:
                self.store.set_list(key_group, key, live)
            stored = visible
        if not stored:
            return None
        return [self._ser.deserialize(self._ttl.payload(e)) for e in stored]

    def add(self, value: Any) -> None:
        if value is None:
            raise InvalidStateValueError("list state does not accept None elements (KS-LIST-3)")
        key, key_group = self._entry_key()
        self.store.append_list(key_group, key, [self._ttl.wrap(self._ser.serialize(value))])

    def add_all(self, values: Iterable[Any]) -> None:
        encoded = self._encode_all(values)
        if encoded:
            key, key_group = self._entry_key()
            self.store.append_list(key_group, key, encoded)

    def update(self, values: Iterable[Any]) -> None:
        encoded = self._encode_all(values)
        key, key_group = self._entry_key()
        self.store.set_list(key_group, key, encoded)

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        _, key_group = self._backend.current_key_bytes_and_group()
        merged: list[bytes] = []
        for source in sources:
            key = self._entry_key_for(source)
            elements = self.store.get_list(key_group, key)
            if elements:
                self.store.delete(key_group, key)
                merged.extend(e for e in elements if not self._ttl.expired(e))
        if merged:
            self.set_current_namespace(target)
            key, _ = self._entry_key()
            self.store.append_list(key_group, key, merged)


class MapStateImpl(KvState):
    """User-key -> value entries, each TTL-checked on its own (KS-MAP-*, TTL-4)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._kser = self._serializers["user_key"]
        self._vser = self._serializers["user_value"]

    def _read(self, key_group: int, key: EntryKey, user_key: bytes, stored: bytes) -> bytes | None:
        if self._ttl.expired(stored):
            self.store.map_remove(key_group, key, user_key)
            return self._ttl.payload(stored) if self._ttl.return_expired else None
        if self._ttl.update_on_read:
            self.store.map_put(key_group, key, {user_key: self._ttl.wrap(self._ttl.payload(stored))})
        return self._ttl.payload(stored)

    def get(self, user_key: Any) -> Any:
        key, key_group = self._entry_key()
        ukey = self._kser.serialize(user_key)
        stored = self.store.map_get(key_group, key, ukey)
        payload = None if stored is None else self._read(key_group, key, ukey, stored)
        return None if payload is None else self._vser.deserialize(payload)

    def contains(self, user_key: Any) -> bool:
        """A read of the entry: refreshes it with ON_READ_AND_WRITE (TTL-2, as Flink's `TtlMapState.contains`)."""
        key, key_group = self._entry_key()
        ukey = self._kser.serialize(user_key)
        stored = self.store.map_get(key_group, key, ukey)
        return stored is not None and self._read(key_group, key, ukey, stored) is not None

    def put(self, user_key: Any, value: Any) -> None:
        self.put_all({user_key: value})

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        if entries:
            key, key_group = self._entry_key()
            encoded = {self._kser.serialize(k): self._ttl.wrap(self._vser.serialize(v)) for k, v in entries.items()}
            self.store.map_put(key_group, key, encoded)

    def remove(self, user_key: Any) -> None:
        key, key_group = self._entry_key()
        self._remove_from(key_group, key, user_key)

    def _live_items(self) -> list[tuple[bytes, bytes]]:
        key, key_group = self._entry_key()
        result = []
        for ukey, stored in self.store.map_items(key_group, key):
            payload = self._read(key_group, key, ukey, stored)
            if payload is not None:
                result.append((ukey, payload))
        return result

    def _refreshed_as_returned(self) -> Iterator[tuple[bytes, bytes]]:
        """With ON_READ_AND_WRITE, the entries of the current key as of this call, each read (refreshed, or cleaned
        up when expired) only when the iteration reaches it (TTL-2); one removed meanwhile is skipped."""
        key, key_group = self._entry_key()
        user_keys = [ukey for ukey, _ in self.store.map_items(key_group, key)]

        def entries() -> Iterator[tuple[bytes, bytes]]:
            for ukey in user_keys:
                stored = self.store.map_get(key_group, key, ukey)
                payload = None if stored is None else self._read(key_group, key, ukey, stored)
                if payload is not None:
                    yield ukey, payload

        return entries()

    def items(self) -> Iterable[tuple[Any, Any]]:
        raw = self._refreshed_as_returned() if self._ttl.update_on_read else self._live_items()
        return ((self._kser.deserialize(k), self._vser.deserialize(v)) for k, v in raw)

    def keys(self) -> Iterable[Any]:
        return (k for k, _ in self.items())

    def values(self) -> Iterable[Any]:
        return (v for _, v in self.items())

    def is_empty(self) -> bool:
        """Refreshes nothing (TTL-2): only whether a visible entry is stored."""
        key, key_group = self._entry_key()
        return not any(self._ttl.visible(stored) for _, stored in self.store.map_items(key_group, key))

    def iterator(self) -> MapIterator:
        key, key_group = self._entry_key()
        return MapIterator(self.items(), lambda user_key: self._remove_from(key_group, key, user_key))

    def _remove_from(self, key_group: int, key: EntryKey, user_key: Any) -> None:
        self.store.map_remove(key_group, key, self._kser.serialize(user_key))


class MapIterator(Iterator[tuple[Any, Any]]):
    """Iterates a map state's entries as of its creation (with ON_READ_AND_WRITE each read as it is returned, TTL-2);
    `remove()` deletes the last one returned (KS-MAP-5)."""

    def __init__(self, items: Iterable[tuple[Any, Any]], remove: Callable[[Any], None]) -> None:
        self._items = iter(items)
        self._remove = remove  # from the key and namespace iterated (KS-MAP-2), whatever is current now
        self._last: tuple[Any, Any] | None = None

    def __next__(self) -> tuple[Any, Any]:
        self._last = next(self._items)
        return self._last

    def remove(self) -> None:
        if self._last is None:
            raise IllegalStateError("remove() called before next() or twice for the same entry")
        self._remove(self._last[0])
        self._last = None
