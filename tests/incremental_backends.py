"""A correct backend whose checkpoints are incremental by key group, the first incremental design a Python author
without RocksDB reaches for: the suite must certify it too, and its bugs are what the incremental tests must catch.

`by_key_group` is the heap backend (copy-on-write key-group dicts) whose tables report the key groups each write
touches. A checkpoint writes one shared-scope file holding only the key groups changed since the last *completed*
checkpoint (KB-SNAP-9), in the canonical block format with a header of its own, and references the earlier files
of the key groups that did not change; a small exclusive file (`meta_state`) maps each key group to its file and
offset. A key group's file always holds the key group whole, so a restore reads every key group from one file.
Full checkpoints (KB-SNAP-10) and native savepoints (SP-4) write every key group; canonical savepoints are the
heap backend's. A restore from one handle of its own covering exactly the backend's range keeps that handle's
files as the base of the next checkpoint, as the RocksDB backend keeps its SST files (RDB-3).
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgpack

from statecert.reference.format.canonical import describe, write_key_groups
from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.heap.keyed_backend import HeapKeyedStateBackend, entry_blocks
from statecert.reference.heap.state_table import StateTable
from statecert.reference.snapshot_task import AsyncSnapshotTask
from statecert.reference.storage.written_streams import WrittenStreams
from statecert.spec.errors import CheckpointFormatError
from statecert.spec.handles import (
    IncrementalKeyedStateHandle,
    KeyedStateHandle,
    KeyGroupsStateHandle,
    StreamStateHandle,
)
from statecert.spec.keyed_backend import (
    DEFAULT_CHECKPOINT_OPTIONS,
    CheckpointOptions,
    KeyedBackendParameters,
    SnapshotType,
)
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.storage import CheckpointedStateScope, CheckpointStreamFactory

FORMAT = "native:by-key-group"
_NAME = re.compile(r"[0-9a-f]{32}")


class TrackedTable(StateTable):
    """A heap state table that adds to `changed` the key group of every write (every write goes through `put` or
    `_write`, which copies the key group's dict on its first write after a capture)."""

    def __init__(self, meta: StateMetaInfo, key_group_range: KeyGroupRange, changed: set[int]) -> None:
        super().__init__(meta, key_group_range)
        self._changed = changed

    def _write(self, key_group: int) -> dict[Any, Any]:
        self._changed.add(key_group)
        return super()._write(key_group)

    def put(self, key_group: int, key: Any, value: bytes) -> None:
        self._changed.add(key_group)
        super().put(key_group, key, value)


@dataclass(frozen=True)
class Files:
    """Where a checkpoint's key groups lie: key group -> (shared file name, offset), the files by name, and the
    state metas and key serializer the files were written with."""

    checkpoint_id: int
    key_groups: Mapping[int, tuple[str, int]]
    shared: Mapping[str, StreamStateHandle]
    metas: Mapping[str, StateMetaInfo]
    key_serializer: Any


def _format_error(handle: StreamStateHandle, problem: str) -> CheckpointFormatError:
    return CheckpointFormatError(describe(handle), problem)


def pack_key_group_map(rows: list[list[Any]]) -> bytes:
    """`meta_state`'s bytes: the rows [key group, file name, offset] as one msgpack array, so that a cut one is
    incomplete msgpack (FMT-8)."""
    return msgpack.packb(rows, use_bin_type=True)  # type: ignore[no-any-return]


def unpack_key_group_map(handle: IncrementalKeyedStateHandle) -> Any:
    """The rows `pack_key_group_map` wrote, read from `handle.meta_state`, unchecked."""
    with handle.meta_state.open() as f:
        data = f.read()
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (ValueError, msgpack.UnpackException) as e:
        raise _format_error(handle.meta_state, f"not a key-group map ({e})") from None


def read_key_group_map(plain: Any, handle: IncrementalKeyedStateHandle) -> dict[int, tuple[str, int]]:
    """The key group -> (file name, offset) map of the rows `plain` of `handle`'s `meta_state`, checked against the
    handle."""
    if not isinstance(plain, list):
        raise _format_error(handle.meta_state, "not a key-group map")
    out: dict[int, tuple[str, int]] = {}
    for row in plain:
        if not (
            isinstance(row, list)
            and len(row) == 3
            and type(row[0]) is int
            and isinstance(row[1], str)
            and type(row[2]) is int
        ):
            raise _format_error(handle.meta_state, f"bad key-group row {row!r}")
        key_group, name, offset = row
        if key_group not in handle.key_group_range or key_group in out:
            raise _format_error(handle.meta_state, f"key group {key_group} outside {handle.key_group_range} or twice")
        if name not in handle.shared_state or offset < 0:
            raise _format_error(handle.meta_state, f"key group {key_group} in unknown file {name!r} at {offset}")
        out[key_group] = (name, offset)
    return out


class ByKeyGroupKeyedStateBackend(HeapKeyedStateBackend):
    """The heap backend with checkpoints incremental by key group (see the module docstring)."""

    backend_name = "by-key-group"
    delta_scope = CheckpointedStateScope.SHARED
    """Where a checkpoint writes its file of changed key groups: later checkpoints reference it (CS-3)."""
    pack_key_group_map = staticmethod(pack_key_group_map)
    unpack_key_group_map = staticmethod(unpack_key_group_map)

    def __init__(self, params: KeyedBackendParameters[Any]) -> None:
        self._changed: set[int] = set()  # key groups written since the last snapshot's synchronous part
        self._epochs: list[tuple[int, frozenset[int]]] = []  # (snapshot sequence, key groups changed before it)
        self._sequence = 0
        self._taken: dict[int, int] = {}  # checkpoint id -> sequence of its snapshot
        self._written: dict[int, Files] = {}  # finished checkpoints, candidates for the base
        self._base: Files | None = None
        self._lock = threading.Lock()
        super().__init__(params)

    def create_store(self, meta: StateMetaInfo) -> StateTable:
        return TrackedTable(meta, self.key_group_range, self._changed)

    # -- restore -------------------------------------------------------------------------------------------------
    def restore_foreign_handles(self, handles: Sequence[Any]) -> None:
        ours = [h for h in handles if isinstance(h, IncrementalKeyedStateHandle) and h.snapshot_format == FORMAT]
        if len(ours) != len(handles):
            super().restore_foreign_handles([h for h in handles if h not in ours])
        maps = [read_key_group_map(self.unpack_key_group_map(handle), handle) for handle in ours]
        for handle, key_groups in zip(ours, maps, strict=True):
            for key_group, (name, offset) in sorted(key_groups.items()):
                if key_group in self.key_group_range:
                    one = KeyGroupRange(key_group, key_group)
                    self.restore_canonical_handle(KeyGroupsStateHandle(one, (offset,), handle.shared_state[name]))
        if len(ours) == 1 == len(handles) and ours[0].key_group_range == self.key_group_range:
            handle = ours[0]
            metas = {name: store.meta for name, store in self._stores.items()}
            self._base = Files(
                handle.checkpoint_id,
                maps[0],
                dict(handle.shared_state),
                metas,
                self._key_serializer.snapshot_configuration(),
            )
            self._changed.clear()  # what was restored is the base's files

    # -- snapshots -----------------------------------------------------------------------------------------------
    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: CheckpointStreamFactory,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> AsyncSnapshotTask[KeyedStateHandle]:
        """Synchronous part: the heap capture, and which key groups changed since the base; asynchronous part:
        those key groups into one shared file, and the key-group map."""
        if options.snapshot_type is SnapshotType.SAVEPOINT_CANONICAL:
            return super().snapshot(checkpoint_id, timestamp_ms, stream_factory, options)
        self.check_open()
        header, captured = self.capture_states()
        key_serializer = header.key_serializer
        self._sequence += 1
        self._epochs.append((self._sequence, frozenset(self._changed)))
        self._changed.clear()
        is_checkpoint = options.snapshot_type is SnapshotType.CHECKPOINT
        if is_checkpoint:
            self._taken[checkpoint_id] = self._sequence
        base = self._base if is_checkpoint and not options.full else None
        if base is not None and (
            base.key_serializer != key_serializer
            or any(name in self._stores and self._stores[name].meta != meta for name, meta in base.metas.items())
        ):
            base = None  # the base's files were written with other serializers
        changed = set().union(*(kgs for _, kgs in self._epochs)) if base is not None else set(self.key_group_range)
        start, key_group_range = self.key_group_range.start, self.key_group_range
        occupied = {start + i for maps in captured for i, entries in enumerate(maps) if entries}
        fresh = sorted(changed & occupied)
        kept = self.reused_key_groups(base, changed, occupied) if base is not None else {}
        all_metas = {name: store.meta for name, store in self._stores.items()}

        streams = WrittenStreams(stream_factory)

        def write(cancelled: Callable[[], bool]) -> KeyedStateHandle | None:
            if not captured and not kept:
                return None  # an empty backend snapshots to nothing (KB-SNAP-7)
            key_groups = dict(kept)
            shared = {name: base.shared[name] for name, _ in kept.values()} if base is not None else {}
            if fresh:
                blocks = entry_blocks(captured, start)
                chosen = set(fresh)
                name = uuid.uuid4().hex
                scope = self.delta_scope if is_checkpoint else CheckpointedStateScope.EXCLUSIVE
                with streams.create_checkpoint_state_output_stream(scope) as out:
                    offsets = write_key_groups(
                        out, header, key_group_range, lambda kg: blocks(kg) if kg in chosen else [], cancelled
                    )
                    delegate = out.close_and_get_handle()
                assert delegate is not None
                shared[name] = delegate
                for kg in fresh:
                    key_groups[kg] = (name, offsets[kg - start])
            rows = [[kg, name, offset] for kg, (name, offset) in sorted(key_groups.items())]
            with streams.create_checkpoint_state_output_stream(CheckpointedStateScope.EXCLUSIVE) as out:
                out.write(self.pack_key_group_map(rows))
                meta_state = out.close_and_get_handle()
            assert meta_state is not None
            if is_checkpoint:
                with self._lock:
                    self._written[checkpoint_id] = Files(checkpoint_id, key_groups, shared, all_metas, key_serializer)
            return IncrementalKeyedStateHandle(
                self.backend_name, key_group_range, checkpoint_id, shared, {}, meta_state, FORMAT
            )

        return self.snapshot_task(write, streams)

    def reused_key_groups(self, base: Files, changed: set[int], occupied: set[int]) -> dict[int, tuple[str, int]]:
        """The base's key groups a checkpoint references instead of writing them: those unchanged since the base
        (`occupied`: the key groups holding entries now)."""
        return {kg: base.key_groups[kg] for kg in base.key_groups if kg not in changed}

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """The checkpoint becomes the base if this backend wrote it and it is later than the base (KB-SNAP-9)."""
        with self._lock:
            files = self._written.pop(checkpoint_id, None)
            if files is None or (self._base is not None and checkpoint_id <= self._base.checkpoint_id):
                return
            self._base = files
            sequence = self._taken[checkpoint_id]
            self._epochs = [(s, kgs) for s, kgs in self._epochs if s > sequence]
            for earlier in [c for c in self._written if c < checkpoint_id]:
                del self._written[earlier]
            self._taken = {c: s for c, s in self._taken.items() if c > checkpoint_id}

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """An aborted checkpoint is never a base; the key groups it changed stay changed (KB-SNAP-9)."""
        with self._lock:
            self._written.pop(checkpoint_id, None)
            self._taken.pop(checkpoint_id, None)


class ByKeyGroupStateBackend(HashMapStateBackend):
    """The heap backend's capabilities and operator state, with checkpoints incremental by key group and native
    savepoints in its own format."""

    name = "by-key-group"
    capabilities = replace(
        HashMapStateBackend.capabilities, incremental_checkpoints=True, native_savepoint_format=FORMAT
    )

    def create_keyed_state_backend(self, params: KeyedBackendParameters[Any]) -> ByKeyGroupKeyedStateBackend:
        return ByKeyGroupKeyedStateBackend(params)

    def __repr__(self) -> str:
        return "ByKeyGroupStateBackend()"


def by_key_group(config: Mapping[str, object]) -> ByKeyGroupStateBackend:
    return ByKeyGroupStateBackend()
