"""One kind of timers (event time or processing time) of one timer service: persisted as an internal map state of
the keyed backend, so snapshots, restores and rescales carry timers with the key groups of their keys (TM-6, TM-7),
and ordered in memory by a heap that is rebuilt from that state when the queue is created."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

from statecert.reference.serializers import BooleanSerializer, LongSerializer
from statecert.spec.errors import IllegalStateError
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import MapStateDescriptor
from statecert.spec.timers import MAX_TIMESTAMP, MIN_TIMESTAMP, InternalTimer

TimerId = tuple[bytes, bytes, int]
"""A timer's identity: serialized key, serialized namespace, timestamp (de-duplication, TM-3)."""


def timer_state_name(service: str, kind: str) -> str:
    """Flink's name for a timer service's priority queue state (`_timer_state/event_user-timers`)."""
    return f"_timer_state/{kind}_{service}"


def check_timestamp(time: Any) -> int:
    if not isinstance(time, int) or isinstance(time, bool):
        raise TypeError(f"a timer's time is an int of milliseconds, got {type(time).__name__} (TM-1)")
    if not MIN_TIMESTAMP <= time <= MAX_TIMESTAMP:
        raise ValueError(f"a timer's time must lie in Java's long range, got {time} (TM-1)")
    return time


class TimerQueue:
    """Timers by timestamp; `backend` is a keyed backend whose current key the operations use and set."""

    def __init__(self, backend: Any, state_name: str, namespace_serializer: TypeSerializer[Any]) -> None:
        self._backend = backend
        self._namespaces = namespace_serializer
        self._state = backend.get_or_create_state(self.descriptor(state_name), namespace_serializer)
        self._live: dict[TimerId, InternalTimer[Any, Any]] = {}
        self._heap: list[tuple[int, int, TimerId]] = []
        self._sequence = 0
        self._load(state_name)

    def descriptor(self, state_name: str) -> MapStateDescriptor[int, bool]:
        """The map state holding this queue's timers (IF-8); making it checks the name (KS-2, TM-9)."""
        return MapStateDescriptor(
            state_name, user_key_serializer=LongSerializer(), user_value_serializer=BooleanSerializer()
        )

    def _load(self, state_name: str) -> None:
        """Every timer of the (restored) state into the heap; the caller's current key is kept."""
        previous = self._backend.get_current_key()
        for key, namespace in list(self._backend.get_keys_and_namespaces(state_name)):
            self._backend.set_current_key(key)
            self._state.set_current_namespace(namespace)
            for time in self._state.keys():  # noqa: SIM118 - MapState.keys(), not a dict
                self._remember(InternalTimer(check_timestamp(time), key, namespace))
        if previous is not None:
            self._backend.set_current_key(previous)

    def _identity(self, key: Any, namespace: Any, time: int) -> TimerId:
        return (self._backend.key_serializer.serialize(key), self._namespaces.serialize(namespace), time)

    def _remember(self, timer: InternalTimer[Any, Any]) -> TimerId:
        identity = self._identity(timer.key, timer.namespace, timer.timestamp)
        if identity not in self._live:
            self._live[identity] = timer
            self._sequence += 1
            heapq.heappush(self._heap, (timer.timestamp, self._sequence, identity))
        return identity

    def _current_key(self) -> Any:
        key = self._backend.get_current_key()
        if key is None:
            raise IllegalStateError("no current key: call set_current_key() before registering a timer (TM-1)")
        return key

    def add(self, namespace: Any, time: int) -> None:
        """A timer for the current key (TM-1); an existing one is left as it is (TM-3)."""
        timer = InternalTimer(check_timestamp(time), self._current_key(), namespace)
        if self._identity(timer.key, namespace, timer.timestamp) in self._live:
            return
        self._remember(timer)
        self._state.set_current_namespace(namespace)
        self._state.put(timer.timestamp, True)

    def remove(self, namespace: Any, time: int) -> None:
        """Forget the current key's timer (TM-4); its heap entry is skipped when it surfaces."""
        identity = self._identity(self._current_key(), namespace, check_timestamp(time))
        if self._live.pop(identity, None) is not None:
            self._state.set_current_namespace(namespace)
            self._state.remove(time)

    def poll_due(self, time: int) -> InternalTimer[Any, Any] | None:
        """The earliest live timer at or before `time`, removed, with its key set as current; None when none is due."""
        while self._heap and self._heap[0][0] <= time:
            _, _, identity = heapq.heappop(self._heap)
            timer = self._live.pop(identity, None)
            if timer is not None:
                self._backend.set_current_key(timer.key)
                self._state.set_current_namespace(timer.namespace)
                self._state.remove(timer.timestamp)
                return timer
        return None

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[InternalTimer[Any, Any]]:
        return iter(list(self._live.values()))
