"""Simulated channels: FIFO delivery after a jittered latency, credit-based backpressure (a sender needs a free
buffer slot of the receiver, given back when the receiver has processed the item)."""

from __future__ import annotations

import random
from collections.abc import Generator
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
    ) -> None:
        self.env = env
        self.inbox = inbox  # shared by all channels into one task; items are (channel index, payload)
        self.index = index
        self.credits = simpy.Container(env, capacity=credits, init=credits)
        self.latency = latency_ms
        self.jitter = jitter_ms
        self.rng = rng
        self._last_delivery = 0.0

    def send(self, payload: Any) -> Generator[Any, Any, None]:
        yield self.credits.get(1)  # blocks when the receiver's buffer for this channel is full
        delivery = max(self._last_delivery, self.env.now + self.latency + self.rng.uniform(0, self.jitter))
        self._last_delivery = delivery  # FIFO per channel
        self.env.process(self._deliver(delivery - self.env.now, payload))

    def _deliver(self, delay: float, payload: Any) -> Generator[Any, Any, None]:
        yield self.env.timeout(delay)
        yield self.inbox.put((self.index, payload))

    def release(self) -> None:
        """The receiver processed an item from this channel: one credit back."""
        self.credits.put(1)
