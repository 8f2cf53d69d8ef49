"""Event-time tumbling windows over any keyed backend with timers (chapter TM), as Flink's `WindowOperator` with
`TumblingEventTimeWindows` and a reduce function: a window's running sum is reducing state in the namespace of
the window's start, and one event-time timer per key and window, at the window's last millisecond, emits the sum
and clears the state once the watermark passes it. Both scenario runners run it; `expected_windows` is the same
aggregation computed directly from the input.

Event time is the record's source offset in milliseconds, so every source split is in timestamp order and its
watermark after the record at offset o is o (Flink's `forMonotonousTimestamps` without the -1, which only moves
firing by one record); a split that ended emits `MAX_TIMESTAMP`, which fires every window left."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from statecert.reference.serializers import LongSerializer
from statecert.spec.state import ReducingStateDescriptor
from statecert.spec.timers import MAX_TIMESTAMP, MIN_TIMESTAMP, InternalTimer

WINDOW_STATE = ReducingStateDescriptor("window-sum", reduce_function=operator.add, serializer=LongSerializer())
WINDOW_NAMESPACE = LongSerializer()  # a window is named by its start
TIMER_SERVICE = "window-timers"

WindowResult = tuple[str, int, int]  # key, window start, the window's sum


def window_start(timestamp: int, size_ms: int) -> int:
    return timestamp - timestamp % size_ms


def split_watermark(emitted: int, length: int, size_ms: int) -> int:
    """The watermark a source split has sent once it emitted its first `emitted` records: the last timestamp of
    the last window it finished (none: `MIN_TIMESTAMP`), or `MAX_TIMESTAMP` once all `length` records are out."""
    if emitted >= length:
        return MAX_TIMESTAMP
    finished = window_start(emitted, size_ms) - 1  # the record at `emitted` opens or continues a window
    return finished if finished >= 0 else MIN_TIMESTAMP


def emits_watermark(offset: int, length: int, size_ms: int) -> int | None:
    """After the record at `offset` (of `length`), the watermark its split sends, if any: at the end of each window
    and `MAX_TIMESTAMP` after the last record."""
    if offset + 1 >= length:
        return MAX_TIMESTAMP
    if window_start(offset + 1, size_ms) != window_start(offset, size_ms):
        return offset
    return None


class TumblingWindowOperator:
    """The window stage of one keyed subtask. `process` adds a record to its window; `advance_watermark` fires the
    windows the watermark passed (in timer order) and returns their results."""

    def __init__(self, keyed: Any, size_ms: int) -> None:
        if size_ms <= 0:
            raise ValueError(f"window size must be > 0 ms, got {size_ms}")
        self.keyed, self.size_ms = keyed, size_ms
        self.state = keyed.get_or_create_state(WINDOW_STATE, WINDOW_NAMESPACE)
        self.timers = keyed.get_timer_service(TIMER_SERVICE, WINDOW_NAMESPACE, self)
        self._fired: list[WindowResult] = []

    def process(self, key: str, timestamp: int, value: int) -> None:
        self.keyed.set_current_key(key)
        start = window_start(timestamp, self.size_ms)
        self.state.set_current_namespace(start)
        self.state.add(value)
        self.timers.register_event_time_timer(start, start + self.size_ms - 1)

    def advance_watermark(self, watermark: int) -> list[WindowResult]:
        """Fire every window ending at or before `watermark`; a watermark that does not advance fires nothing."""
        self._fired = []
        if watermark > self.timers.current_watermark():
            self.timers.advance_watermark(watermark)
        return self._fired

    def on_event_time(self, timer: InternalTimer[str, int]) -> None:
        self.state.set_current_namespace(timer.namespace)
        total = self.state.get()
        if total is not None:
            self._fired.append((timer.key, timer.namespace, int(total)))
        self.state.clear()

    def on_processing_time(self, timer: InternalTimer[str, int]) -> None:
        raise AssertionError(f"event-time windows register no processing-time timers, got {timer}")


def expected_windows(
    records: Iterable[tuple[str, int]], size_ms: int, weight: Callable[[int], int]
) -> dict[tuple[str, int], int]:
    """The oracle: per (key, window start) the sum of the weights of the records (key, offset) in it."""
    sums: Counter[tuple[str, int]] = Counter()
    for key, offset in records:
        sums[(key, window_start(offset, size_ms))] += weight(offset)
    return dict(sums)


@dataclass(frozen=True)
class WindowCheck:
    """The committed window results against the oracle: each window once, with its sum."""

    lost: int
    duplicated: int
    wrong_sums: int
    unexpected: int

    @property
    def exactly_once(self) -> bool:
        return not (self.lost or self.duplicated or self.wrong_sums or self.unexpected)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exactly_once": self.exactly_once}

    def __str__(self) -> str:
        return (
            f"{self.lost} lost, {self.duplicated} duplicated, {self.wrong_sums} with a wrong sum, "
            f"{self.unexpected} not in the input"
        )


def check_windows(expected: dict[tuple[str, int], int], committed: Sequence[WindowResult]) -> WindowCheck:
    seen = Counter((key, start) for key, start, _ in committed)
    wrong = sum(1 for key, start, total in committed if (key, start) in expected and expected[(key, start)] != total)
    return WindowCheck(
        lost=sum(1 for window in expected if window not in seen),
        duplicated=sum(c - 1 for c in seen.values() if c > 1),
        wrong_sums=wrong,
        unexpected=sum(1 for window in seen if window not in expected),
    )
