"""The five keyed state kinds over a StateTable (chapter KS). A state object is bound to its backend's current
key and to its own current namespace."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from statecert.reference.heap.state_table import EntryKey, StateTable
from statecert.reference.heap.ttl import TtlPolicy
from statecert.spec.errors import IllegalStateError, InvalidStateValueError
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import VOID_NAMESPACE

if TYPE_CHECKING:
    from statecert.reference.heap.keyed_backend import HeapKeyedStateBackend


class HeapState:
    """Shared plumbing: current (key, namespace) entry key, key group, TTL checks."""

    def __init__(
        self,
        backend: HeapKeyedStateBackend,
        table: StateTable,
        namespace_serializer: TypeSerializer[Any],
        serializers: Mapping[str, TypeSerializer[Any]],
        ttl: TtlPolicy,
    ) -> None:
        self._backend = backend
        self.table = table
        self.namespace_serializer = namespace_serializer
        self._serializers = dict(serializers)
        self._ttl = ttl
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
            raise IllegalStateError(f"state {self.table.meta.name!r}: set_current_namespace() was never called")
        return (key_bytes, self._ns_bytes), key_group

    def _entry_key_for(self, namespace: Any) -> EntryKey:
        key_bytes, _ = self._backend.current_key_bytes_and_group()
        return key_bytes, self.namespace_serializer.serialize(namespace)

    def clear(self) -> None:
        key, key_group = self._entry_key()
        entries = self.table.read_map(key_group)
        if key in entries:
            del self.table.write_map(key_group)[key]

    # -- single-value kinds (value, reducing, aggregating) -------------------------------------------------------
    def _get_bytes(self) -> bytes | None:
        """The live payload for the current key and namespace, applying TTL visibility and cleanup."""
        key, key_group = self._entry_key()
        stored = self.table.read_map(key_group).get(key)
        if stored is None:
            return None
        if self._ttl.expired(stored):
            del self.table.write_map(key_group)[key]
            return self._ttl.payload(stored) if self._ttl.return_expired else None
        if self._ttl.update_on_read:
            self.table.write_map(key_group)[key] = self._ttl.wrap(self._ttl.payload(stored))
        return self._ttl.payload(stored)

    def _put_bytes(self, payload: bytes) -> None:
        key, key_group = self._entry_key()
        self.table.write_map(key_group)[key] = self._ttl.wrap(payload)


class HeapValueState(HeapState):
    def __init__(self, *args: Any, default: Any = None) -> None:
        super().__init__(*args)
        self._ser = self._serializers["value"]
        self._default_bytes = None if default is None else self._ser.serialize(default)

    def value(self) -> Any:
        payload = self._get_bytes()
        if payload is None:
            # A fresh copy each time: mutating the returned default never changes it (KS-VALUE-2).
            return None if self._default_bytes is None else self._ser.deserialize(self._default_bytes)
        return self._ser.deserialize(payload)

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
        else:
            self._put_bytes(self._ser.serialize(value))


class HeapReducingState(HeapState):
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

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        merged = _pop_sources(self, sources)
        if not merged:
            return
        values = [self._ser.deserialize(self._ttl.payload(b)) for b in merged]
        self.set_current_namespace(target)
        current = self.get()
        for v in values:
            current = v if current is None else self._reduce(current, v)
        self._put_bytes(self._ser.serialize(current))


class HeapAggregatingState(HeapState):
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

    def add(self, value: Any) -> None:
        acc = self._accumulator()
        acc = self._fn.add(value, self._fn.create_accumulator() if acc is None else acc)
        self._put_bytes(self._ser.serialize(acc))

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        merged = _pop_sources(self, sources)
        if not merged:
            return
        accs = [self._ser.deserialize(self._ttl.payload(b)) for b in merged]
        self.set_current_namespace(target)
        current = self._accumulator()
        for acc in accs:
            current = acc if current is None else self._fn.merge(current, acc)
        self._put_bytes(self._ser.serialize(current))


def _pop_sources(state: HeapState, sources: Iterable[Any]) -> list[Any]:
    """Remove the sources' live entries for the current key and return them (KS-MERGE-2)."""
    popped = []
    _, key_group = state._backend.current_key_bytes_and_group()
    for source in sources:
        key = state._entry_key_for(source)
        stored = state.table.read_map(key_group).get(key)
        if stored is not None:
            del state.table.write_map(key_group)[key]
            popped.append(stored)
    return popped


class HeapListState(HeapState):
    """Elements in insertion order, each TTL-checked on its own (KS-LIST-*)."""

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
        cell = self.table.read_map(key_group).get(key)
        if cell is None:
            return None
        stored = cell.data
        if self._ttl.enabled:
            visible = [e for e in stored if self._ttl.visible(e)]
            live = [e for e in stored if not self._ttl.expired(e)]
            if self._ttl.update_on_read:
                live = [self._ttl.wrap(self._ttl.payload(e)) for e in live]
            if live != stored:
                self._replace(key, key_group, live)
            stored = visible
        if not stored:
            return None
        return [self._ser.deserialize(self._ttl.payload(e)) for e in stored]

    def _replace(self, key: EntryKey, key_group: int, elements: list[bytes]) -> None:
        entries = self.table.write_map(key_group)
        if elements:
            cell: list[bytes] = self.table.mutable_cell(entries, key, list, list)
            cell[:] = elements
        else:
            entries.pop(key, None)

    def add(self, value: Any) -> None:
        if value is None:
            raise InvalidStateValueError("list state does not accept None elements (KS-LIST-3)")
        key, key_group = self._entry_key()
        cell: list[bytes] = self.table.mutable_cell(self.table.write_map(key_group), key, list, list)
        cell.append(self._ttl.wrap(self._ser.serialize(value)))

    def add_all(self, values: Iterable[Any]) -> None:
        encoded = self._encode_all(values)
        if encoded:
            key, key_group = self._entry_key()
            cell: list[bytes] = self.table.mutable_cell(self.table.write_map(key_group), key, list, list)
            cell.extend(encoded)

    def update(self, values: Iterable[Any]) -> None:
        encoded = self._encode_all(values)
        key, key_group = self._entry_key()
        self._replace(key, key_group, encoded)

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        merged = [element for cell in _pop_sources(self, sources) for element in cell.data]
        if merged:
            self.set_current_namespace(target)
            key, key_group = self._entry_key()
            cell: list[bytes] = self.table.mutable_cell(self.table.write_map(key_group), key, list, list)
            cell.extend(merged)


class HeapMapState(HeapState):
    """User-key -> value entries, each TTL-checked on its own (KS-MAP-*)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._kser = self._serializers["user_key"]
        self._vser = self._serializers["user_value"]

    def _cell(self) -> dict[bytes, bytes] | None:
        key, key_group = self._entry_key()
        cell = self.table.read_map(key_group).get(key)
        return None if cell is None else cell.data

    def _writable(self) -> dict[bytes, bytes]:
        key, key_group = self._entry_key()
        return self.table.mutable_cell(self.table.write_map(key_group), key, dict, dict)

    def _drop_if_empty(self) -> None:
        key, key_group = self._entry_key()
        cell = self.table.read_map(key_group).get(key)
        if cell is not None and not cell.data:
            del self.table.write_map(key_group)[key]

    def _read(self, ukey: bytes, stored: bytes) -> bytes | None:
        if self._ttl.expired(stored):
            self._writable().pop(ukey, None)
            self._drop_if_empty()
            return self._ttl.payload(stored) if self._ttl.return_expired else None
        if self._ttl.update_on_read:
            self._writable()[ukey] = self._ttl.wrap(self._ttl.payload(stored))
        return self._ttl.payload(stored)

    def get(self, key: Any) -> Any:
        entries = self._cell()
        ukey = self._kser.serialize(key)
        stored = None if entries is None else entries.get(ukey)
        payload = None if stored is None else self._read(ukey, stored)
        return None if payload is None else self._vser.deserialize(payload)

    def contains(self, key: Any) -> bool:
        entries = self._cell()
        ukey = self._kser.serialize(key)
        return entries is not None and ukey in entries and self._ttl.visible(entries[ukey])

    def put(self, key: Any, value: Any) -> None:
        self._writable()[self._kser.serialize(key)] = self._ttl.wrap(self._vser.serialize(value))

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        if entries:
            target = self._writable()
            for k, v in entries.items():
                target[self._kser.serialize(k)] = self._ttl.wrap(self._vser.serialize(v))

    def remove(self, key: Any) -> None:
        entries = self._cell()
        ukey = self._kser.serialize(key)
        if entries is not None and ukey in entries:
            del self._writable()[ukey]
            self._drop_if_empty()

    def _live_items(self) -> list[tuple[bytes, bytes]]:
        entries = self._cell()
        if entries is None:
            return []
        result = []
        for ukey, stored in list(entries.items()):
            payload = self._read(ukey, stored)
            if payload is not None:
                result.append((ukey, payload))
        return result

    def items(self) -> list[tuple[Any, Any]]:
        return [(self._kser.deserialize(k), self._vser.deserialize(v)) for k, v in self._live_items()]

    def keys(self) -> list[Any]:
        return [k for k, _ in self.items()]

    def values(self) -> list[Any]:
        return [v for _, v in self.items()]

    def is_empty(self) -> bool:
        return not self._live_items()

    def iterator(self) -> MapIterator:
        return MapIterator(self, self.items())


class MapIterator(Iterator[tuple[Any, Any]]):
    """Iterates a map state's entries as of its creation; `remove()` deletes the last one returned (KS-MAP-5)."""

    def __init__(self, state: HeapMapState, items: list[tuple[Any, Any]]) -> None:
        self._state = state
        self._items = iter(items)
        self._last: tuple[Any, Any] | None = None

    def __next__(self) -> tuple[Any, Any]:
        self._last = next(self._items)
        return self._last

    def remove(self) -> None:
        if self._last is None:
            raise IllegalStateError("remove() called before next() or twice for the same entry")
        self._state.remove(self._last[0])
        self._last = None
