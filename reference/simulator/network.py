"""Simulated channels: FIFO delivery after a jittered latency, credit-based backpressure (a sender needs a free
buffer slot of the receiver, given back when the receiver has processed the item)."""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from typing import Any

import simpy


class Channel:
    def __init__(
        self,
        env: simpy.Environment,
        inbox: simpy.Store,
        index: int,
        credits: int,
        latency_ms: float,
        jitter_ms: float,
        rng: random.Random,
        extra_latency: Callable[[], float] = lambda: 0.0,
        on_priority: Callable[[], None] = lambda: None,
    ) -> None:
        self.env = env
        self.inbox = inbox  # a PriorityStore shared by all channels into one task: (channel, payload, took credit)
        self.index = index
        self.credits = simpy.Container(env, capacity=credits, init=credits)
        self.latency = latency_ms
        self.jitter = jitter_ms
        self.rng = rng
        self.extra_latency = extra_latency  # network delay spikes
        self.on_priority = on_priority  # tells a receiver blocked on its own output that a priority event arrived
        self._last_delivery = 0.0
        self._floor = 0.0
        self.sequence = 0
        self.data_sent = 0  # records (not events) the sender has put on this channel
        self.delivered = 0  # messages of any kind delivered, for the events-per-second figure

    def send(self, payload: Any, priority: bool = False) -> Generator[Any, Any, None]:
        """FIFO: wait for a credit, then transmit. A priority event (an unaligned barrier) needs no credit and
        overtakes everything queued on the way and at the receiver."""
        if priority:
            self.send_priority(payload)
            return
        yield self.credits.get(1)  # blocks when the receiver's buffer for this channel is full
        self.transmit(payload)

    def send_priority(self, payload: Any) -> None:
        """A priority event needs no credit and overtakes everything queued on the way and at the receiver."""
        latency = self._latency()
        self.env.process(self._deliver(latency, payload, 0))
        self._floor = max(self._floor, self.env.now + latency + 1e-6)  # later data never passes the barrier

    def transmit(self, payload: Any) -> None:
        """Send an item whose credit the sender already holds."""
        delivery = max(self._last_delivery, self._floor, self.env.now + self._latency())
        self._last_delivery = delivery  # FIFO per channel
        self.env.process(self._deliver(delivery - self.env.now, payload, 1))

    def _latency(self) -> float:
        return self.latency + self.extra_latency() + self.rng.uniform(0, self.jitter)

    def _deliver(self, delay: float, payload: Any, priority: int) -> Generator[Any, Any, None]:
        yield self.env.timeout(delay)
        self.sequence += 1
        self.delivered += 1
        yield self.inbox.put(
            simpy.PriorityItem(
                (priority, self.env.now, self.index, self.sequence), (self.index, payload, priority == 1)
            )
        )
        if priority == 0:
            self.on_priority()

    def release(self) -> None:
        """The receiver processed an item from this channel: one credit back."""
        self.credits.put(1)
