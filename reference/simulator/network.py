"""Simulated channels: FIFO delivery after a jittered latency, credit-based backpressure (a sender needs a free
buffer of the receiver, given back when the receiver has processed the message).

Cheap per message, since a simulation sends millions: taking a free credit is a plain decrement (a sender waits on
an event only when none is free), and a message is delivered by a timeout's callback, not by a process of its own."""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, cast

import simpy

if TYPE_CHECKING:
    from statecert.reference.simulator.inbox import Inbox


class Credits:
    """The receiver's free buffers for one channel."""

    def __init__(self, env: simpy.Environment, credits: int) -> None:
        self.env = env
        self.level = credits
        self._released: simpy.Event | None = None

    def try_take(self) -> bool:
        """Take a free credit, if there is one (never waits)."""
        if self.level > 0:
            self.level -= 1
            return True
        return False

    def released(self) -> simpy.Event:
        """An event that succeeds when the next credit is given back (the sender then tries again)."""
        if self._released is None:
            self._released = self.env.event()
        return self._released

    def put(self) -> None:
        self.level += 1
        released, self._released = self._released, None
        if released is not None:
            released.succeed()

    def take(self) -> Generator[Any, Any, None]:
        """Wait for a credit and take it."""
        while not self.try_take():
            yield self.released()


class Channel:
    def __init__(
        self,
        env: simpy.Environment,
        inbox: Inbox,
        index: int,
        credits: int,
        latency_ms: float,
        jitter_ms: float,
        rng: random.Random,
        extra_latency: Callable[[], float] = lambda: 0.0,
        on_priority: Callable[[], None] = lambda: None,
    ) -> None:
        self.env = env
        self.inbox = inbox  # shared by all channels into one task
        self.index = index
        self.credits = Credits(env, credits)
        self.latency = latency_ms
        self.jitter = jitter_ms
        self.rng = rng
        self.extra_latency = extra_latency  # network delay spikes
        self.on_priority = on_priority  # tells a receiver blocked on its own output that a priority event arrived
        self._last_delivery = 0.0
        self._floor = 0.0
        self.sequence = 0
        self.data_sent = 0  # records (not messages) the sender has put on this channel
        self.delivered = 0  # messages of any kind delivered, for the events-per-second figure

    def send(self, payload: Any, priority: bool = False) -> Generator[Any, Any, None]:
        """FIFO: wait for a credit, then transmit. A priority event (an unaligned barrier) needs no credit and
        overtakes everything queued on the way and at the receiver."""
        if priority:
            self.send_priority(payload)
            return
        yield from self.credits.take()  # blocks when the receiver's buffers for this channel are all taken
        self.transmit(payload)

    def send_priority(self, payload: Any) -> None:
        """A priority event needs no credit and overtakes everything queued on the way and at the receiver."""
        latency = self._latency()
        self._deliver_after(latency, payload, 0)
        self._floor = max(self._floor, self.env.now + latency + 1e-6)  # later data never passes the barrier

    def transmit(self, payload: Any) -> None:
        """Send a message whose credit the sender already holds."""
        delivery = max(self._last_delivery, self._floor, self.env.now + self._latency())
        self._last_delivery = delivery  # FIFO per channel
        self._deliver_after(delivery - self.env.now, payload, 1)

    def _latency(self) -> float:
        # `uniform(0, jitter)` is `0 + jitter * random()`: the same draw without its call
        return self.latency + self.extra_latency() + self.jitter * self.rng.random()

    def _deliver_after(self, delay: float, payload: Any, priority: int) -> None:
        self.env.timeout(delay, (payload, priority)).callbacks.append(self._arrive)

    def _arrive(self, event: simpy.Event) -> None:
        payload, priority = cast("tuple[Any, int]", event.value)  # the timeout carries its message
        self.sequence += 1
        self.delivered += 1
        self.inbox.put((priority, self.env.now, self.index, self.sequence), (self.index, payload, priority == 1))
        if priority == 0:
            self.on_priority()

    def release(self) -> None:
        """The receiver processed a message from this channel: one credit back."""
        self.credits.put()
