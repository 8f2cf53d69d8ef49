"""The durable short-term log (DSTL) writer (CL-3): changes are appended in memory with ascending sequence numbers
and uploaded as segment files into the checkpoint storage's shared scope when a checkpoint asks for them, so a
segment stays exactly as long as a retained checkpoint references it (CKP-2)."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from typing import Any

from statecert.reference.changelog.records import Change, LoggedState, Op, encode_segment
from statecert.spec.handles import ByteStreamStateHandle, ChangelogSegmentHandle, StreamStateHandle
from statecert.spec.serializers import SerializerSnapshot
from statecert.spec.storage import CheckpointedStateScope, CheckpointStreamFactory


@dataclass(frozen=True)
class PendingUpload:
    """Changes captured in a snapshot's synchronous part, written in its asynchronous part."""

    after: int
    up_to: int
    states: dict[str, LoggedState]
    changes: tuple[Change, ...]


class StateChangelogWriter:
    def __init__(self, key_serializer: SerializerSnapshot, inline: bool = False) -> None:
        self._key_serializer = key_serializer
        self._inline = inline
        self._lock = threading.Lock()
        self._sequence = 0
        self._appended: list[Change] = []  # not yet confirmed uploaded
        self._states: dict[str, LoggedState] = {}
        self._uploaded_to = 0
        self._skipped_to = 0  # changes up to here are in a materialization: never uploaded again
        self._segments: list[ChangelogSegmentHandle] = []
        self._latest: tuple[int, ChangelogSegmentHandle, tuple[Change, ...]] | None = None  # kept until confirmed
        self._latest_captured = False  # a later snapshot's synchronous part already builds on the latest upload
        self.bytes_uploaded = 0

    @property
    def last_sequence(self) -> int:
        return self._sequence

    def describe(self, state: LoggedState) -> None:
        with self._lock:
            self._states[state.meta.name] = state

    def append(
        self, key_group: int, state: str, op: Op, key: bytes, namespace: bytes, timestamp: int, payload: Any
    ) -> None:
        with self._lock:
            self._sequence += 1
            self._appended.append(Change(self._sequence, key_group, state, op, key, namespace, timestamp, payload))

    def capture(self) -> PendingUpload:
        """The changes not yet uploaded, up to now (a snapshot's synchronous part)."""
        with self._lock:
            self._latest_captured = self._latest is not None
            changes = tuple(c for c in self._appended if c.sequence > self._uploaded_to)
            states = {c.state: self._states[c.state] for c in changes}
            return PendingUpload(self._uploaded_to, self._sequence, states, changes)

    def upload(
        self, pending: PendingUpload, factory: CheckpointStreamFactory, checkpoint_id: int
    ) -> ChangelogSegmentHandle | None:
        """Write captured changes as one shared segment for `checkpoint_id`; None when there were none. Uploaded
        changes leave the queue (the latest upload's are kept until `confirm` or `reset`); a failed upload leaves
        them for the next snapshot."""
        if not pending.changes:
            return None
        data = encode_segment(self._key_serializer, pending.states, list(pending.changes))
        handle: StreamStateHandle | None
        if self._inline:  # state.changelog.storage: memory
            handle = ByteStreamStateHandle(f"changelog-{uuid.uuid4().hex}", data)
        else:
            with factory.create_checkpoint_state_output_stream(CheckpointedStateScope.SHARED) as out:
                out.write(data)
                handle = out.close_and_get_handle()
        if handle is None:
            raise OSError("the checkpoint stream returned no handle for a changelog segment")
        segment = ChangelogSegmentHandle(handle, pending.after, pending.up_to)
        with self._lock:
            self._segments.append(segment)
            self._latest = (checkpoint_id, segment, pending.changes)
            self._latest_captured = False
            self._uploaded_to = max(self._uploaded_to, pending.up_to)
            self._appended = [c for c in self._appended if c.sequence > self._uploaded_to]
            self.bytes_uploaded += len(data)
        return segment

    def confirm(self, checkpoint_id: int) -> None:
        """A checkpoint completed: an upload made for it, or for an earlier one, stays in later checkpoints."""
        with self._lock:
            if self._latest is not None and self._latest[0] <= checkpoint_id:
                self._latest = None

    def reset(self, checkpoint_id: int, covered_to: int = 0) -> ChangelogSegmentHandle | None:
        """The latest checkpoint was aborted or its asynchronous part cancelled: its segment is dropped from later
        checkpoints and returned, and its changes after `covered_to` (those a materialization kept as the base does
        not hold) are uploaded again by the next one, so no checkpoint references a file of an aborted one
        (KB-SNAP-9; Flink's `StateChangelogWriter.reset`). An upload superseded since, already confirmed, or captured
        upon by a later snapshot (whose changes start after it) is left alone."""
        with self._lock:
            if self._latest is None or self._latest[0] != checkpoint_id:
                return None
            _, segment, changes = self._latest
            self._latest = None
            if self._latest_captured or not self._segments or self._segments[-1] is not segment:
                return None  # a later checkpoint references it already, or it left the log
            self._segments.pop()
            covered = max(self._skipped_to, covered_to)
            kept = [c for c in changes if c.sequence > covered]
            self._appended = [*kept, *self._appended]
            self._uploaded_to = max(segment.from_sequence, covered)
            return segment

    def skip_to(self, sequence: int) -> None:
        """Changes up to `sequence` are in a materialization that needs no log before it: never upload them."""
        with self._lock:
            self._skipped_to = max(self._skipped_to, sequence)
            self._uploaded_to = max(self._uploaded_to, sequence)
            self._appended = [c for c in self._appended if c.sequence > sequence]

    def segments_after(self, sequence: int) -> tuple[ChangelogSegmentHandle, ...]:
        """The uploaded segments holding changes after `sequence` (a materialization's sequence number)."""
        with self._lock:
            return tuple(s for s in self._segments if s.to_sequence > sequence)

    def truncate(self, sequence: int) -> None:
        """Forget segments wholly at or before `sequence`: a completed checkpoint holds a materialization that
        includes them (CL-5). Their files stay while older retained checkpoints reference them."""
        with self._lock:
            self._segments = [s for s in self._segments if s.to_sequence > sequence]
