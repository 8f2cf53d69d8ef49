"""The simulated tasks: replayable sources and keyed counters with an exactly-once sink, on real backends.

A source keeps its offset in operator state and injects barriers when the coordinator triggers. A counter counts
per key in keyed state, stages its output per checkpoint (committed when the checkpoint completes, like Flink's
two-phase-commit sinks) and handles barriers by the checkpointing mode: aligned (block channels that delivered the
barrier), unaligned (snapshot on the first barrier; records overtaken by it are persisted as channel state) or
at-least-once (no blocking)."""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack
import simpy

from statecert.reference.coordinator.settings import CheckpointingMode
from statecert.reference.serializers import BytesSerializer, LongSerializer
from statecert.spec.keyed_backend import CheckpointOptions, KeyedBackendParameters, SnapshotType
from statecert.spec.metadata import OperatorSubtaskState
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.state import ListStateDescriptor, ValueStateDescriptor

if TYPE_CHECKING:
    from statecert.reference.simulator.network import Channel
    from statecert.reference.simulator.runtime import Simulation

OFFSET = ListStateDescriptor("offset", element_serializer=LongSerializer())
COUNT = ValueStateDescriptor("count", serializer=LongSerializer())
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


@dataclass
class CheckpointProgress:
    """One checkpoint at one counter: which barriers arrived (with how many records preceded each), whether it
    runs unaligned, and the overtaken records recorded as channel state."""

    options: CheckpointOptions
    first_at: float
    arrivals: dict[int, int] = field(default_factory=dict)
    unaligned: bool = False
    recorded: list[Record] = field(default_factory=list)


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

    @property
    def alive(self) -> bool:
        return self.sim.attempt == self.attempt

    def request_barrier(self, checkpoint_id: int, options: CheckpointOptions) -> None:
        self.barriers.append((checkpoint_id, options))
        if not self.wake.triggered:
            self.wake.succeed()

    def run(self) -> Generator[Any, Any, None]:
        records = self.sim.inputs[self.index]
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
                priority = self.sim.unaligned_barriers(options)
                for channel in self.outputs:
                    yield from channel.send(Barrier(checkpoint_id, options, channel.data_sent), priority)
            elif self.offset < len(records):
                record = records[self.offset]
                channel = self.outputs[self.sim.owner(record.key)]
                credit = channel.credits.get(1)
                self.wake = self.sim.env.event()
                yield credit | self.wake  # while waiting for an output buffer, a checkpoint trigger is still served
                if not credit.triggered:
                    credit.cancel()
                    continue
                channel.data_sent += 1
                channel.transmit((record, self.epoch))
                self.offset += 1
                yield self.sim.env.timeout(self.sim.spec.record_interval_ms)
            else:
                self.wake = self.sim.env.event()
                yield self.wake

    def dispose(self) -> None:
        self.operator.dispose()


class CounterTask:
    def __init__(
        self,
        sim: Simulation,
        index: int,
        attempt: int,
        keyed: tuple[Any, ...],
        operator: tuple[Any, ...],
        key_group_range: Any,
    ) -> None:
        self.sim, self.index, self.attempt = sim, index, attempt
        self.name = f"counter-{index}"
        params = KeyedBackendParameters("sim", "counter", sim.keys, sim.spec.max_parallelism, key_group_range, keyed)
        self.keyed = sim.backend.create_keyed_state_backend(params)
        self.count = self.keyed.get_or_create_state(COUNT)
        self.operator = sim.backend.create_operator_state_backend(OperatorBackendParameters("sim", "counter", operator))
        self.channel_state = self.operator.get_list_state(CHANNEL_STATE)
        self.replay = [Record(*msgpack.unpackb(r)) for r in self.channel_state.get()]
        self.channel_state.update([])
        self.inbox = simpy.PriorityStore(sim.env)
        self.inputs: list[Channel] = []
        self.open_txn: list[tuple[str, int, int]] = []
        self.txns: dict[int, list[tuple[str, int, int]]] = {}
        self.blocked: set[int] = set()
        self.buffered: deque[tuple[int, Any, bool]] = deque()
        self.ready: deque[tuple[int, Any, bool]] = deque()
        self.received: dict[int, int] = {}  # data records processed per channel (this attempt)
        self.progress: dict[int, CheckpointProgress] = {}
        self.keyed_handles: dict[int, Any] = {}

    @property
    def alive(self) -> bool:
        return self.sim.attempt == self.attempt

    def run(self) -> Generator[Any, Any, None]:
        for record in self.replay:  # channel state restored from an unaligned checkpoint comes first
            yield from self._process(record)
        while self.alive:
            if self.ready:
                channel, item, credit = self.ready.popleft()
            else:
                entry = yield self.inbox.get()
                if not self.alive:
                    return
                if self.ready:  # released by an alignment timeout while we waited: those are older
                    self.ready.append(entry.item)
                    continue
                channel, item, credit = entry.item
            if channel in self.blocked and credit:
                self.buffered.append((channel, item, credit))  # its credit stays taken: backpressure
                continue
            if isinstance(item, Barrier):
                blocked = self._on_barrier(channel, item)
            else:
                record, epoch = item
                self.received[channel] = self.received.get(channel, 0) + 1
                for n, progress in self.progress.items():
                    if progress.unaligned and epoch < n:
                        progress.recorded.append(record)  # sent before barrier n, which overtook it
                yield from self._process(record)
                blocked = sum(self._finish_if_complete(n) for n in list(self.progress))
            if credit:
                self.inputs[channel].release()
            if blocked:
                yield self.sim.env.timeout(blocked)  # a synchronous snapshot stops the task while it writes

    def _process(self, record: Record) -> Generator[Any, Any, None]:
        self.keyed.set_current_key(record.key)
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        self.open_txn.append((record.key, record.offset, count))
        self.sim.processed += 1
        bucket = int(self.sim.env.now // 10) * 10  # records per task per 10 ms, for the timeline
        per_task = self.sim.records_per_bucket.setdefault(self.name, {})
        per_task[bucket] = per_task.get(bucket, 0) + 1
        yield self.sim.env.timeout(self.sim.spec.processing_ms)

    def _on_barrier(self, channel: int, barrier: Barrier) -> float:
        """Returns how long the task stays blocked (synchronous snapshots only)."""
        n = barrier.checkpoint_id
        progress = self.progress.get(n)
        if progress is None:
            progress = self.progress[n] = CheckpointProgress(barrier.options, self.sim.env.now)
            self.sim.start_delays.append(self.sim.env.now - self.sim.triggered_at.get(n, self.sim.env.now))
        progress.arrivals[channel] = barrier.records_before
        all_arrived = len(progress.arrivals) == len(self.inputs)
        settings = self.sim.spec.checkpointing
        savepoint = barrier.options.snapshot_type is not SnapshotType.CHECKPOINT
        if progress.unaligned:
            return self._finish_if_complete(n)
        if settings.mode is CheckpointingMode.UNALIGNED and not savepoint:
            self._go_unaligned(n)  # snapshot at the first barrier, record what it overtook
            return self._finish_if_complete(n)
        if settings.mode is CheckpointingMode.AT_LEAST_ONCE and not savepoint:
            return self._snapshot_and_finish(n) if all_arrived else 0.0  # later records are in the snapshot
        if not all_arrived:  # aligned: block the channels that delivered the barrier
            if len(progress.arrivals) == 1 and settings.alignment_timeout_ms is not None and not savepoint:
                self.sim.env.process(self._alignment_timeout(n, settings.alignment_timeout_ms))
            self.blocked.add(channel)
            return 0.0
        self._unblock()
        return self._snapshot_and_finish(n)

    def _go_unaligned(self, n: int) -> None:
        self.progress[n].unaligned = True
        self._snapshot_keyed(n)

    def _unblock(self) -> None:
        self.blocked.clear()
        self.ready.extend(self.buffered)
        self.buffered.clear()

    def _alignment_timeout(self, n: int, timeout: float) -> Generator[Any, Any, None]:
        """Aligned for `timeout` ms, then unaligned: snapshot now, persist what the barrier still overtakes."""
        yield self.sim.env.timeout(timeout)
        progress = self.progress.get(n)
        if not self.alive or progress is None or progress.unaligned:
            return
        self.sim.switched_to_unaligned += 1
        self._go_unaligned(n)
        self._unblock()  # blocked items came after barrier n on their channels: not in-flight data of n

    def _queued(self) -> list[tuple[int, Record, int]]:
        """Data records that arrived but were not processed yet: (channel, record, epoch)."""
        entries = [*self.ready, *self.buffered, *(e.item for e in sorted(self.inbox.items))]  # delivery order
        return [(c, item[0], item[1]) for c, item, _ in entries if not isinstance(item, Barrier)]

    def _finish_if_complete(self, n: int) -> float:
        """An unaligned checkpoint completes at this task once every barrier and every record sent before one
        have arrived: what the barrier overtook (queued here or still on the wire) is channel state, persisted
        without waiting for it to be processed."""
        progress = self.progress[n]
        if not progress.unaligned or len(progress.arrivals) < len(self.inputs):
            return 0.0
        queued = self._queued()
        arrived = dict(self.received)
        for channel, _, _ in queued:
            arrived[channel] = arrived.get(channel, 0) + 1
        if any(arrived.get(c, 0) < before for c, before in progress.arrivals.items()):
            return 0.0
        progress.recorded.extend(record for _, record, epoch in queued if epoch < n)
        return self._finish(n)

    def _snapshot_and_finish(self, n: int) -> float:
        self._snapshot_keyed(n)
        return self._finish(n)

    def _snapshot_keyed(self, n: int) -> None:
        self.txns[n] = self.open_txn
        self.open_txn = []
        location = self.sim.location(n)
        if location is not None and not self.sim.storage_down:
            options = self.progress[n].options
            self.keyed_handles[n] = self.keyed.snapshot(n, int(self.sim.env.now), location, options).run()

    def _finish(self, n: int) -> float:
        progress = self.progress.pop(n)
        self.sim.alignment_ms.append(self.sim.env.now - progress.first_at)
        self.sim.spans.append(
            {
                "task": self.name,
                "kind": "unaligned" if progress.unaligned else "aligning",
                "start": round(progress.first_at, 3),
                "end": round(self.sim.env.now, 3),
                "checkpoint": n,
            }
        )
        location = self.sim.location(n)
        if location is None:
            return 0.0
        if n not in self.keyed_handles or self.sim.storage_down:
            self.sim.decline(n, ("counter", self.index))
            return 0.0
        recorded = progress.recorded
        self.channel_state.update([msgpack.packb([r.key, r.source, r.offset]) for r in recorded])
        self.sim.in_flight_bytes += sum(len(r.key) + 16 for r in recorded)
        operator = self.operator.snapshot(n, int(self.sim.env.now), location, progress.options).run()
        self.channel_state.update([])
        keyed = self.keyed_handles.pop(n)
        state = OperatorSubtaskState((keyed,) if keyed else (), (operator,) if operator else ())
        return self.sim.ack_later(self.attempt, n, ("counter", self.index), state)

    def commit(self, checkpoint_id: int) -> list[tuple[str, int, int]]:
        committed = []
        for n in sorted(t for t in self.txns if t <= checkpoint_id):
            committed.extend(self.txns.pop(n))
        return committed

    def dispose(self) -> None:
        self.keyed.dispose()
        self.operator.dispose()
