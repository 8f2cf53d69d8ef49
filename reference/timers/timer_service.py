"""`KeyedTimerService`: Flink's `InternalTimerServiceImpl` over the keyed backend's timer queues (chapter TM)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statecert.reference.timers.timer_queue import TimerQueue, check_timestamp, timer_state_name
from statecert.spec.serializers import TypeSerializer
from statecert.spec.timers import MIN_TIMESTAMP, InternalTimer, Triggerable


class KeyedTimerService:
    """Event-time and processing-time timers of one named service of one keyed backend. Time starts at
    `Long.MIN_VALUE` and moves only when the runner advances it (TM-8)."""

    queue_class: type[TimerQueue] = TimerQueue

    def __init__(
        self, backend: Any, name: str, namespace_serializer: TypeSerializer[Any], triggerable: Triggerable[Any, Any]
    ) -> None:
        self.name = name
        self.namespace_serializer = namespace_serializer
        self.triggerable = triggerable
        self._backend = backend
        self._event = self.queue_class(backend, timer_state_name(name, "event"), namespace_serializer)
        self._processing = self.queue_class(backend, timer_state_name(name, "processing"), namespace_serializer)
        self._watermark = MIN_TIMESTAMP
        self._processing_time = MIN_TIMESTAMP

    def current_watermark(self) -> int:
        return self._watermark

    def current_processing_time(self) -> int:
        return self._processing_time

    def register_event_time_timer(self, namespace: Any, time: int) -> None:
        self._event.add(namespace, time)

    def delete_event_time_timer(self, namespace: Any, time: int) -> None:
        self._event.remove(namespace, time)

    def register_processing_time_timer(self, namespace: Any, time: int) -> None:
        self._processing.add(namespace, time)

    def delete_processing_time_timer(self, namespace: Any, time: int) -> None:
        self._processing.remove(namespace, time)

    def advance_watermark(self, time: int) -> None:
        """Fire due event-time timers in timestamp order, including those the callbacks register (TM-2, TM-5)."""
        self._watermark = max(self._watermark, check_timestamp(time))
        self._fire(self._event, self._watermark, self.triggerable.on_event_time)

    def advance_processing_time(self, time: int) -> None:
        self._processing_time = max(self._processing_time, check_timestamp(time))
        self._fire(self._processing, self._processing_time, self.triggerable.on_processing_time)

    def _fire(self, queue: TimerQueue, time: int, target: Callable[[InternalTimer[Any, Any]], None]) -> None:
        self._backend.check_open()
        while (timer := queue.poll_due(time)) is not None:
            target(timer)

    def for_each_event_time_timer(self, action: Callable[[Any, int], None]) -> None:
        self._for_each(self._event, action)

    def for_each_processing_time_timer(self, action: Callable[[Any, int], None]) -> None:
        self._for_each(self._processing, action)

    def _for_each(self, queue: TimerQueue, action: Callable[[Any, int], None]) -> None:
        for timer in queue:
            self._backend.set_current_key(timer.key)
            action(timer.namespace, timer.timestamp)

    def num_event_time_timers(self) -> int:
        return len(self._event)

    def num_processing_time_timers(self) -> int:
        return len(self._processing)
