"""Timers written from statecert's spec alone: chapter TM and the timer states of the interchange chapter (IF-8).
It imports nothing from `statecert.reference`.

A service's timers of one kind live in the keyed backend as the map state `_timer_state/<kind>_<service>` (user
key the timestamp, value `true`), so the backend's snapshots, restores and rescales carry them with their keys'
key groups (TM-6, TM-7) and canonical savepoints hold them as every backend reads them (TM-10). In memory each
kind is also indexed by identity (key bytes, namespace bytes, timestamp) and ordered by a heap for firing.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from spec_only_serializers import BOOL, LONG

from statecert.spec.errors import IllegalStateError
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import MapStateDescriptor
from statecert.spec.timers import MAX_TIMESTAMP, MIN_TIMESTAMP, InternalTimer, Triggerable

Identity = tuple[bytes, bytes, int]


def checked_time(time: Any) -> int:
    """A timer's time: an int within Java's long range (TM-1; rejected with ValueError or TypeError, ERR-3)."""
    if type(time) is not int:
        raise TypeError(f"a timer's time must be an int, not {type(time).__name__}")
    if time < MIN_TIMESTAMP or time > MAX_TIMESTAMP:
        raise ValueError(f"a timer's time must be within Java's long range, got {time}")
    return time


class _Timers:
    """The timers of one kind of one service: the IF-8 map state plus an identity index and a firing heap."""

    def __init__(self, backend: Any, state_name: str, namespaces: TypeSerializer[Any]) -> None:
        self.backend, self.namespaces = backend, namespaces
        descriptor = MapStateDescriptor(state_name, user_key_serializer=LONG, user_value_serializer=BOOL)
        self.state = backend.get_or_create_state(descriptor, namespaces)
        self.index: dict[Identity, InternalTimer[Any, Any]] = {}
        self.heap: list[tuple[int, Identity]] = []
        current = backend.get_current_key()
        restored = list(backend.get_keys_and_namespaces(state_name))  # restored timers (TM-6)
        for key, namespace in restored:
            backend.set_current_key(key)
            self.state.set_current_namespace(namespace)
            for time in list(self.state.keys()):
                self._index(InternalTimer(time, key, namespace))
        if current is not None:
            backend.set_current_key(current)

    def _identity(self, key: Any, namespace: Any, time: int) -> Identity:
        return (self.backend.key_serializer.serialize(key), self.namespaces.serialize(namespace), time)

    def _index(self, timer: InternalTimer[Any, Any]) -> bool:
        ident = self._identity(timer.key, timer.namespace, timer.timestamp)
        if ident in self.index:
            return False  # de-duplicated (TM-3)
        self.index[ident] = timer
        heapq.heappush(self.heap, (timer.timestamp, ident))
        return True

    def _key(self) -> Any:
        key = self.backend.get_current_key()
        if key is None:
            raise IllegalStateError("a timer needs a current key (TM-1)")
        return key

    def register(self, namespace: Any, time: int) -> None:
        if self._index(InternalTimer(checked_time(time), self._key(), namespace)):
            self.state.set_current_namespace(namespace)
            self.state.put(time, True)

    def delete(self, namespace: Any, time: int) -> None:
        ident = self._identity(self._key(), namespace, checked_time(time))
        if self.index.pop(ident, None) is not None:  # its heap entry is skipped when it comes up
            self.state.set_current_namespace(namespace)
            self.state.remove(time)

    def fire_until(self, time: int, callback: Callable[[InternalTimer[Any, Any]], None]) -> None:
        """Fire every timer at or before `time` in timestamp order, those the callbacks add included (TM-2, TM-5)."""
        while self.heap and self.heap[0][0] <= time:
            _, ident = heapq.heappop(self.heap)
            timer = self.index.pop(ident, None)
            if timer is None:
                continue  # deleted
            self.backend.set_current_key(timer.key)
            self.state.set_current_namespace(timer.namespace)
            self.state.remove(timer.timestamp)  # a fired timer is gone (TM-4)
            callback(timer)

    def each(self, action: Callable[[Any, int], None]) -> None:
        for timer in list(self.index.values()):
            self.backend.set_current_key(timer.key)
            action(timer.namespace, timer.timestamp)


class TimerService:
    """One named service (TM-9): event-time and processing-time timers, time starting at Long.MIN_VALUE (TM-8)."""

    def __init__(
        self, backend: Any, name: str, namespaces: TypeSerializer[Any], triggerable: Triggerable[Any, Any]
    ) -> None:
        self.backend, self.triggerable = backend, triggerable
        self.event = _Timers(backend, f"_timer_state/event_{name}", namespaces)
        self.processing = _Timers(backend, f"_timer_state/processing_{name}", namespaces)
        self.watermark = self.processing_time = MIN_TIMESTAMP

    def current_watermark(self) -> int:
        return self.watermark

    def current_processing_time(self) -> int:
        return self.processing_time

    def register_event_time_timer(self, namespace: Any, time: int) -> None:
        self.event.register(namespace, time)

    def delete_event_time_timer(self, namespace: Any, time: int) -> None:
        self.event.delete(namespace, time)

    def register_processing_time_timer(self, namespace: Any, time: int) -> None:
        self.processing.register(namespace, time)

    def delete_processing_time_timer(self, namespace: Any, time: int) -> None:
        self.processing.delete(namespace, time)

    def advance_watermark(self, time: int) -> None:
        self.watermark = max(self.watermark, checked_time(time))
        self.event.fire_until(self.watermark, self.triggerable.on_event_time)

    def advance_processing_time(self, time: int) -> None:
        self.processing_time = max(self.processing_time, checked_time(time))
        self.processing.fire_until(self.processing_time, self.triggerable.on_processing_time)

    def for_each_event_time_timer(self, action: Callable[[Any, int], None]) -> None:
        self.event.each(action)

    def for_each_processing_time_timer(self, action: Callable[[Any, int], None]) -> None:
        self.processing.each(action)

    def num_event_time_timers(self) -> int:
        return len(self.event.index)

    def num_processing_time_timers(self) -> int:
        return len(self.processing.index)
