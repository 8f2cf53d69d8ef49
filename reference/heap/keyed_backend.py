"""The heap keyed state backend: per-key-group dicts of serialized state, copy-on-write canonical snapshots."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statecert.reference.format.canonical import CanonicalHeader, Entry, write_canonical_snapshot
from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.heap.state_table import Cell, StateTable
from statecert.reference.keyed_backend_base import KeyedStateBackendBase
from statecert.reference.snapshot_task import AsyncSnapshotTask
from statecert.reference.storage.written_streams import WrittenStreams
from statecert.spec.handles import KeyedStateHandle
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, CheckpointOptions, KeyedBackendParameters
from statecert.spec.storage import CheckpointStreamFactory


def entry_blocks(captured: list[list[dict[Any, Any]]], start: int) -> Callable[[int], list[Entry]]:
    """The canonical entries of one key group from the captured key-group dicts of each snapshotted state (in the
    header's order), for `write_canonical_snapshot`; `start` is the first key group of the captured range."""

    def blocks(key_group: int) -> list[Entry]:
        # to_payload inlined (the hot loop of a snapshot); a captured list cell is never written again (a later
        # write copies it), so its list goes to the packer as it is
        entries: list[Entry] = []
        append = entries.append
        for index, maps in enumerate(captured):
            for (key, ns), stored in maps[key_group - start].items():
                if type(stored) is Cell:
                    data = stored.data
                    stored = [[k, v] for k, v in data.items()] if type(data) is dict else data
                append([index, key, ns, stored])
        return entries

    return blocks


class HeapKeyedStateBackend(KeyedStateBackendBase):
    """Keyed state of one subtask on the heap; see `state_table` for snapshot isolation."""

    backend_name = "hashmap"

    def __init__(self, params: KeyedBackendParameters[Any]) -> None:
        super().__init__(params)
        self.restore_handles(params.restore_state)

    def create_store(self, meta: StateMetaInfo) -> StateTable:
        return StateTable(meta, self.key_group_range)

    def capture_states(self) -> tuple[CanonicalHeader, list[list[dict[Any, Any]]]]:
        """A snapshot's synchronous part: the canonical header of the states holding entries, and each one's
        key-group dicts captured (copy-on-write from here on), in the header's order."""
        names = sorted(n for n, t in self._stores.items() if len(t))
        metas = tuple(self._stores[n].meta for n in names)
        captured = [self._stores[n].capture() for n in names]
        return CanonicalHeader(self.backend_name, self._key_serializer.snapshot_configuration(), metas), captured

    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: CheckpointStreamFactory,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> AsyncSnapshotTask[KeyedStateHandle]:
        """Synchronous part: capture every table's key-group dicts (copy-on-write from here on) (KB-SNAP-2).
        The heap backend's native format is the canonical one, so every snapshot type is written alike."""
        self.check_open()
        header, captured = self.capture_states()
        key_group_range = self.key_group_range
        start = key_group_range.start
        streams = WrittenStreams(stream_factory)

        def write(cancelled: Callable[[], bool]) -> KeyedStateHandle | None:
            if not captured:
                return None  # an empty backend snapshots to nothing (KB-SNAP-7)
            return write_canonical_snapshot(streams, header, key_group_range, entry_blocks(captured, start), cancelled)

        return self.track_snapshot(AsyncSnapshotTask(write, self._pending.discard, streams.discard))
