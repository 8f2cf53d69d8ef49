"""The simulated records, barriers and replayable sources. A source keeps its offset in operator state and injects
barriers when the coordinator triggers; the keyed tasks downstream are in `keyed_tasks`."""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np

from statecert.reference.serializers import BytesSerializer, LongSerializer
from statecert.reference.simulator.output_buffers import OutputBuffers
from statecert.reference.simulator.record import Record
from statecert.reference.simulator.record_batch import RecordBatch
from statecert.reference.tumbling_windows import emits_watermark
from statecert.spec.keyed_backend import CheckpointOptions
from statecert.spec.metadata import OperatorSubtaskState
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.state import ListStateDescriptor
from statecert.spec.timers import MAX_TIMESTAMP

if TYPE_CHECKING:
    from statecert.reference.simulator.network import Channel
    from statecert.reference.simulator.runtime import Simulation

OFFSET = ListStateDescriptor("offset", element_serializer=LongSerializer())
OUTPUT_STATE = ListStateDescriptor("output-channel-state", element_serializer=BytesSerializer())
CHANNEL_STATE = ListStateDescriptor("channel-state", element_serializer=BytesSerializer())


@dataclass(frozen=True)
class Barrier:
    checkpoint_id: int
    options: CheckpointOptions
    records_before: int = 0  # records the sender had sent on this channel before the barrier


@dataclass(frozen=True)
class Watermark:
    """Event time up to `timestamp` is complete on this channel (sources send one at each window's end)."""

    timestamp: int


@dataclass
class CheckpointProgress:
    """One checkpoint at one keyed task: which barriers arrived (with how many records preceded each), whether it
    runs unaligned, the overtaken input records and the not yet sent output recorded as channel state."""

    options: CheckpointOptions
    first_at: float
    arrivals: dict[int, int] = field(default_factory=dict)
    unaligned: bool = False
    recorded: list[Record] = field(default_factory=list)
    output: list[Record] = field(default_factory=list)


class SourceTask:
    """A source split: emits its records in order at `record_interval_ms` each into network buffers (SIM-14), keeps
    its offset in operator state and injects barriers when the coordinator triggers. An aligned barrier follows the
    buffers before it; an unaligned one overtakes the buffers not sent yet, which become the source's output channel
    state (SIM-5) and are sent first after a restore."""

    def __init__(self, sim: Simulation, index: int, attempt: int, handles: tuple[Any, ...]) -> None:
        self.sim, self.index, self.attempt = sim, index, attempt
        self.name = f"source-{index}"
        self.operator = sim.backend.create_operator_state_backend(OperatorBackendParameters("sim", "source", handles))
        try:
            self.offset_state = self.operator.get_list_state(OFFSET)
            self.output_state = self.operator.get_list_state(OUTPUT_STATE)
            restored = self.offset_state.get()
            self.offset = restored[0] if restored else 0
            self.restored_output = [unpack(raw) for raw in self.output_state.get()]
            self.output_state.update([])
        except BaseException:
            self.operator.dispose()  # the task never starts: nothing of it may stay open
            raise
        self.outputs: list[Channel] = []
        self.buffers = OutputBuffers([], 1, 0.0)
        self.barriers: deque[tuple[int, CheckpointOptions]] = deque()
        self.wake = sim.env.event()
        self.epoch = 0  # the last barrier this source emitted: buffers carry it, so in-flight data is known
        self.suspended = False  # by a stop-with-savepoint, until it completes or fails

    def connect(self, outputs: list[Channel]) -> None:
        spec = self.sim.spec
        self.outputs = outputs
        self.buffers = OutputBuffers(outputs, spec.buffer_size_records, spec.buffer_timeout_ms)
        for record in self.restored_output:  # output channel state: sent before any new record
            self._add(record)
        self.restored_output = []

    def resume(self) -> None:
        """The stop-with-savepoint failed: the job goes on."""
        self.suspended = False
        if not self.wake.triggered:
            self.wake.succeed()

    @property
    def alive(self) -> bool:
        return self.sim.attempt == self.attempt

    def request_barrier(self, checkpoint_id: int, options: CheckpointOptions) -> None:
        self.barriers.append((checkpoint_id, options))
        if not self.wake.triggered:
            self.wake.succeed()

    def _add(self, record: Record) -> None:
        self.buffers.add(self.sim.first_owner(record), record, self.sim.keyspace, self.sim.env.now)
        self.sim.in_flight += 1

    def _send(self, index: int) -> Generator[Any, Any, None]:
        """Send the channel's next buffer if it has a credit; else wait for one or for a checkpoint trigger, whichever
        comes first (a trigger is served while the source waits for an output buffer)."""
        credits = self.outputs[index].credits
        if credits.try_take():
            self.buffers.transmit(index, self.epoch)
            return
        self.wake = self.sim.env.event()
        yield credits.released() | self.wake

    def _flush(self) -> Generator[Any, Any, None]:
        """Send every open buffer, waiting for credits (before an aligned barrier or a watermark)."""
        while (index := self.buffers.due(self.sim.env.now, flush=True)) is not None:
            yield from self.outputs[index].credits.take()
            if not self.alive:
                return
            self.buffers.transmit(index, self.epoch)

    def run(self) -> Generator[Any, Any, None]:
        ids = self.sim.input_ids[self.index]
        length = len(ids)
        window_ms = self.sim.spec.window_ms
        if window_ms and length and self.offset == length:
            yield from self._watermark(MAX_TIMESTAMP)  # restored after the end: the end of event time again
        next_at = 0.0  # when the source emits its next records
        while self.alive:
            exhausted = self.offset >= length or self.suspended
            due = self.buffers.due(self.sim.env.now, flush=exhausted)
            if self.barriers:
                yield from self._barrier(*self.barriers.popleft())
            elif due is not None:
                yield from self._send(due)
            elif not exhausted and self.sim.env.now < next_at:  # the batch's records take their time; a checkpoint
                self.wake = self.sim.env.event()  # trigger meanwhile is served at once, behind the batch
                yield self.sim.env.timeout(next_at - self.sim.env.now) | self.wake
            elif not exhausted:
                end = min(length, self.offset + self.buffers.size)
                watermark = None
                if window_ms:  # a batch ends at the record after which the split sends a watermark
                    for offset in range(self.offset, end):
                        watermark = emits_watermark(offset, length, window_ms)
                        if watermark is not None:
                            end = offset + 1
                            break
                batch = ids[self.offset : end]
                offsets = np.arange(self.offset, end, dtype=np.int64)
                owners = self.sim.keyspace.column("first_owner")[batch]
                self.buffers.add_batch(owners, RecordBatch(batch, offsets, self.sim.keyspace), self.sim.env.now)
                self.sim.in_flight += len(batch)
                self.offset += len(batch)
                next_at = self.sim.env.now + self.sim.spec.record_interval_ms * len(batch)
                if watermark is not None:
                    yield from self._flush()
                    yield from self._watermark(watermark)
            else:
                self.wake = self.sim.env.event()
                yield self.wake

    def _barrier(self, checkpoint_id: int, options: CheckpointOptions) -> Generator[Any, Any, None]:
        location = self.sim.location(checkpoint_id, options)
        if location is None:
            return
        priority = self.sim.unaligned_barriers(options)
        if priority:  # the barrier overtakes the buffers not sent yet: they are output channel state
            output = self.buffers.pending()
            self.output_state.update([pack(r) for r in output])
            self.sim.in_flight_bytes += sum(len(r.key) + 16 for r in output)
            self.sim.persisted_output_records += len(output)
        else:
            yield from self._flush()  # the barrier follows the records before it
            if not self.alive:
                return
        length = len(self.sim.input_ids[self.index])
        self.offset_state.update([self.offset])
        handle = self.operator.snapshot(checkpoint_id, int(self.sim.env.now), location, options).run()
        self.output_state.update([])
        state = OperatorSubtaskState((), (handle,) if handle else ())
        self.sim.ack_later(
            self.attempt,
            checkpoint_id,
            ("source", self.index),
            state,
            finished=self.offset == length and not self.buffers.count,
        )
        self.epoch = checkpoint_id
        if checkpoint_id == self.sim.stop_savepoint:
            self.suspended = True  # stop-with-savepoint: nothing after the savepoint's barrier
            self.sim.end_offsets[self.index] = self.offset
        for channel in self.outputs:
            yield from channel.send(Barrier(checkpoint_id, options, channel.data_sent), priority)

    def _watermark(self, timestamp: int) -> Generator[Any, Any, None]:
        """Broadcast a watermark, in order behind the records sent before it (it takes a buffer like they do)."""
        for channel in self.outputs:
            if not self.alive:
                return
            self.sim.in_flight += 1  # the end of the job waits for it: it may still fire windows
            yield from channel.send(Watermark(timestamp))

    def dispose(self) -> None:
        self.operator.dispose()


def pack(record: Record) -> bytes:
    return bytes(msgpack.packb([record.key, record.source, record.offset]))


def unpack(raw: bytes) -> Record:
    return Record(*msgpack.unpackb(raw))
