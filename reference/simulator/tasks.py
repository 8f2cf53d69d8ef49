"""The simulated records, barriers and replayable sources. A source keeps its offset in operator state and injects
barriers when the coordinator triggers; the keyed tasks downstream are in `keyed_tasks`."""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statecert.reference.serializers import BytesSerializer, LongSerializer
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
class Record:
    key: str
    source: int
    offset: int


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
    def __init__(self, sim: Simulation, index: int, attempt: int, handles: tuple[Any, ...]) -> None:
        self.sim, self.index, self.attempt = sim, index, attempt
        self.name = f"source-{index}"
        self.operator = sim.backend.create_operator_state_backend(OperatorBackendParameters("sim", "source", handles))
        self.offset_state = self.operator.get_list_state(OFFSET)
        restored = self.offset_state.get()
        self.offset = restored[0] if restored else 0
        self.outputs: list[Channel] = []
        self.barriers: deque[tuple[int, CheckpointOptions]] = deque()
        self.wake = sim.env.event()
        self.epoch = 0  # the last barrier this source emitted: records carry it, so in-flight data is known
        self.suspended = False  # by a stop-with-savepoint, until it completes or fails

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

    def run(self) -> Generator[Any, Any, None]:
        records = self.sim.inputs[self.index]
        if self.sim.spec.window_ms and records and self.offset == len(records):
            yield from self._watermark(MAX_TIMESTAMP)  # restored after the end: the end of event time again
        while self.alive:
            if self.barriers:
                checkpoint_id, options = self.barriers.popleft()
                self.offset_state.update([self.offset])
                location = self.sim.location(checkpoint_id)
                if location is None:
                    continue
                handle = self.operator.snapshot(checkpoint_id, int(self.sim.env.now), location, options).run()
                state = OperatorSubtaskState((), (handle,) if handle else ())
                self.sim.ack_later(
                    self.attempt, checkpoint_id, ("source", self.index), state, finished=self.offset == len(records)
                )
                self.epoch = checkpoint_id
                if checkpoint_id == self.sim.stop_savepoint:
                    self.suspended = True  # stop-with-savepoint: nothing after the savepoint's barrier
                    self.sim.end_offsets[self.index] = self.offset
                priority = self.sim.unaligned_barriers(options)
                for channel in self.outputs:
                    yield from channel.send(Barrier(checkpoint_id, options, channel.data_sent), priority)
            elif self.offset < len(records) and not self.suspended:
                record = records[self.offset]
                channel = self.outputs[self.sim.owner(self.sim.first_stage_key(record))]
                credit = channel.credits.get(1)
                self.wake = self.sim.env.event()
                yield credit | self.wake  # while waiting for an output buffer, a checkpoint trigger is still served
                if not credit.triggered:
                    credit.cancel()
                    continue
                channel.data_sent += 1
                channel.transmit((record, self.epoch))
                self.sim.in_flight += 1
                self.offset += 1
                if self.sim.spec.window_ms:
                    watermark = emits_watermark(record.offset, len(records), self.sim.spec.window_ms)
                    if watermark is not None:
                        yield from self._watermark(watermark)
                yield self.sim.env.timeout(self.sim.spec.record_interval_ms)
            else:
                self.wake = self.sim.env.event()
                yield self.wake

    def _watermark(self, timestamp: int) -> Generator[Any, Any, None]:
        """Broadcast a watermark, in order behind the records sent before it (it takes a buffer like they do)."""
        for channel in self.outputs:
            if not self.alive:
                return
            self.sim.in_flight += 1  # the end of the job waits for it: it may still fire windows
            yield from channel.send(Watermark(timestamp))

    def dispose(self) -> None:
        self.operator.dispose()
