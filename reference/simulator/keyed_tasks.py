"""The simulated keyed tasks on real backends: routers (the middle stage of a 3-stage job, counting per key and
forwarding each record through a second keyed shuffle) and counters (counting per key, with an exactly-once sink
that stages output per checkpoint and commits it when the checkpoint completes, like Flink's two-phase-commit sinks).

Both handle barriers by the checkpointing mode: aligned (block the channels that delivered the barrier), unaligned
(snapshot on the first barrier and forward it as a priority event; records it overtook are persisted as input
channel state, a processed record still waiting for an output buffer as output channel state) or at-least-once
(no blocking)."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from statecert.reference.checkpointing import create_keyed_backend
from statecert.reference.coordinator.settings import CheckpointingMode
from statecert.reference.simulator.inbox import Inbox
from statecert.reference.simulator.output_buffers import DataBuffer, OutputBuffers
from statecert.reference.simulator.record_batch import RecordBatch
from statecert.reference.simulator.sink_output import OutputColumns, SinkPart
from statecert.reference.simulator.tasks import (
    CHANNEL_STATE,
    OUTPUT_STATE,
    Barrier,
    CheckpointProgress,
    Watermark,
    pack,
    unpack,
)
from statecert.reference.tumbling_windows import TumblingWindowOperator
from statecert.reference.union_markers import UNION_MARKERS, UnionRestore, marker
from statecert.spec.keyed_backend import CheckpointOptions, KeyedBackendParameters, SnapshotType
from statecert.spec.metadata import OperatorSubtaskState
from statecert.spec.operator_backend import OperatorBackendParameters

if TYPE_CHECKING:
    from statecert.reference.simulator.network import Channel
    from statecert.reference.simulator.runtime import Simulation


class SimulatedClock:
    """Simulated time in whole milliseconds, so TTL and changelog materialization intervals follow the simulation
    (and reports stay byte-identical per seed)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def now_ms(self) -> int:
        return int(self.env.now)


class KeyedTask:
    """A keyed stage's subtask: counts per key in keyed state and handles barriers; subclasses say what happens to
    a record after it is counted."""

    operator_id = "keyed"
    extra_ms = 0.0  # processing time on top of the job's per-record cost
    state_key = "aggregate_index"  # the keyspace column that says which state key a record updates
    small_buffer = 64  # buffers of up to this many records are grouped in Python (about 2x faster there; array
    # operations win from about 128 records on)

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
        self.name = f"{self.operator_id}-{index}"
        params = KeyedBackendParameters(
            "sim", self.operator_id, sim.keys, sim.spec.max_parallelism, key_group_range, keyed, SimulatedClock(sim.env)
        )
        with contextlib.ExitStack() as created:  # a task that never starts leaves nothing of it open
            self.keyed = create_keyed_backend(sim.backend, params)
            created.callback(self.keyed.dispose)
            self.aggregate = self.keyed.get_or_create_state(sim.aggregate.descriptor)
            self.operator = sim.backend.create_operator_state_backend(
                OperatorBackendParameters("sim", self.operator_id, operator)
            )
            created.callback(self.operator.dispose)
            self.channel_state = self.operator.get_list_state(CHANNEL_STATE)
            self.replay = [unpack(r) for r in self.channel_state.get()]
            self.channel_state.update([])
            created.pop_all()
        self.inbox = Inbox(sim.env)
        self.inputs: list[Channel] = []
        self.blocked: set[int] = set()
        self.buffered: deque[tuple[int, Any, bool]] = deque()
        self.ready: deque[tuple[int, Any, bool]] = deque()
        self.received: dict[int, int] = {}  # data records processed per channel (this attempt)
        self.progress: dict[int, CheckpointProgress] = {}
        self.keyed_handles: dict[int, Any] = {}
        self.options: dict[int, CheckpointOptions] = {}
        self.to_forward: list[int] = []  # aligned barriers snapshotted here, to send downstream
        self.replaying = True
        self.bundle: list[RecordBatch] = []  # mini-batch (SIM-15): buffers taken, not yet applied to state
        self.bundled = 0
        self.bundle_since = 0.0  # when the bundle's first record was taken

    @property
    def alive(self) -> bool:
        return self.sim.attempt == self.attempt

    @property
    def idle(self) -> bool:
        """Nothing restored, pending, bundled or staged: what the end of the job waits for."""
        return not self.replaying and not self.progress and not self.bundled

    @property
    def mini_batching(self) -> bool:
        return self.sim.spec.mini_batch_size > 0

    def notify_priority(self) -> None:
        """A priority event (an unaligned barrier) reached the inbox; only a task blocked on output cares."""

    def flush_deadline(self) -> float | None:
        """When something this task holds must go on though no input arrives: its mini-batch bundle (once its first
        record waited the allowed latency) or, in subclasses, output buffers (the buffer timeout)."""
        return self._bundle_deadline()

    def _bundle_deadline(self) -> float | None:
        latency = self.sim.spec.mini_batch_latency_ms
        return self.bundle_since + latency if self.bundled and latency > 0 else None

    def finish_bundle(self, due_only: bool = False) -> None:
        """Apply the mini-batch bundle to keyed state (each key's state read and written once) and stage what its
        records produce: when full, at the allowed latency, and before every snapshot (Flink finishes the bundle
        before the barrier)."""
        if not self.bundled:
            return
        deadline = self._bundle_deadline()
        if due_only and (deadline is None or self.sim.env.now < deadline):
            return
        bundle = RecordBatch.concat(self.bundle)
        self.bundle, self.bundled = [], 0
        self.update(bundle)

    # -- what subclasses add -------------------------------------------------------------------------------------------
    def update(self, records: RecordBatch) -> None:
        """Apply a buffer's records to keyed state and stage what each produces: per key one state read and one
        write, the key's records applied in order between them, so a buffer costs backend calls per key rather than
        per record (a buffer of one record: one read and one write, as ever). Keys are taken in the order of their
        first record and the records are staged grouped by key in that order; the running totals are array sums."""
        aggregate, state, keyed = self.sim.aggregate, self.aggregate, self.keyed
        group_keys = records.keyspace.keys_by_index[self.state_key]
        if len(records) == 1:  # the per-record model: no arrays to build
            key = group_keys[int(records.keyspace.column(self.state_key)[records.ids[0]])]
            keyed.set_current_key(key)
            offset = int(records.offsets[0])
            value = aggregate.add(state.value(), offset)
            state.update(value)
            self.stage(records, np.array([aggregate.total(value)], dtype=np.int64))
            return
        groups = records.keyspace.column(self.state_key)[records.ids]
        if len(records) <= self.small_buffer:
            self._update_small(records, groups.tolist(), group_keys)
            return
        unique, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
        appearance = np.argsort(first, kind="stable")
        rank = np.empty(len(unique), dtype=np.int64)
        rank[appearance] = np.arange(len(unique))
        record_rank = rank[inverse.reshape(-1)]
        order = np.argsort(record_rank, kind="stable")  # grouped by key, keys by first record, records in order
        grouped = records.take(order)
        weights = aggregate.weights(grouped.offsets)
        running = np.cumsum(weights)
        counts = np.bincount(record_rank, minlength=len(unique))
        ends = np.cumsum(counts)
        starts = ends - counts
        within = running - np.repeat(running[starts] - weights[starts], counts)  # per key, from its first record
        bases = []
        value_of, total = aggregate.value_of, aggregate.total
        for group, added, last in zip(
            unique[appearance].tolist(), within[ends - 1].tolist(), grouped.offsets[ends - 1].tolist(), strict=True
        ):
            keyed.set_current_key(group_keys[group])
            base = total(state.value())
            state.update(value_of(base + added, last))
            bases.append(base)
        self.stage(grouped, within + np.repeat(np.array(bases, dtype=np.int64), counts))

    def _update_small(self, records: RecordBatch, groups: list[int], group_keys: list[Any]) -> None:
        """`update` for a buffer of a few records, grouped in Python: the same state calls and staged output as
        the array path, without its fixed cost (wide jobs send mostly small buffers: few records per channel)."""
        aggregate, state, keyed = self.sim.aggregate, self.aggregate, self.keyed
        value_of, total = aggregate.value_of, aggregate.total
        weights, offsets = aggregate.weights(records.offsets).tolist(), records.offsets.tolist()
        by_key: dict[int, list[int]] = {}
        for i, group in enumerate(groups):
            positions = by_key.get(group)
            if positions is None:
                by_key[group] = [i]
            else:
                positions.append(i)
        order: list[int] = []
        totals: list[int] = []
        for group, positions in by_key.items():  # keys in the order of their first record
            keyed.set_current_key(group_keys[group])
            running = total(state.value())
            for i in positions:
                running += weights[i]
                totals.append(running)
            state.update(value_of(running, offsets[positions[-1]]))
            order.extend(positions)
        grouped = records if len(by_key) == 1 else records.take(np.array(order, dtype=np.intp))
        self.stage(grouped, np.array(totals, dtype=np.int64))

    def restore_output(self) -> Generator[Any, Any, None]:
        """Output channel state restored from an unaligned checkpoint: sent before any input is processed."""
        yield from ()

    def stage(self, records: RecordBatch, totals: npt.NDArray[np.int64]) -> None:
        """What the records produce (`totals[i]`: record i's key's running total after it), held until it is
        emitted (or committed)."""

    def emit(self) -> Generator[Any, Any, None]:
        """Send on what `stage` held; may wait for an output buffer."""
        yield from ()

    def on_snapshot(self, n: int) -> None:
        """The keyed state is being snapshotted for checkpoint n."""

    def forward(self, n: int, options: CheckpointOptions, priority: bool) -> Generator[Any, Any, None]:
        """Send barrier n downstream (a priority barrier needs no credit and is sent at once)."""
        yield from ()

    def output_state(self, n: int) -> list[bytes]:
        return []

    # -- the task loop -------------------------------------------------------------------------------------------------
    def run(self) -> Generator[Any, Any, None]:
        yield from self.restore_output()
        size = self.sim.spec.buffer_size_records
        for i in range(0, len(self.replay), size):  # input channel state restored from an unaligned checkpoint next
            if not self.alive:  # failed over while replaying: this attempt's backends are gone
                return
            yield from self._process(RecordBatch.of_records(self.replay[i : i + size], self.sim.keyspace))
        self.replaying = False
        while self.alive:
            if self.ready:
                channel, item, credit = self.ready.popleft()
            elif self.inbox.items:  # delivered already: taken at once, as a get would (it wins over a timeout)
                channel, item, credit = self.inbox.pop()
            else:
                get = self.inbox.get()
                deadline = self.flush_deadline()
                if deadline is not None:  # partly filled output buffers leave at the buffer timeout
                    yield get | self.sim.env.timeout(max(0.0, deadline - self.sim.env.now))
                    if not get.triggered:
                        self.inbox.cancel(get)
                        if self.alive:
                            self.finish_bundle(due_only=True)
                            yield from self.emit()
                        continue
                entry = yield get
                if not self.alive:
                    return
                if self.ready:  # released by an alignment timeout while we waited: those are older
                    self.ready.append(entry)
                    continue
                channel, item, credit = entry
            yield from self._handle(channel, item, credit)

    def _handle(self, channel: int, item: Any, credit: bool) -> Generator[Any, Any, None]:
        if channel in self.blocked and credit:
            self.buffered.append((channel, item, credit))  # its credit stays taken: backpressure
            return
        if isinstance(item, Barrier):
            blocked = self._on_barrier(channel, item)
        elif isinstance(item, Watermark):
            self.sim.in_flight -= 1
            self.on_watermark(channel, item.timestamp)
            blocked = 0.0
        else:
            records = item.records
            self.received[channel] = self.received.get(channel, 0) + len(records)
            self.sim.in_flight -= len(records)
            for n, progress in self.progress.items():
                if progress.unaligned and item.epoch < n:
                    progress.recorded.extend(records)  # sent before barrier n, which overtook them
            yield from self._process(records)
            blocked = sum(self._finish_if_complete(n) for n in list(self.progress))
        if credit:
            self.inputs[channel].release()
        yield from self._forward_pending()
        if blocked:
            yield self.sim.env.timeout(blocked)  # a synchronous snapshot stops the task while it writes

    def on_watermark(self, channel: int, timestamp: int) -> None:
        """A watermark arrived on `channel` (only window jobs send them)."""

    def _process(self, records: RecordBatch) -> Generator[Any, Any, None]:
        """A buffer's records: each count and what follows from it (staged output, the record to send on) change
        together when the buffer is taken, so a snapshot from a timer never sees one without the other; then the
        buffer's processing time passes (per record cost times its records). With mini-batch the buffer joins the
        bundle, applied when full, at the allowed latency or before a snapshot."""
        if self.mini_batching:
            if not self.bundled:
                self.bundle_since = self.sim.env.now
            self.bundle.append(records)
            self.bundled += len(records)
            if self.bundled >= self.sim.spec.mini_batch_size:
                self.finish_bundle()
        else:
            self.update(records)
        self.sim.processed += len(records)
        bucket = int(self.sim.env.now // 10) * 10  # records per task per 10 ms, for the timeline
        per_task = self.sim.records_per_bucket.setdefault(self.name, {})
        per_task[bucket] = per_task.get(bucket, 0) + len(records)
        yield self.sim.env.timeout((self.sim.spec.processing_ms + self.extra_ms) * len(records))
        self.sim.last_processed_at = self.sim.env.now
        if self.alive:  # else failed over while processing: this attempt's backends are gone
            yield from self.emit()

    # -- barriers ------------------------------------------------------------------------------------------------------
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
        progress = self.progress[n]
        progress.unaligned = True
        self._snapshot_keyed(n)
        for _ in self.forward(n, progress.options, priority=True):
            raise AssertionError("a priority barrier is sent without waiting")

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

    def _queued(self) -> list[tuple[int, DataBuffer]]:
        """Data buffers that arrived but were not processed yet, with their channels, in delivery order."""
        entries = [*self.ready, *self.buffered, *self.inbox.queued()]
        return [(c, item) for c, item, _ in entries if isinstance(item, DataBuffer)]

    def _finish_if_complete(self, n: int) -> float:
        """An unaligned checkpoint completes at this task once every barrier and every record sent before one
        have arrived: what the barrier overtook (queued here or still on the wire) is channel state, persisted
        without waiting for it to be processed."""
        progress = self.progress[n]
        if not progress.unaligned or len(progress.arrivals) < len(self.inputs):
            return 0.0
        queued = self._queued()
        arrived = dict(self.received)
        for channel, buffer in queued:
            arrived[channel] = arrived.get(channel, 0) + len(buffer.records)
        if any(arrived.get(c, 0) < before for c, before in progress.arrivals.items()):
            return 0.0
        for _, buffer in queued:
            if buffer.epoch < n:
                progress.recorded.extend(buffer.records)
        return self._finish(n)

    def _snapshot_and_finish(self, n: int) -> float:
        self._snapshot_keyed(n)
        self.to_forward.append(n)
        return self._finish(n)

    def _forward_pending(self) -> Generator[Any, Any, None]:
        """Aligned and at-least-once barriers go downstream after the snapshot, behind the data sent before."""
        while self.to_forward:
            n = self.to_forward.pop(0)
            yield from self.forward(n, self.options[n], priority=False)

    def _snapshot_keyed(self, n: int) -> None:
        options = self.progress[n].options
        self.options[n] = options
        if self.sim.crash_in_phase(self.name, "snapshot"):
            return  # failed in the synchronous part: no handle, the failover follows at once
        self.finish_bundle()
        self.on_snapshot(n)
        location = self.sim.location(n, options)
        if location is not None and not self.sim.storage_down:
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
        location = self.sim.location(n, progress.options)
        if location is None:
            return 0.0
        if n not in self.keyed_handles or self.sim.storage_down:
            self.sim.decline(n, (self.operator_id, self.index))
            return 0.0
        recorded = progress.recorded
        self.channel_state.update([pack(r) for r in recorded])
        output = self.operator.get_list_state(OUTPUT_STATE)
        output.update([pack(r) for r in progress.output])
        self.sim.in_flight_bytes += sum(len(r.key) + 16 for r in [*recorded, *progress.output])
        self.sim.persisted_output_records += len(progress.output)
        self.before_operator_snapshot(n)
        operator = self.operator.snapshot(n, int(self.sim.env.now), location, progress.options).run()
        self.channel_state.update([])
        output.update([])
        keyed = self.keyed_handles.pop(n)
        state = OperatorSubtaskState((keyed,) if keyed else (), (operator,) if operator else ())
        return self.sim.ack_later(self.attempt, n, (self.operator_id, self.index), state)

    def before_operator_snapshot(self, n: int) -> None:
        """What a stage writes into its operator state for checkpoint `n`, beside channel and output state."""

    def dispose(self) -> None:
        self.keyed.dispose()
        self.operator.dispose()


class CounterTask(KeyedTask):
    """The last stage: aggregates per key and stages (key, offset, running total) in its sink's open transaction."""

    operator_id = "counter"
    state_key = "counter_index"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.extra_ms = self.sim.spec.sink_ms
        self.open_txn: list[SinkPart] = []
        self.txns: dict[int, list[SinkPart]] = {}
        self.window = TumblingWindowOperator(self.keyed, self.sim.spec.window_ms) if self.sim.spec.window_ms else None
        self.watermarks: dict[int, int] = {}  # per input channel, since this attempt started
        self.union = self.operator.get_union_list_state(UNION_MARKERS) if self.sim.spec.union_state else None
        if self.union is not None and self.sim.restoring is not None:
            checkpoint_id, parallelism = self.sim.restoring
            restored = UnionRestore(checkpoint_id, parallelism, self.index, tuple(self.union.get()))
            self.sim.union_restores.append(restored)

    def before_operator_snapshot(self, n: int) -> None:
        if self.union is not None:  # this subtask's marker only: what it restored from the others is not its own
            self.union.update([marker(self.index, n)])

    def update(self, records: RecordBatch) -> None:
        if self.window is None:
            super().update(records)
            return
        key_of, weight = self.sim.aggregate.key, self.sim.aggregate.weight
        for record in records:
            self.window.process(key_of(record.key, record.source), record.offset, weight(record.offset))

    def on_watermark(self, channel: int, timestamp: int) -> None:
        """The task's watermark is the least over its inputs; windows it passes fire into the open transaction."""
        assert self.window is not None, "a watermark reached a job without windows"
        self.watermarks[channel] = max(timestamp, self.watermarks.get(channel, timestamp))
        if len(self.watermarks) == len(self.inputs):
            fired = self.window.advance_watermark(min(self.watermarks.values()))
            if fired:
                self.open_txn.append(list(fired))

    @property
    def idle(self) -> bool:
        return super().idle and not self.open_txn and not self.txns

    @property
    def mini_batching(self) -> bool:
        return self.window is None and super().mini_batching  # as in Flink: windowed aggregations do not bundle

    def stage(self, records: RecordBatch, totals: npt.NDArray[np.int64]) -> None:
        self.open_txn.append(OutputColumns(records.ids, records.offsets, totals))

    def on_snapshot(self, n: int) -> None:
        self.txns[n] = self.open_txn
        self.open_txn = []

    def commit(self, checkpoint_id: int) -> list[SinkPart]:
        committed: list[SinkPart] = []
        for n in sorted(t for t in self.txns if t <= checkpoint_id):
            committed.extend(self.txns.pop(n))
        return committed


class RouterTask(KeyedTask):
    """The middle stage of a 3-stage job: counts per key, then sends the record through a second keyed shuffle in
    network buffers (SIM-14). Waiting for an output buffer, it still takes unaligned barriers, which overtake the
    records not sent yet: those become output channel state."""

    operator_id = "router"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.outputs: list[Channel] = []
        self.buffers = OutputBuffers([], 1, 0.0)
        self.epoch = 0  # the last barrier forwarded: buffers carry it, so downstream knows what was in flight
        self.priority_wake = self.sim.env.event()
        self.restored_output = [unpack(r) for r in self.operator.get_list_state(OUTPUT_STATE).get()]
        self.operator.get_list_state(OUTPUT_STATE).update([])

    def connect(self, outputs: list[Channel]) -> None:
        self.outputs = outputs
        self.buffers = OutputBuffers(outputs, self.sim.spec.buffer_size_records, self.sim.spec.buffer_timeout_ms)

    @property
    def idle(self) -> bool:
        return super().idle and not self.buffers.count and not self.restored_output

    def flush_deadline(self) -> float | None:
        deadlines = [d for d in (self.buffers.deadline(), super().flush_deadline()) if d is not None]
        return min(deadlines, default=None)

    def notify_priority(self) -> None:
        if not self.priority_wake.triggered:
            self.priority_wake.succeed()

    def restore_output(self) -> Generator[Any, Any, None]:
        for record in self.restored_output:
            self.buffers.add(self.sim.owner(self.sim.counter_key(record)), record, self.sim.keyspace, self.sim.env.now)
            self.sim.in_flight += 1
        self.restored_output = []
        yield from self.emit(flush=True)

    def stage(self, records: RecordBatch, totals: npt.NDArray[np.int64]) -> None:
        owners = records.keyspace.column("counter_owner")[records.ids]
        self.buffers.add_batch(owners, records, self.sim.env.now)
        self.sim.in_flight += len(records)

    def emit(self, flush: bool = False) -> Generator[Any, Any, None]:
        """Send the buffers that are due: full ones, and every one once the oldest record waited the timeout (or
        with `flush`)."""
        while self.alive and (index := self.buffers.due(self.sim.env.now, flush)) is not None:
            credits = self.outputs[index].credits
            if credits.try_take():
                self.buffers.transmit(index, self.epoch)
                continue
            self.priority_wake = self.sim.env.event()
            released = credits.released()
            yield released | self.priority_wake
            if not released.triggered:
                self._take_priority_barriers()

    def _flush(self) -> Generator[Any, Any, None]:
        """Send every open buffer, waiting for credits (before an aligned barrier)."""
        while self.alive and (index := self.buffers.due(self.sim.env.now, flush=True)) is not None:
            yield from self.outputs[index].credits.take()
            if self.alive:
                self.buffers.transmit(index, self.epoch)

    def _take_priority_barriers(self) -> None:
        """Unaligned barriers that reached the inbox while this task waits for an output buffer (they sort first)."""
        while self.inbox.priority_first():
            channel, barrier, _ = self.inbox.pop()
            self._on_barrier(channel, barrier)

    def forward(self, n: int, options: CheckpointOptions, priority: bool) -> Generator[Any, Any, None]:
        if priority:
            progress = self.progress.get(n)
            if progress is not None:
                progress.output.extend(self.buffers.pending())  # processed before the barrier, not yet sent
            for channel in self.outputs:
                channel.send_priority(Barrier(n, options, channel.data_sent))
            self.epoch = n
            return
        yield from self._flush()  # an aligned barrier follows every record before it
        for channel in self.outputs:
            yield from channel.send(Barrier(n, options, channel.data_sent))
        self.epoch = n
