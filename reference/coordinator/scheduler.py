"""Time for the coordinator, injectable: a scheduler of delayed callbacks and a manual one for tests (COORD-1)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def now_ms(self) -> int: ...

    def schedule(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable: ...


@dataclass(order=True)
class _Timer:
    due: int
    order: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """Runs callbacks only when `advance` moves its clock past their due time, in due order (deterministic)."""

    def __init__(self, now_ms: int = 0) -> None:
        self._now = now_ms
        self._timers: list[_Timer] = []
        self._order = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def schedule(self, delay_ms: int, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(self._now + max(0, delay_ms), next(self._order), callback)
        heapq.heappush(self._timers, timer)
        return timer

    def advance(self, ms: int) -> None:
        target = self._now + ms
        while self._timers and self._timers[0].due <= target:
            timer = heapq.heappop(self._timers)
            self._now = timer.due
            if not timer.cancelled:
                timer.callback()
        self._now = target
