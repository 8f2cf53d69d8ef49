"""A sender's network buffers, one open buffer per output channel (SIM-14). Records are appended as the task emits
them; a buffer leaves as one message when it holds `size` records, when the task flushes before an event (barrier,
watermark) or at the end of its input, and once its oldest record has waited `timeout_ms` (Flink's
`execution.buffer-timeout`). Each message takes one credit of the receiver: flow control, alignment and unaligned
overtaking work per buffer, and the simulator pays one simpy event per buffer instead of per record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from statecert.reference.simulator.record_batch import RecordBatch

if TYPE_CHECKING:
    from statecert.reference.simulator.keyspace import Keyspace
    from statecert.reference.simulator.network import Channel
    from statecert.reference.simulator.record import Record


@dataclass(frozen=True)
class DataBuffer:
    """Records sent as one message. `epoch` is the last barrier its sender had sent when the buffer left: a receiver
    knows from it which checkpoints' barriers overtook the buffer (its records are their input channel state)."""

    records: RecordBatch
    epoch: int


class OutputBuffers:
    """Per channel the open buffer, as the record batches appended to it (a batch's records are split by channel
    with array operations); which buffers are full and which hold a record are tracked in the order a record at a
    time would have made them so."""

    def __init__(self, channels: list[Channel], size: int, timeout_ms: float) -> None:
        self.channels = channels
        self.size = size
        self.timeout_ms = timeout_ms
        self.open: list[list[RecordBatch]] = [[] for _ in channels]
        self.lengths = [0] * len(channels)
        self.full: dict[int, None] = {}  # channels whose buffer holds `size` records, in the order they filled
        self.filled: dict[int, None] = {}  # channels whose buffer holds a record, in the order they got their first
        self.oldest = 0.0  # when the oldest record still in an open buffer was appended
        self.count = 0

    def add(self, index: int, record: Record, keyspace: Keyspace, now: float) -> None:
        """One record (restored output channel state)."""
        self.add_batch(np.array([index], dtype=np.int64), RecordBatch.of_records([record], keyspace), now)

    def add_batch(self, owners: npt.NDArray[np.int64], batch: RecordBatch, now: float) -> None:
        """Append each record of `batch`, in order, to the buffer of its channel `owners[i]`."""
        n = len(batch)
        if not n:
            return
        if not self.count:
            self.oldest = now
        self.count += n
        size, lengths = self.size, self.lengths
        if n == 1:
            present, order, starts, counts = [int(owners[0])], None, [0], [1]
        else:
            order = np.argsort(owners, kind="stable")
            sorted_owners = owners[order]
            bounds = np.flatnonzero(np.diff(sorted_owners)) + 1
            starts = [0, *bounds.tolist()]
            counts = np.diff([*starts, n]).tolist()
            present = sorted_owners[starts].tolist()
        events: list[tuple[int, int, int]] = []  # (position in the batch, 0 filled / 1 full, channel)
        for index, start, count in zip(present, starts, counts, strict=True):
            chunk = batch if order is None else batch.take(order[start : start + count])
            self.open[index].append(chunk)
            before = lengths[index]
            lengths[index] = before + count
            if before == 0:
                events.append((0 if order is None else int(order[start]), 0, index))
            if before < size <= before + count:
                events.append((0 if order is None else int(order[start + size - before - 1]), 1, index))
        if len(events) > 1:
            events.sort()
        for _, kind, index in events:
            (self.full if kind else self.filled)[index] = None

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

    def take(self, index: int) -> RecordBatch:
        """Up to `size` records of the channel's buffer, oldest first, for one message."""
        chunks = self.open[index]
        whole = RecordBatch.concat(chunks)
        if len(whole) > self.size:
            records, rest = whole.take(slice(0, self.size)), whole.take(slice(self.size, None))
            self.open[index] = [rest]
        else:
            records, rest = whole, None
            self.open[index] = []
        self.lengths[index] -= len(records)
        self.count -= len(records)
        if self.lengths[index] < self.size:
            self.full.pop(index, None)
        if rest is None:
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
        return [record for chunks in self.open for chunk in chunks for record in chunk]
