"""A task's input queue: the messages of all its input channels, priority events (unaligned barriers) first, then in
order of arrival, channel and sequence.

It replaces simpy's `PriorityStore` on the simulator's hottest path. A store pays a put event per message (scheduled,
then processed to wake a waiting get) and compares `PriorityItem`s in Python; here an arrival hands the message to a
waiting task at once (one event: the task's wake-up) and the heap holds plain tuples whose unique order keys never
compare the messages themselves."""

from __future__ import annotations

import heapq
from typing import Any

import simpy

Order = tuple[int, float, int, int]  # (0 priority / 1 in order, arrival time, channel, sequence on the channel)
Entry = tuple[int, Any, bool]  # (channel, message, whether it holds a credit of the channel)


class Inbox:
    """Messages delivered to one task and not taken yet, in the order `Order` gives them."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.items: list[tuple[Order, Entry]] = []  # a heap
        self._waiter: simpy.Event | None = None

    def put(self, order: Order, entry: Entry) -> None:
        """A message arrived: a task waiting in `get` (so nothing was queued) takes it now, else it joins the queue."""
        waiter = self._waiter
        if waiter is None:
            heapq.heappush(self.items, (order, entry))
        else:
            self._waiter = None
            waiter.succeed(entry)

    def get(self) -> simpy.Event:
        """An event whose value is the first message: triggered at once if one is queued, else by the next arrival."""
        event = self.env.event()
        if self.items:
            event.succeed(heapq.heappop(self.items)[1])
        else:
            self._waiter = event
        return event

    def cancel(self, get: simpy.Event) -> None:
        """Withdraw a `get` that has not been satisfied (the task woke for something else)."""
        if self._waiter is get:
            self._waiter = None

    def pop(self) -> Entry:
        """Take the first queued message (the queue must not be empty)."""
        return heapq.heappop(self.items)[1]

    def priority_first(self) -> bool:
        """Whether the first queued message is a priority event."""
        return bool(self.items) and self.items[0][0][0] == 0

    def queued(self) -> list[Entry]:
        """Every queued message, first to last, without taking any."""
        return [entry for _, entry in sorted(self.items)]
