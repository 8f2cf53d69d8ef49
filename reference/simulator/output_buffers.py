"""A sender's network buffers, one open buffer per output channel (SIM-14). Records are appended as the task emits
them; a buffer leaves as one message when it holds `size` records, when the task flushes before an event (barrier,
watermark) or at the end of its input, and once its oldest record has waited `timeout_ms` (Flink's
`execution.buffer-timeout`). Each message takes one credit of the receiver: flow control, alignment and unaligned
overtaking work per buffer, and the simulator pays one simpy event per buffer instead of per record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statecert.reference.simulator.network import Channel
    from statecert.reference.simulator.tasks import Record


@dataclass(frozen=True)
class DataBuffer:
    """Records sent as one message. `epoch` is the last barrier its sender had sent when the buffer left: a receiver
    knows from it which checkpoints' barriers overtook the buffer (its records are their input channel state)."""

    records: tuple[Record, ...]
    epoch: int


class OutputBuffers:
    def __init__(self, channels: list[Channel], size: int, timeout_ms: float) -> None:
        self.channels = channels
        self.size = size
        self.timeout_ms = timeout_ms
        self.open: list[list[Record]] = [[] for _ in channels]
        self.full: dict[int, None] = {}  # channels whose buffer holds `size` records, in the order they filled
        self.filled: dict[int, None] = {}  # channels whose buffer holds a record, in the order they got their first
        self.oldest = 0.0  # when the oldest record still in an open buffer was appended
        self.count = 0

    def add(self, index: int, record: Record, now: float) -> None:
        buffer = self.open[index]
        if not self.count:
            self.oldest = now
        buffer.append(record)
        self.count += 1
        if len(buffer) == 1:
            self.filled[index] = None
        if len(buffer) == self.size:
            self.full[index] = None

    def due(self, now: float, flush: bool = False) -> int | None:
        """The channel whose buffer leaves next: a full one; with `flush` or past the timeout, any that holds one."""
        if self.full:
            return next(iter(self.full))
        if self.count and (flush or now >= self.oldest + self.timeout_ms):
            return next(iter(self.filled))
        return None

    def deadline(self) -> float | None:
        """When the open buffers time out, if any holds a record."""
        return self.oldest + self.timeout_ms if self.count else None

    def take(self, index: int) -> tuple[Record, ...]:
        """Up to `size` records of the channel's buffer, oldest first, for one message."""
        buffer = self.open[index]
        records, rest = tuple(buffer[: self.size]), buffer[self.size :]
        self.open[index] = rest
        self.count -= len(records)
        if len(rest) < self.size:
            self.full.pop(index, None)
        if not rest:
            self.filled.pop(index, None)
        return records  # `oldest` stays: a buffer may leave early, never later than the timeout

    def transmit(self, index: int, epoch: int) -> int:
        """Send the channel's next buffer, whose credit the sender holds; returns the records it carried."""
        records = self.take(index)
        channel = self.channels[index]
        channel.data_sent += len(records)
        channel.transmit(DataBuffer(records, epoch))
        return len(records)

    def pending(self) -> list[Record]:
        """Every record in an open buffer (not sent yet): output channel state when an unaligned barrier overtakes
        them."""
        return [record for buffer in self.open for record in buffer]
