"""A small third-party state backend: plain dicts, snapshots copied in the synchronous part.

It plugs into statecert's public authoring kit (`statecert.reference.authoring`: `KeyedStateBackendBase` gives
current key, state kinds, TTL, migration and canonical restore) by supplying a `StateStore` and a snapshot
strategy, which is all a backend author must write on this route.
Registered as `dict-example` in the `statecert.state_backends` entry-point group (see pyproject.toml).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from statecert.reference.authoring import (
    AsyncSnapshotTask,
    CanonicalHeader,
    DefaultOperatorStateBackend,
    KeyedStateBackendBase,
    StateMetaInfo,
    WrittenStreams,
    write_canonical_snapshot,
)
from statecert.spec.backend import BackendCapabilities
from statecert.spec.handles import KeyedStateHandle
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, CheckpointOptions, KeyedBackendParameters
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.state import StateKind
from statecert.spec.storage import CheckpointStreamFactory

EntryKey = tuple[bytes, bytes]


class DictStore:
    """One state: key group -> {(key, namespace): bytes | list[bytes] | dict[bytes, bytes]}."""

    def __init__(self, meta: StateMetaInfo) -> None:
        self.meta = meta
        self.groups: dict[int, dict[EntryKey, Any]] = {}

    def _entries(self, key_group: int) -> dict[EntryKey, Any]:
        return self.groups.setdefault(key_group, {})

    def get(self, key_group: int, key: EntryKey) -> bytes | None:
        return self.groups.get(key_group, {}).get(key)

    def put(self, key_group: int, key: EntryKey, value: bytes) -> None:
        self._entries(key_group)[key] = value

    def delete(self, key_group: int, key: EntryKey) -> None:
        self.groups.get(key_group, {}).pop(key, None)

    def get_list(self, key_group: int, key: EntryKey) -> list[bytes] | None:
        found = self.groups.get(key_group, {}).get(key)
        return None if found is None else list(found)

    def set_list(self, key_group: int, key: EntryKey, elements: list[bytes]) -> None:
        if elements:
            self._entries(key_group)[key] = list(elements)
        else:
            self.delete(key_group, key)

    def append_list(self, key_group: int, key: EntryKey, elements: list[bytes]) -> None:
        self._entries(key_group).setdefault(key, []).extend(elements)

    def map_get(self, key_group: int, key: EntryKey, user_key: bytes) -> bytes | None:
        value: bytes | None = self.groups.get(key_group, {}).get(key, {}).get(user_key)
        return value

    def map_put(self, key_group: int, key: EntryKey, entries: Mapping[bytes, bytes]) -> None:
        self._entries(key_group).setdefault(key, {}).update(entries)

    def map_remove(self, key_group: int, key: EntryKey, user_key: bytes) -> None:
        entries = self.groups.get(key_group, {}).get(key)
        if entries is not None:
            entries.pop(user_key, None)
            if not entries:
                self.delete(key_group, key)

    def map_items(self, key_group: int, key: EntryKey) -> list[tuple[bytes, bytes]]:
        return list(self.groups.get(key_group, {}).get(key, {}).items())

    def entries(self) -> Iterator[tuple[int, bytes, bytes, Any]]:
        for key_group in sorted(self.groups):
            for (key, ns), stored in list(self.groups[key_group].items()):
                yield key_group, key, ns, payload(self.meta.kind, stored)

    def put_payload(self, key_group: int, key: EntryKey, value: Any) -> None:
        if self.meta.kind is StateKind.MAP:
            self._entries(key_group)[key] = {k: v for k, v in value}
        elif self.meta.kind is StateKind.LIST:
            self._entries(key_group)[key] = list(value)
        else:
            self._entries(key_group)[key] = value

    def __len__(self) -> int:
        return sum(len(entries) for entries in self.groups.values())


def payload(kind: StateKind, stored: Any) -> Any:
    if kind is StateKind.MAP:
        return [[k, v] for k, v in stored.items()]
    return list(stored) if kind is StateKind.LIST else stored


class DictKeyedStateBackend(KeyedStateBackendBase):
    backend_name = "dict-example"

    def __init__(self, params: KeyedBackendParameters[Any]) -> None:
        super().__init__(params)
        self.restore_handles(params.restore_state)

    def create_store(self, meta: StateMetaInfo) -> DictStore:
        return DictStore(meta)

    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: CheckpointStreamFactory,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> AsyncSnapshotTask[KeyedStateHandle]:
        """Synchronous part: deep-copy every store (simple, O(state)); asynchronous part: write canonical groups."""
        self.check_open()
        stores = [s for _, s in sorted(self.stores.items()) if len(s)]
        metas = tuple(s.meta for s in stores)
        frozen = [copy.deepcopy(s.groups) for s in stores]
        header = CanonicalHeader(self.backend_name, self.key_serializer.snapshot_configuration(), metas)
        key_group_range = self.key_group_range
        streams = WrittenStreams(stream_factory)  # deleted if the part is cancelled or fails (KB-SNAP-6)

        def blocks(key_group: int) -> list[Any]:
            return [
                [index, key, ns, payload(metas[index].kind, stored)]
                for index, groups in enumerate(frozen)
                for (key, ns), stored in groups.get(key_group, {}).items()
            ]

        def write(cancelled: Callable[[], bool]) -> KeyedStateHandle | None:
            if not frozen:
                return None
            return write_canonical_snapshot(streams, header, key_group_range, blocks, cancelled)

        return self.snapshot_task(write, streams)


class DictStateBackend:
    name = "dict-example"
    capabilities = BackendCapabilities(incremental_checkpoints=False, native_savepoint_format=None, timers=True)

    def create_keyed_state_backend(self, params: KeyedBackendParameters[Any]) -> DictKeyedStateBackend:
        return DictKeyedStateBackend(params)

    def create_operator_state_backend(self, params: OperatorBackendParameters) -> DefaultOperatorStateBackend:
        return DefaultOperatorStateBackend(params)


def factory(config: Mapping[str, object]) -> DictStateBackend:
    return DictStateBackend()
