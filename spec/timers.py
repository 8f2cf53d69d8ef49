"""The keyed timer service (spec chapter TM): event-time and processing-time timers per key and namespace, kept
by the keyed state backend and snapshotted, restored and rescaled with its key groups, as Flink's
`InternalTimerService` over the backend's priority queues."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from statecert.spec.serializers import TypeSerializer

K = TypeVar("K")
N = TypeVar("N")
K_co = TypeVar("K_co", covariant=True)
N_co = TypeVar("N_co", covariant=True)
K_contra = TypeVar("K_contra", contravariant=True)
N_contra = TypeVar("N_contra", contravariant=True)

MIN_TIMESTAMP = -(2**63)
"""Java's `Long.MIN_VALUE`: the watermark and processing time of a service before any advance (TM-8)."""
MAX_TIMESTAMP = 2**63 - 1
"""Java's `Long.MAX_VALUE`: the latest timestamp a timer may have (TM-1)."""


@dataclass(frozen=True)
class InternalTimer(Generic[K_co, N_co]):
    """A timer as it fires: its timestamp, the key it was registered under and its namespace (TM-2)."""

    timestamp: int
    key: K_co
    namespace: N_co


class Triggerable(Protocol[K_contra, N_contra]):
    """What a timer service calls when timers fire; the backend's current key is the timer's key (TM-2)."""

    def on_event_time(self, timer: InternalTimer[K_contra, N_contra]) -> None: ...

    def on_processing_time(self, timer: InternalTimer[K_contra, N_contra]) -> None: ...


class InternalTimerService(Protocol[N]):
    """The timers of one named service of one keyed backend; registering and deleting act on the backend's current
    key (TM-1). Time moves only through `advance_watermark` and `advance_processing_time`, driven by the runner
    (the simulator's clock, a micro-batch's time), as with Flink's test processing-time service (TM-8)."""

    def current_watermark(self) -> int: ...

    def current_processing_time(self) -> int: ...

    def register_event_time_timer(self, namespace: N, time: int) -> None:
        """A timer for (current key, namespace, time); registering an existing one changes nothing (TM-1, TM-3)."""
        ...

    def delete_event_time_timer(self, namespace: N, time: int) -> None:
        """Remove the timer for (current key, namespace, time); deleting a missing timer changes nothing (TM-4)."""
        ...

    def register_processing_time_timer(self, namespace: N, time: int) -> None: ...

    def delete_processing_time_timer(self, namespace: N, time: int) -> None: ...

    def advance_watermark(self, time: int) -> None:
        """Set the watermark to `time`, then fire every event-time timer with timestamp <= `time` in timestamp order,
        one at a time, including those the callbacks register at or before `time` and none a callback deleted; each
        fires once, and callbacks read `time` as the current watermark (TM-2, TM-4, TM-5)."""
        ...

    def advance_processing_time(self, time: int) -> None:
        """As `advance_watermark`, for processing-time timers (TM-2)."""
        ...

    def for_each_event_time_timer(self, action: Callable[[N, int], None]) -> None:
        """Call `action(namespace, timestamp)` for every registered event-time timer with its key set as current."""
        ...

    def for_each_processing_time_timer(self, action: Callable[[N, int], None]) -> None: ...

    def num_event_time_timers(self) -> int:
        """Registered event-time timers of every key of this backend (TM-6)."""
        ...

    def num_processing_time_timers(self) -> int: ...


@runtime_checkable
class TimerServiceProvider(Protocol):
    """A keyed backend that keeps timers (capability `timers`, TM-10); a backend that does not declare it may lack
    this method, and if the call fails it raises `UnsupportedFeatureError` (TM-11)."""

    def get_timer_service(
        self, name: str, namespace_serializer: TypeSerializer[Any], triggerable: Triggerable[Any, Any]
    ) -> InternalTimerService[Any]:
        """The timer service `name` of this backend, with the timers it held in the restored snapshot (TM-6);
        asking again for the same name returns the same service (TM-9)."""
        ...
