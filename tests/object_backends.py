"""A correct backend that keeps state as Python objects, as Flink's heap backends keep Java objects, where every
other backend in this repository serializes at the write: the suite must certify it too.

`keeping_objects` is the heap backend with:
- values, reduced values, aggregating accumulators, list elements and map user values (of states without TTL) held
  as the objects the application wrote or a function returned, and handed back as they are: serialized only by a
  snapshot's asynchronous part, so a value its serializer refuses (SER-10) fails the snapshot, not the write;
- a read of an object a pending snapshot captured returning a deep copy (the snapshot keeps the original), as
  Flink's `CopyOnWriteStateMap.get` copies an entry no newer than the highest version a pending snapshot needs
  (KB-SNAP-3), and once no snapshot that captured it is pending, the object itself again (Flink's
  `releaseSnapshot`);
- operator list elements held as objects and deep-copied by the snapshot's synchronous part (Flink's
  `PartitionableListState.deepCopy` through the serializer's `copy`), serialized into the stream by its asynchronous
  part (OS-10).

Keys, namespaces and map user keys stay bytes, since entries are told apart by their bytes (KS-3). Broadcast state,
and state with TTL (whose last-access timestamp is part of the stored bytes), stay bytes as the reference keeps them.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, overload

from statecert.reference.format.canonical import CanonicalHeader, Entry, write_canonical_snapshot
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.heap.keyed_backend import HeapKeyedStateBackend
from statecert.reference.heap.state_table import Cell, StateTable
from statecert.reference.keyed_states import KvState, ValueStateImpl
from statecert.reference.operator_state import (
    DefaultOperatorStateBackend,
    OperatorListStateImpl,
)
from statecert.reference.snapshot_task import AsyncSnapshotTask
from statecert.reference.storage.written_streams import WrittenStreams
from statecert.spec.handles import KeyedStateHandle, OperatorStateMode
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, CheckpointOptions, KeyedBackendParameters
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import ListStateDescriptor, StateDescriptor, StateKind
from statecert.spec.storage import CheckpointStreamFactory


class Held:
    """An object kept as written, with the serializer a snapshot writes it with and the table version it was
    written in (None: operator state, which a snapshot copies instead)."""

    __slots__ = ("serializer", "value", "version")

    def __init__(self, value: Any, serializer: TypeSerializer[Any], version: int | None) -> None:
        self.value = value
        self.serializer = serializer
        self.version = version

    def serialized(self) -> bytes:
        return self.serializer.serialize(self.value)


class ObjectStateTable(StateTable):
    """A state table that knows which of its versions pending snapshots captured."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.pending: tuple[int, ...] = ()  # replaced whole, so a reader in the task thread sees a consistent tuple
        self._lock = threading.Lock()  # asynchronous parts release from their own threads

    def capture(self) -> list[dict[Any, Any]]:
        with self._lock:
            self.pending = (*self.pending, self.version)
        return super().capture()

    def release(self, version: int) -> None:
        with self._lock:
            pending = list(self.pending)
            pending.remove(version)
            self.pending = tuple(pending)

    def captured(self, version: int) -> bool:
        """Whether an object written in `version` belongs to a pending snapshot (so a read must copy it)."""
        return version <= max(self.pending, default=-1)


class HoldingSerializer:
    """Stands for a state's serializer inside the state: `serialize` holds the object, `deserialize` hands it back
    (a deep copy where a snapshot captured it); restored bytes are read with the serializer itself."""

    def __init__(self, inner: TypeSerializer[Any], table: ObjectStateTable | None) -> None:
        self.inner = inner
        self._table = table

    def serialize(self, value: Any) -> Held:
        return Held(value, self.inner, None if self._table is None else self._table.version)

    def deserialize(self, data: Any) -> Any:
        if type(data) is not Held:
            return self.inner.deserialize(data)
        if self._table is None or data.version is None or not self._table.captured(data.version):
            return data.value
        return self.copy(data.value)

    def copy(self, value: Any) -> Any:
        """A copy the application may change without changing `value` (Flink's `TypeSerializer.copy`)."""
        return copy.deepcopy(value)


HELD_ROLES = {
    StateKind.VALUE: "value",
    StateKind.REDUCING: "value",
    StateKind.AGGREGATING: "value",
    StateKind.LIST: "element",
    StateKind.MAP: "user_value",
}


def serialized(stored: Any) -> Any:
    """A stored entry as the canonical payload: held objects serialized (by the snapshot's asynchronous part)."""
    if type(stored) is Cell:
        data = stored.data
        if type(data) is dict:
            return [[k, v.serialized() if type(v) is Held else v] for k, v in data.items()]
        return [e.serialized() if type(e) is Held else e for e in data]
    return stored.serialized() if type(stored) is Held else stored


class ObjectKeyedStateBackend(HeapKeyedStateBackend):
    """The heap keyed backend holding the objects of states without TTL (TTL'd entries carry their timestamp in
    bytes)."""

    table_class = ObjectStateTable
    holding_serializer = HoldingSerializer

    def create_store(self, meta: Any) -> ObjectStateTable:
        return self.table_class(meta, self.key_group_range)

    def _create_state(
        self,
        descriptor: StateDescriptor,
        store: Any,
        ns_serializer: TypeSerializer[Any],
        serializers: Mapping[str, TypeSerializer[Any]],
    ) -> KvState:
        if descriptor.ttl is not None:
            return super()._create_state(descriptor, store, ns_serializer, serializers)
        role = HELD_ROLES[descriptor.kind]
        holding = {r: self.holding_serializer(s, store) if r == role else s for r, s in serializers.items()}
        state = super()._create_state(descriptor, store, ns_serializer, holding)  # type: ignore[arg-type]
        default = getattr(descriptor, "default", None)  # value state's descriptor alone has one
        if isinstance(state, ValueStateImpl) and default is not None:
            # the default stays bytes, read back as a fresh copy each time (KS-VALUE-2)
            state._default_bytes = serializers["value"].serialize(default)
        return state

    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: CheckpointStreamFactory,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> AsyncSnapshotTask[KeyedStateHandle]:
        """Synchronous part: capture the tables (copy-on-write from here on); asynchronous part: serialize what is
        held while the canonical stream is written."""
        self.check_open()
        names = sorted(n for n, t in self._stores.items() if len(t))
        metas = tuple(self._stores[n].meta for n in names)
        tables = [self._stores[n] for n in names]
        versions = [t.version for t in tables]
        captured = [t.capture() for t in tables]
        header = CanonicalHeader(self.backend_name, self._key_serializer.snapshot_configuration(), metas)
        key_group_range = self.key_group_range
        start = key_group_range.start

        def blocks(key_group: int) -> list[Entry]:
            return [
                [index, key, ns, serialized(stored)]
                for index, maps in enumerate(captured)
                for (key, ns), stored in maps[key_group - start].items()
            ]

        streams = WrittenStreams(stream_factory)

        def write(cancelled: Callable[[], bool]) -> KeyedStateHandle | None:
            if not captured:
                return None
            return self.write_snapshot(streams, header, key_group_range, blocks, cancelled)

        def done(task: AsyncSnapshotTask[KeyedStateHandle]) -> None:
            self._pending.discard(task)
            for table, version in zip(tables, versions, strict=True):
                table.release(version)

        return self.track_snapshot(AsyncSnapshotTask(write, done, streams.discard))

    def write_snapshot(
        self,
        stream_factory: CheckpointStreamFactory,
        header: CanonicalHeader,
        key_group_range: KeyGroupRange,
        blocks: Callable[[int], list[Entry]],
        cancelled: Callable[[], bool],
    ) -> KeyedStateHandle:
        """The asynchronous part's stream: a value refused as it is serialized fails it, and the stream's file goes
        with it."""
        return write_canonical_snapshot(stream_factory, header, key_group_range, blocks, cancelled)


class SerializedOnRead(Sequence[bytes]):
    """Operator elements a snapshot copied, serialized one by one as the stream writer reads them."""

    def __init__(self, elements: list[Any]) -> None:
        self._elements = elements

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...
    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(index, slice):
            return SerializedOnRead(self._elements[index])
        element = self._elements[index]
        return element.serialized() if type(element) is Held else element  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self._elements)


class ObjectOperatorStateBackend(DefaultOperatorStateBackend):
    """Operator list elements held as objects; broadcast state as the reference keeps it."""

    copy_element = staticmethod(copy.deepcopy)

    def _holding(self, state: OperatorListStateImpl) -> OperatorListStateImpl:
        registered = state._state
        if type(registered.serializer) is not HoldingSerializer:  # asked for again: it holds already
            registered.serializer = HoldingSerializer(registered.serializer, None)  # type: ignore[assignment]
        return state

    def get_list_state(self, descriptor: ListStateDescriptor[Any]) -> OperatorListStateImpl:
        return self._holding(super().get_list_state(descriptor))

    def get_union_list_state(self, descriptor: ListStateDescriptor[Any]) -> OperatorListStateImpl:
        return self._holding(super().get_union_list_state(descriptor))

    def captured_states(self) -> dict[str, tuple[OperatorStateMode, Any, SerializedOnRead]]:  # type: ignore[override]
        """Each state's elements deep-copied (held objects) in the synchronous part (OS-10), serialized only as the
        snapshot's asynchronous part writes them (the inherited `snapshot` writes what this returns)."""
        captured = {}
        for name, state in self._states.items():
            serializer: Any = state.serializer
            inner = serializer.inner if type(serializer) is HoldingSerializer else serializer
            elements = [
                Held(self.copy_element(e.value), e.serializer, None) if type(e) is Held else e for e in state.elements
            ]
            captured[name] = (state.mode, inner.snapshot_configuration(), SerializedOnRead(elements))
        captured.update({n: (m, snap, SerializedOnRead(list(e))) for n, (m, snap, e) in self._restored.items()})
        return captured


class ObjectStateBackend(HashMapStateBackend):
    """The heap backend's capabilities, its keyed and operator state kept as objects."""

    name = "hashmap-objects"

    def create_keyed_state_backend(self, params: KeyedBackendParameters[Any]) -> ObjectKeyedStateBackend:
        return ObjectKeyedStateBackend(params)

    def create_operator_state_backend(self, params: OperatorBackendParameters) -> ObjectOperatorStateBackend:
        return ObjectOperatorStateBackend(params)


def keeping_objects(config: Mapping[str, object]) -> ObjectStateBackend:
    return ObjectStateBackend()
