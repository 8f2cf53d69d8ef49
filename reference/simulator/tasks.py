"""The simulated tasks: replayable sources and keyed counters with an exactly-once sink, on real backends.

A source keeps its offset in operator state and injects barriers when the coordinator triggers. A counter counts
per key in keyed state, stages its output per checkpoint (committed when the checkpoint completes, like Flink's
two-phase-commit sinks) and handles barriers by the checkpointing mode: aligned (block channels that delivered the
barrier), unaligned (snapshot on the first barrier; records overtaken by it are persisted as channel state) or
at-least-once (no blocking)."""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
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


def handle_size(state: OperatorSubtaskState) -> int:
    return state.state_size


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
                for channel in self.outputs:
                    yield from channel.send(Barrier(checkpoint_id, options))
            elif self.offset < len(records):
                record = records[self.offset]
                yield from self.outputs[self.sim.owner(record.key)].send(record)
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
        self.inbox = simpy.Store(sim.env)
        self.inputs: list[Channel] = []
        self.open_txn: list[tuple[str, int, int]] = []
        self.txns: dict[int, list[tuple[str, int, int]]] = {}
        self.blocked: set[int] = set()
        self.buffered: deque[tuple[int, Any]] = deque()
        self.ready: deque[tuple[int, Any]] = deque()
        self.arrivals: dict[int, set[int]] = {}
        self.first_barrier_at: dict[int, float] = {}
        self.recording: dict[int, list[Record]] = {}
        self.keyed_handles: dict[int, Any] = {}

    @property
    def alive(self) -> bool:
        return self.sim.attempt == self.attempt

    def run(self) -> Generator[Any, Any, None]:
        for record in self.replay:  # channel state restored from an unaligned checkpoint comes first
            yield from self._process(record)
        while self.alive:
            if self.ready:
                channel, item = self.ready.popleft()
            else:
                channel, item = yield self.inbox.get()
                if not self.alive:
                    return
            if channel in self.blocked:
                self.buffered.append((channel, item))  # its credit stays taken: backpressure on that channel
                continue
            if isinstance(item, Barrier):
                self._on_barrier(channel, item)
            else:
                for checkpoint_id, recorded in self.recording.items():
                    if channel not in self.arrivals[checkpoint_id]:
                        recorded.append(item)  # overtaken by barrier checkpoint_id: in-flight data
                yield from self._process(item)
            self.inputs[channel].release()

    def _process(self, record: Record) -> Generator[Any, Any, None]:
        self.keyed.set_current_key(record.key)
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        self.open_txn.append((record.key, record.offset, count))
        self.sim.processed += 1
        yield self.sim.env.timeout(self.sim.spec.processing_ms)

    def _on_barrier(self, channel: int, barrier: Barrier) -> None:
        n = barrier.checkpoint_id
        arrivals = self.arrivals.setdefault(n, set())
        if not arrivals:
            self.first_barrier_at[n] = self.sim.env.now
        arrivals.add(channel)
        complete = len(arrivals) == len(self.inputs)
        mode = self.sim.spec.checkpointing.mode
        aligned = mode is CheckpointingMode.EXACTLY_ONCE or barrier.options.snapshot_type is not SnapshotType.CHECKPOINT
        if aligned:
            if not complete:
                self.blocked.add(channel)
                return
            self.blocked.clear()
            self.ready.extend(self.buffered)
            self.buffered.clear()
            self._snapshot_keyed(n, barrier.options)
            self._finish(n, barrier.options)
        elif mode is CheckpointingMode.UNALIGNED:
            if len(arrivals) == 1:
                self._snapshot_keyed(n, barrier.options)
                self.recording[n] = []
            if complete:
                self._finish(n, barrier.options)
        elif complete:  # at-least-once: whatever arrived after early barriers is in the snapshot
            self._snapshot_keyed(n, barrier.options)
            self._finish(n, barrier.options)

    def _snapshot_keyed(self, n: int, options: CheckpointOptions) -> None:
        self.txns[n] = self.open_txn
        self.open_txn = []
        location = self.sim.location(n)
        if location is not None:
            self.keyed_handles[n] = self.keyed.snapshot(n, int(self.sim.env.now), location, options).run()

    def _finish(self, n: int, options: CheckpointOptions) -> None:
        recorded = self.recording.pop(n, [])
        self.sim.alignment_ms.append(self.sim.env.now - self.first_barrier_at.pop(n))
        del self.arrivals[n]
        location = self.sim.location(n)
        if location is None or n not in self.keyed_handles:
            return
        self.channel_state.update([msgpack.packb([r.key, r.source, r.offset]) for r in recorded])
        self.sim.in_flight_bytes += sum(len(r.key) + 16 for r in recorded)
        operator = self.operator.snapshot(n, int(self.sim.env.now), location, options).run()
        self.channel_state.update([])
        keyed = self.keyed_handles.pop(n)
        state = OperatorSubtaskState((keyed,) if keyed else (), (operator,) if operator else ())
        self.sim.ack_later(self.attempt, n, ("counter", self.index), state)

    def commit(self, checkpoint_id: int) -> list[tuple[str, int, int]]:
        committed = []
        for n in sorted(t for t in self.txns if t <= checkpoint_id):
            committed.extend(self.txns.pop(n))
        return committed

    def dispose(self) -> None:
        self.keyed.dispose()
        self.operator.dispose()
