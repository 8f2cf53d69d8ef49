"""The operator state backend every reference backend shares, like Flink's DefaultOperatorStateBackend (chapter OS)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import msgpack

from statecert.reference.format.canonical import describe
from statecert.reference.format.entry_check import DECODE_ERRORS
from statecert.reference.format.operator_stream import read_operator_states, write_operator_states
from statecert.reference.serializers import DEFAULT_VALUE_SERIALIZER, TupleSerializer, restore_serializer
from statecert.reference.snapshot_task import AsyncSnapshotTask
from statecert.reference.storage.written_streams import WrittenStreams
from statecert.spec.errors import (
    BackendClosedError,
    CheckpointFormatError,
    InvalidStateValueError,
    StateCertError,
    StateMigrationError,
)
from statecert.spec.handles import CANONICAL_FORMAT, OperatorStateHandle, OperatorStateMode
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, CheckpointOptions
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.serializers import Compatibility, SerializerSnapshot, TypeSerializer
from statecert.spec.state import ListStateDescriptor, MapStateDescriptor
from statecert.spec.storage import CheckpointedStateScope, CheckpointStreamFactory


@dataclass
class _Registered:
    mode: OperatorStateMode
    serializer: TypeSerializer[Any]
    elements: list[bytes] = field(default_factory=list)
    positions: dict[bytes, int] | None = None
    """Broadcast state: each user key's bytes -> its element's position, built on first use (only the broadcast
    state's own methods change its elements, and they keep it up to date)."""


class OperatorListStateImpl:
    """List state of one subtask; elements kept serialized (OS-1, OS-2)."""

    def __init__(self, backend: DefaultOperatorStateBackend, state: _Registered) -> None:
        self._backend = backend
        self._state = state

    def get(self) -> list[Any]:
        self._backend._check_open()
        return [self._state.serializer.deserialize(e) for e in self._state.elements]

    def add(self, value: Any) -> None:
        self.add_all([value])

    def _encode_all(self, values: Iterable[Any]) -> list[bytes]:
        """The elements serialized, every one checked before any is stored (OS-5)."""
        self._backend._check_open()
        values = list(values)
        if any(v is None for v in values):
            raise InvalidStateValueError("operator list state does not accept None elements (OS-5)")
        return [self._state.serializer.serialize(v) for v in values]

    def add_all(self, values: Iterable[Any]) -> None:
        self._state.elements.extend(self._encode_all(values))

    def update(self, values: Iterable[Any]) -> None:
        """Replaces the elements once the new ones are checked: a refused update leaves the list (OS-5)."""
        self._state.elements[:] = self._encode_all(values)

    def clear(self) -> None:
        self._backend._check_open()
        self._state.elements.clear()


def user_key_bytes(element: bytes) -> bytes:
    """The user key's bytes of a broadcast element, the msgpack pair `[user key bytes, user value bytes]` (IF-6)."""
    key_bytes: bytes = msgpack.unpackb(element)[0]
    return key_bytes


class BroadcastStateImpl:
    """A map every subtask holds in full (OS-3); stored as serialized (key, value) pairs, told apart by the key's
    bytes (KS-3), so `1`, `True` and `1.0` under a msgpack key serializer are three entries."""

    def __init__(self, backend: DefaultOperatorStateBackend, state: _Registered) -> None:
        self._backend = backend
        self._state = state

    def _key_bytes(self, key: Any) -> bytes:
        self._backend._check_open()
        serializer = self._state.serializer
        assert isinstance(serializer, TupleSerializer)
        return serializer.fields[0].serialize(key)

    def _element_key(self, element: bytes) -> bytes:
        """What an element is found under in `_positions`: its user key's bytes, as `_key_bytes` gives them."""
        return user_key_bytes(element)

    def _positions(self) -> dict[bytes, int]:
        """The user keys' positions, built once from the elements (a restored stream naming a user key twice keeps
        its first entry, the one reads found)."""
        if self._state.positions is None:
            positions: dict[bytes, int] = {}
            kept: list[bytes] = []
            for element in self._state.elements:
                key_bytes = self._element_key(element)
                if key_bytes not in positions:
                    positions[key_bytes] = len(kept)
                    kept.append(element)
            self._state.elements[:] = kept
            self._state.positions = positions
        return self._state.positions

    def get(self, key: Any) -> Any:
        i = self._positions().get(self._key_bytes(key))
        return None if i is None else self._state.serializer.deserialize(self._state.elements[i])[1]

    def put(self, key: Any, value: Any) -> None:
        key_bytes = self._key_bytes(key)  # checks that the backend is open (OS-9)
        element = self._state.serializer.serialize((key, value))
        positions = self._positions()
        i = positions.get(key_bytes)
        if i is None:
            positions[key_bytes] = len(self._state.elements)
            self._state.elements.append(element)
        else:
            self._state.elements[i] = element

    def remove(self, key: Any) -> None:
        """The last element takes the removed one's place: entries have no order (OS-3)."""
        key_bytes = self._key_bytes(key)
        positions = self._positions()
        i = positions.pop(key_bytes, None)
        if i is None:
            return
        elements = self._state.elements
        last = elements.pop()
        if i < len(elements):
            elements[i] = last
            positions[self._element_key(last)] = i

    def contains(self, key: Any) -> bool:
        return self._key_bytes(key) in self._positions()

    def items(self) -> list[tuple[Any, Any]]:
        self._backend._check_open()
        return [tuple(self._state.serializer.deserialize(e)) for e in self._state.elements]

    def clear(self) -> None:
        self._backend._check_open()
        self._state.elements.clear()
        self._state.positions = {}


def check_elements(
    name: str, mode: OperatorStateMode, snapshot: SerializerSnapshot, elements: list[bytes], source: str
) -> None:
    """Every restored element decodes with the serializer that wrote it, when this process knows it (FMT-8); a
    broadcast entry's user key is in the bytes its serializer writes, the ones a lookup finds (FMT-15)."""
    try:
        serializer = restore_serializer(snapshot)
    except StateCertError:
        return  # a serializer of the user's own: checked when the state is registered
    for element in elements:
        try:
            decoded = serializer.deserialize(element)
            if mode is OperatorStateMode.BROADCAST and isinstance(serializer, TupleSerializer):
                written = serializer.fields[0].serialize(decoded[0])
                if written != user_key_bytes(element):
                    raise CheckpointFormatError(
                        source,
                        f"operator state {name!r}: a broadcast user key is not in the encoding its serializer writes "
                        f"(written as {written.hex()[:32]}): it would never be found",
                    )
        except DECODE_ERRORS as exc:
            raise CheckpointFormatError(
                source, f"operator state {name!r}: an element cannot be read ({exc!r})"
            ) from None


class DefaultOperatorStateBackend:
    def __init__(self, params: OperatorBackendParameters) -> None:
        self._params = params
        self._states: dict[str, _Registered] = {}
        self._restored: dict[str, tuple[OperatorStateMode, SerializerSnapshot, list[bytes]]] = {}
        self._pending: set[AsyncSnapshotTask[OperatorStateHandle]] = set()
        self._closed = False
        for handle in params.restore_state:
            if handle.snapshot_format != CANONICAL_FORMAT:
                raise StateMigrationError(f"unsupported operator state format {handle.snapshot_format!r}")
            for name, (mode, snap, elements) in read_operator_states(handle).items():
                check_elements(name, mode, snap, elements, describe(handle.delegate))
                if name in self._restored and self._restored[name][0] is not mode:
                    raise CheckpointFormatError(
                        describe(handle.delegate),
                        f"operator state {name!r} is {mode.value} state here, {self._restored[name][0].value} "
                        "in another handle",
                    )
                if name in self._restored and self._restored[name][1] != snap:
                    # merged, the elements of one handle would be read with the other's serializer (OS-8)
                    raise CheckpointFormatError(
                        describe(handle.delegate),
                        f"operator state {name!r} was written by serializer {snap.serializer_id!r} v{snap.version} "
                        f"here, by {self._restored[name][1].serializer_id!r} v{self._restored[name][1].version} in "
                        "another handle",
                    )
                if name in self._restored:
                    if mode is OperatorStateMode.BROADCAST:
                        continue  # every copy of broadcast state is the same; keep one (OS-3)
                    self._restored[name][2].extend(elements)
                else:
                    self._restored[name] = (mode, snap, list(elements))

    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosedError("the operator state backend is closed")

    def _register(self, name: str, mode: OperatorStateMode, serializer: TypeSerializer[Any]) -> _Registered:
        self._check_open()
        if name in self._states:
            state = self._states[name]
            if state.mode is not mode:
                raise StateMigrationError(f"operator state {name!r} is {state.mode.value} state, not {mode.value}")
            return state
        state = _Registered(mode, serializer)
        if name in self._restored:  # left restored until the checks pass: a refused request keeps it (OS-6)
            old_mode, snapshot, elements = self._restored[name]
            if old_mode is not mode:
                raise StateMigrationError(
                    f"operator state {name!r} was written as {old_mode.value} state, now requested as {mode.value}"
                )
            state.serializer, state.elements = _resolve(name, serializer, snapshot, elements)
            del self._restored[name]
        self._states[name] = state
        return state

    def get_list_state(self, descriptor: ListStateDescriptor[Any]) -> OperatorListStateImpl:
        ser = descriptor.element_serializer or DEFAULT_VALUE_SERIALIZER
        return OperatorListStateImpl(self, self._register(descriptor.name, OperatorStateMode.SPLIT_DISTRIBUTE, ser))

    def get_union_list_state(self, descriptor: ListStateDescriptor[Any]) -> OperatorListStateImpl:
        ser = descriptor.element_serializer or DEFAULT_VALUE_SERIALIZER
        return OperatorListStateImpl(self, self._register(descriptor.name, OperatorStateMode.UNION, ser))

    def get_broadcast_state(self, descriptor: MapStateDescriptor[Any, Any]) -> BroadcastStateImpl:
        ser = TupleSerializer(
            descriptor.user_key_serializer or DEFAULT_VALUE_SERIALIZER,
            descriptor.user_value_serializer or DEFAULT_VALUE_SERIALIZER,
        )
        return BroadcastStateImpl(self, self._register(descriptor.name, OperatorStateMode.BROADCAST, ser))

    @property
    def registered_state_names(self) -> set[str]:
        return set(self._states) | set(self._restored)

    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: CheckpointStreamFactory,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> AsyncSnapshotTask[OperatorStateHandle]:
        """Synchronous part copies the element lists (operator state is small); restored but unregistered
        states are carried over unchanged (OS-6)."""
        self._check_open()
        captured = self.captured_states()
        streams = WrittenStreams(stream_factory)

        def write(cancelled: Callable[[], bool]) -> OperatorStateHandle | None:
            return write_operator_snapshot(streams, captured, cancelled) if captured else None

        task: AsyncSnapshotTask[OperatorStateHandle] = AsyncSnapshotTask(write, self._pending.discard, streams.discard)
        self._pending.add(task)
        return task

    def captured_states(self) -> dict[str, tuple[OperatorStateMode, Any, list[bytes]]]:
        """Each registered or restored state's mode, serializer snapshot and a copy of its elements, as a snapshot
        holds them (OS-10)."""
        captured = {
            n: (s.mode, s.serializer.snapshot_configuration(), list(s.elements)) for n, s in self._states.items()
        }
        captured.update({n: (m, snap, list(e)) for n, (m, snap, e) in self._restored.items()})
        return captured

    def close(self) -> None:
        self._closed = True
        for task in list(self._pending):
            task.cancel()

    def dispose(self) -> None:
        self.close()
        self._states.clear()
        self._restored.clear()

    def __enter__(self) -> DefaultOperatorStateBackend:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.dispose()


def _resolve(
    name: str, new: TypeSerializer[Any], old: SerializerSnapshot, elements: list[bytes]
) -> tuple[TypeSerializer[Any], list[bytes]]:
    result = new.resolve_compatibility(old)
    if result.kind is Compatibility.INCOMPATIBLE:
        raise StateMigrationError(f"operator state {name!r}: the new serializer is incompatible: {result.reason}")
    if result.kind is Compatibility.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER and result.reconfigured is not None:
        return result.reconfigured, elements
    if result.kind is Compatibility.COMPATIBLE_AFTER_MIGRATION:
        reader = restore_serializer(old)
        return new, [new.serialize(reader.deserialize(e)) for e in elements]
    return new, elements


def write_operator_snapshot(
    stream_factory: CheckpointStreamFactory,
    captured: dict[str, tuple[OperatorStateMode, Any, list[bytes]]],
    cancelled: Callable[[], bool],
) -> OperatorStateHandle | None:
    """The asynchronous part of an operator state snapshot: `captured` as one exclusive stream (IF-6, OS-4); None,
    the stream discarded, when the snapshot was cancelled meanwhile."""
    with stream_factory.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
        partitions = write_operator_states(out, captured)
        if cancelled():
            out.discard()
            return None
        delegate = out.close_and_get_handle()
    assert delegate is not None
    return OperatorStateHandle(partitions, delegate)
