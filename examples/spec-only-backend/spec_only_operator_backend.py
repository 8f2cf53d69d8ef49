"""Operator state written from statecert's spec alone: the `statecert.spec.operator_backend` protocols, chapter OS
and the operator state stream of the interchange chapter (IF-6). It imports nothing from `statecert.reference`.

Each state is a list of serialized elements; broadcast state keeps its map and writes each entry as the msgpack
array `[user key bytes, user value bytes]`. Restored state stays serialized until it is registered again, and is
carried into the next snapshot unchanged until then (OS-6).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any

import msgpack
from spec_only_serializers import DEFAULT
from spec_only_snapshots import SnapshotTask, stream_name

from statecert.spec.errors import (
    BackendClosedError,
    CheckpointFormatError,
    InvalidStateValueError,
    SnapshotCancelledError,
    StateMigrationError,
    UnsupportedSnapshotError,
)
from statecert.spec.handles import (
    CANONICAL_FORMAT,
    OperatorStateHandle,
    OperatorStateMode,
    OperatorStatePartitions,
)
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, CheckpointOptions
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.serializer_registry import restore_serializer
from statecert.spec.serializers import Compatibility, SerializerSnapshot, TypeSerializer
from statecert.spec.state import ListStateDescriptor, MapStateDescriptor
from statecert.spec.storage import CheckpointedStateScope, CheckpointStreamFactory

_PREFIX = struct.Struct(">4sHI")  # IF-6: magic, version, header length
_LEN = struct.Struct(">I")
_TUPLE = "tuple"  # the serializer snapshot id of a broadcast entry (IF-6)

Restored = tuple[OperatorStateMode, SerializerSnapshot, list[bytes]]


class _Element:
    """The serializers of one registered state: one for list elements, key and value for broadcast entries."""

    def __init__(self, serializers: Sequence[TypeSerializer[Any]]) -> None:
        self.serializers = list(serializers)

    def snapshot(self) -> SerializerSnapshot:
        if len(self.serializers) == 1:
            return self.serializers[0].snapshot_configuration()
        fields = [s.snapshot_configuration().to_plain() for s in self.serializers]
        return SerializerSnapshot(_TUPLE, 1, {"fields": fields})

    def migrate(self, name: str, old: SerializerSnapshot, elements: list[bytes]) -> list[bytes]:
        """Resolve each serializer against the one that wrote the elements (SER-3..SER-5); incompatible is a
        StateMigrationError."""
        olds = [old] if len(self.serializers) == 1 else _fields(name, old)
        if len(olds) != len(self.serializers):
            raise StateMigrationError(f"operator state {name!r} was written as {old.serializer_id!r}")
        migrate = []
        for i, (new, snapshot) in enumerate(zip(self.serializers, olds, strict=True)):
            result = new.resolve_compatibility(snapshot)
            if result.kind is Compatibility.INCOMPATIBLE:
                raise StateMigrationError(f"operator state {name!r}: incompatible serializer: {result.reason}")
            if result.kind is Compatibility.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER and result.reconfigured:
                self.serializers[i] = result.reconfigured
            elif result.kind is Compatibility.COMPATIBLE_AFTER_MIGRATION:
                migrate.append((i, restore_serializer(snapshot), new))
        if not migrate:
            return elements
        out = []
        for element in elements:  # a damaged element raises ValueError here; the backend names its stream
            parts = self._parts(element)
            for i, reader, writer in migrate:
                parts[i] = writer.serialize(reader.deserialize(parts[i]))
            out.append(parts[0] if len(parts) == 1 else bytes(msgpack.packb(parts, use_bin_type=True)))
        return out

    def _parts(self, element: bytes) -> list[bytes]:
        """A list element as it is, a broadcast entry split into its key and value bytes."""
        return [element] if len(self.serializers) == 1 else _pair(element)

    def check(self, elements: list[bytes]) -> None:
        """Every element decodes with these serializers (OS-8), and a broadcast user key is in the bytes its
        serializer writes, the ones `get` looks for (FMT-15); ValueError otherwise."""
        for element in elements:
            parts = self._parts(element)
            decoded = [serializer.deserialize(part) for serializer, part in zip(self.serializers, parts, strict=True)]
            if len(parts) == 2 and self.serializers[0].serialize(decoded[0]) != parts[0]:
                raise ValueError("a broadcast user key is not in its serializer's encoding: get() never finds it")


def _fields(name: str, snapshot: SerializerSnapshot) -> list[SerializerSnapshot]:
    if snapshot.serializer_id != _TUPLE:
        raise StateMigrationError(f"operator state {name!r} was not written as broadcast state")
    try:
        return [SerializerSnapshot.from_plain(f) for f in snapshot.config["fields"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise StateMigrationError(f"operator state {name!r}: malformed tuple serializer snapshot: {exc}") from None


def _pair(element: bytes) -> list[bytes]:
    """A broadcast entry's `[user key bytes, user value bytes]` (IF-6); ValueError for anything else."""
    pair = msgpack.unpackb(element, raw=False)  # msgpack's errors are ValueErrors too
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, bytes) for p in pair)):
        raise ValueError("a broadcast entry is not [key bytes, value bytes]")
    return pair


class _State:
    """One registered state: its mode, serializers and serialized elements."""

    def __init__(self, mode: OperatorStateMode, element: _Element) -> None:
        self.mode, self.element, self.elements = mode, element, list[bytes]()


class ListState:
    """Split-distributed or union list state (OS-1, OS-2); None elements are refused (OS-5)."""

    def __init__(self, backend: SpecOnlyOperatorBackend, state: _State) -> None:
        self._backend, self._state = backend, state
        self._serializer = state.element.serializers[0]

    def get(self) -> list[Any]:
        self._backend.check_open()
        return [self._serializer.deserialize(e) for e in self._state.elements]

    def add(self, value: Any) -> None:
        self.add_all([value])

    def add_all(self, values: Iterable[Any]) -> None:
        self._backend.check_open()
        values = list(values)
        if any(v is None for v in values):
            raise InvalidStateValueError("operator list state takes no None elements (OS-5)")
        # every element serialized before any is appended: an element the serializer refuses appends none (OS-5)
        self._state.elements.extend([self._serializer.serialize(v) for v in values])

    def update(self, values: Iterable[Any]) -> None:
        self._backend.check_open()
        values = list(values)
        if any(v is None for v in values):
            raise InvalidStateValueError("operator list state takes no None elements (OS-5)")
        self._state.elements[:] = [self._serializer.serialize(v) for v in values]

    def clear(self) -> None:
        self._backend.check_open()
        self._state.elements.clear()


class BroadcastState:
    """A map every subtask holds in full (OS-3); its entries are kept as serialized pairs in insertion order."""

    def __init__(self, backend: SpecOnlyOperatorBackend, state: _State) -> None:
        self._backend, self._state = backend, state
        self._key, self._value = state.element.serializers

    def _entries(self) -> dict[bytes, bytes]:
        self._backend.check_open()
        return dict((k, v) for k, v in (_pair(e) for e in self._state.elements))

    def _store(self, entries: dict[bytes, bytes]) -> None:
        self._state.elements[:] = [bytes(msgpack.packb([k, v], use_bin_type=True)) for k, v in entries.items()]

    def get(self, key: Any) -> Any:
        stored = self._entries().get(self._key.serialize(key))
        return None if stored is None else self._value.deserialize(stored)

    def put(self, key: Any, value: Any) -> None:
        entries = self._entries()
        entries[self._key.serialize(key)] = self._value.serialize(value)
        self._store(entries)

    def put_all(self, entries: Iterable[tuple[Any, Any]]) -> None:
        for key, value in entries:
            self.put(key, value)

    def remove(self, key: Any) -> None:
        entries = self._entries()
        entries.pop(self._key.serialize(key), None)
        self._store(entries)

    def contains(self, key: Any) -> bool:
        return self._key.serialize(key) in self._entries()

    def items(self) -> Iterator[tuple[Any, Any]]:
        """A generator, as Flink's `entries()` is an iterable: the suite must not need a list."""
        for k, v in self._entries().items():
            yield self._key.deserialize(k), self._value.deserialize(v)

    def clear(self) -> None:
        self._backend.check_open()
        self._state.elements.clear()


def write_stream(
    factory: CheckpointStreamFactory, states: dict[str, Restored], cancelled: Callable[[], bool]
) -> OperatorStateHandle:
    """IF-6: header, then every state's elements in ascending name order, each a length and its bytes."""
    header = {n: {"mode": m.value, "serializer": s.to_plain()} for n, (m, s, _) in sorted(states.items())}
    with factory.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        head = msgpack.packb(header, use_bin_type=True)
        out.write(_PREFIX.pack(b"SCOP", 1, len(head)) + head)
        partitions = {}
        for name, (mode, _, elements) in sorted(states.items()):
            offsets = []
            for element in elements:
                offsets.append(out.tell())
                out.write(_LEN.pack(len(element)) + element)
            partitions[name] = OperatorStatePartitions(mode, tuple(offsets))
        if cancelled():
            raise SnapshotCancelledError("cancelled while writing")  # the stream discards what it wrote
        delegate = out.close_and_get_handle()
    assert delegate is not None
    return OperatorStateHandle(partitions, delegate, CANONICAL_FORMAT)


def read_stream(handle: OperatorStateHandle) -> dict[str, Restored]:
    """The states of one handle: only the elements at its offsets (a rescale hands each subtask a share)."""
    name = stream_name(handle.delegate)
    if handle.snapshot_format != CANONICAL_FORMAT:
        raise UnsupportedSnapshotError(f"{name}: operator state in format {handle.snapshot_format!r}")
    with handle.delegate.open() as file:
        data = file.read()
    try:
        magic, version, length = _PREFIX.unpack_from(data)
        if (magic, version) != (b"SCOP", 1):
            raise ValueError(f"not an operator state stream ({magic!r} v{version})")
        header = msgpack.unpackb(data[_PREFIX.size : _PREFIX.size + length], raw=False)
        out: dict[str, Restored] = {}
        for state, part in handle.states.items():
            meta = header[state]
            elements = []
            for offset in part.offsets:
                if not _PREFIX.size + length <= offset <= len(data) - _LEN.size:
                    raise ValueError(f"offset {offset} of {state!r} outside the stream")
                (size,) = _LEN.unpack_from(data, offset)
                if offset + _LEN.size + size > len(data):
                    raise ValueError(f"an element of {state!r} runs past the end")
                elements.append(data[offset + _LEN.size : offset + _LEN.size + size])
            mode = OperatorStateMode(meta["mode"])
            if mode is not part.mode:
                raise ValueError(f"{state!r} is {mode.value} in the stream, {part.mode.value} in the handle")
            snapshot = SerializerSnapshot.from_plain(meta["serializer"])
            if mode is OperatorStateMode.BROADCAST and (
                (snapshot.serializer_id, snapshot.version) != (_TUPLE, 1) or len(_fields(state, snapshot)) != 2
            ):
                raise ValueError(f"broadcast state {state!r} is not under the tuple serializer of version 1")
            out[state] = (mode, snapshot, elements)
        return out
    except (KeyError, TypeError, ValueError, struct.error, msgpack.UnpackException, StateMigrationError) as exc:
        raise CheckpointFormatError(name, f"malformed operator state stream: {exc}") from None


class SpecOnlyOperatorBackend:
    """Operator state of one subtask (OS-1..OS-6): restored from any handles a redistribution gave it."""

    def __init__(self, params: OperatorBackendParameters) -> None:
        self._states: dict[str, _State] = {}
        self._restored: dict[str, Restored] = {}
        self._sources: dict[str, list[str]] = {}  # the streams each restored state came from, for errors
        self._tasks: list[SnapshotTask[OperatorStateHandle]] = []
        self._closed = False
        for handle in params.restore_state:
            for name, (mode, snapshot, elements) in read_stream(handle).items():
                self._sources.setdefault(name, []).append(stream_name(handle.delegate))
                if name not in self._restored:
                    self._restored[name] = (mode, snapshot, list(elements))
                elif self._restored[name][0] is not mode:
                    raise CheckpointFormatError(stream_name(handle.delegate), f"{name!r} restored in two modes")
                elif mode is not OperatorStateMode.BROADCAST:  # every copy of broadcast state is whole (OS-3)
                    self._restored[name][2].extend(elements)

    def check_open(self) -> None:
        if self._closed:
            raise BackendClosedError("the operator state backend is closed")

    def _register(self, name: str, mode: OperatorStateMode, element: _Element) -> _State:
        self.check_open()
        state = self._states.get(name)
        if state is not None:
            if state.mode is not mode:
                raise StateMigrationError(f"operator state {name!r} is {state.mode.value} state, not {mode.value}")
            return state
        state = _State(mode, element)
        if name in self._restored:
            old_mode, snapshot, elements = self._restored[name]
            if old_mode is not mode:
                raise StateMigrationError(f"operator state {name!r} was written as {old_mode.value} state")
            try:
                state.elements = element.migrate(name, snapshot, elements)
                element.check(state.elements)
            except (ValueError, struct.error) as exc:  # OS-8: damaged elements fail naming their stream
                streams = ", ".join(self._sources[name])
                problem = f"operator state {name!r}: an element cannot be read: {exc}"
                raise CheckpointFormatError(streams, problem) from None
            del self._restored[name]
        self._states[name] = state
        return state

    def get_list_state(self, descriptor: ListStateDescriptor[Any]) -> ListState:
        element = _Element([descriptor.element_serializer or DEFAULT])
        return ListState(self, self._register(descriptor.name, OperatorStateMode.SPLIT_DISTRIBUTE, element))

    def get_union_list_state(self, descriptor: ListStateDescriptor[Any]) -> ListState:
        element = _Element([descriptor.element_serializer or DEFAULT])
        return ListState(self, self._register(descriptor.name, OperatorStateMode.UNION, element))

    def get_broadcast_state(self, descriptor: MapStateDescriptor[Any, Any]) -> BroadcastState:
        serializers = [
            descriptor.user_key_serializer or DEFAULT,
            descriptor.user_value_serializer or DEFAULT,
        ]
        return BroadcastState(self, self._register(descriptor.name, OperatorStateMode.BROADCAST, _Element(serializers)))

    @property
    def registered_state_names(self) -> set[str]:
        return set(self._states) | set(self._restored)

    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: CheckpointStreamFactory,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> SnapshotTask[OperatorStateHandle]:
        """Synchronous part: copy every state's element list; the stream is written by `run()`."""
        self.check_open()
        states = {n: (s.mode, s.element.snapshot(), list(s.elements)) for n, s in self._states.items()}
        states.update({n: (m, s, list(e)) for n, (m, s, e) in self._restored.items()})

        def write(cancelled: Callable[[], bool]) -> OperatorStateHandle | None:
            return write_stream(stream_factory, states, cancelled) if states else None

        task = SnapshotTask(write)
        self._tasks.append(task)
        return task

    def close(self) -> None:
        self._closed = True
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()

    def dispose(self) -> None:
        self.close()
        self._states.clear()
        self._restored.clear()

    def __enter__(self) -> SpecOnlyOperatorBackend:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.dispose()
