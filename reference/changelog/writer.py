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
        self._segments: list[ChangelogSegmentHandle] = []
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
            changes = tuple(c for c in self._appended if c.sequence > self._uploaded_to)
            states = {c.state: self._states[c.state] for c in changes}
            return PendingUpload(self._uploaded_to, self._sequence, states, changes)

    def upload(self, pending: PendingUpload, factory: CheckpointStreamFactory) -> ChangelogSegmentHandle | None:
        """Write captured changes as one shared segment; None when there were none. Confirmed changes leave
        memory; a failed upload leaves them for the next snapshot."""
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
            self._uploaded_to = max(self._uploaded_to, pending.up_to)
            self._appended = [c for c in self._appended if c.sequence > self._uploaded_to]
            self.bytes_uploaded += len(data)
        return segment

    def skip_to(self, sequence: int) -> None:
        """Changes up to `sequence` are in a materialization that needs no log before it: never upload them."""
        with self._lock:
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
