"""The coordinator's scheduler on simpy time (milliseconds)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy


class SimTimer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class SimpyScheduler:
    def __init__(self, env: simpy.Environment) -> None:
        self.env = env

    def now_ms(self) -> int:
        return int(self.env.now)

    def schedule(self, delay_ms: int, callback: Callable[[], None]) -> SimTimer:
        timer = SimTimer()
        self.env.process(self._fire(delay_ms, callback, timer))
        return timer

    def _fire(self, delay_ms: int, callback: Callable[[], None], timer: SimTimer) -> Generator[Any, Any, None]:
        yield self.env.timeout(delay_ms)
        if not timer.cancelled:
            callback()
