"""The public kit for backend authors who build on statecert's reference code instead of writing every format
themselves (the recommended route in the README). Everything here is documented, typed and stable:

- `KeyedStateBackendBase`: a keyed backend over per-state stores. Supply `create_store(meta)` returning a
  `StateStore`, and `snapshot(...)` returning `snapshot_task(write, streams)`, where `write` writes through
  `streams = WrittenStreams(stream_factory)` so that a cancelled or failed part deletes what it wrote; call
  `restore_handles(params.restore_state)` at the end of `__init__`. Optionally override `restore_foreign_handles`
  (native formats; a format made of canonical blocks reads each through `restore_canonical_handle`) and
  `release_resources` (close). It provides current key, the five state kinds, TTL, serializer compatibility and
  migration, key iteration, canonical restore and lifecycle.
- `StateStore`, `EntryKey`, `Payload`, `StateMetaInfo`: the storage interface a store implements.
- `CanonicalHeader`, `write_canonical_snapshot`: write the canonical key-group stream (chapter IF).
- `AsyncSnapshotTask`: a cancellable asynchronous snapshot part; `WrittenStreams`: the stream factory it writes
  through, whose streams it deletes when cancelled, even after the last one closed (KB-SNAP-6).
- `DefaultOperatorStateBackend`: operator state (split, union, broadcast) with the operator state stream (IF).
- The default serializers (`StringSerializer`, `LongSerializer`, `MsgpackSerializer`, ...; chapter IF), their base
  `BaseSerializer` (a subclass with a `serializer_id` registers itself) and `restore_serializer(snapshot)`, which
  rebuilds the serializer that wrote a snapshot from registered ids only (SER-4).

A backend may instead implement the protocols in `statecert.spec` directly and import nothing from here
; the formats it must write are normative in `spec/chapters/16-interchange.md`.
"""

from __future__ import annotations

from statecert.reference.format.canonical import CanonicalHeader, CanonicalReader, write_canonical_snapshot
from statecert.reference.format.state_meta import SERIALIZER_ROLES, StateMetaInfo
from statecert.reference.keyed_backend_base import KeyedStateBackendBase, descriptor_serializers
from statecert.reference.operator_state import DefaultOperatorStateBackend
from statecert.reference.serializers import (
    BaseSerializer,
    BooleanSerializer,
    BytesSerializer,
    DoubleSerializer,
    LongSerializer,
    MsgpackSerializer,
    StringSerializer,
    restore_serializer,
)
from statecert.reference.snapshot_task import AsyncSnapshotTask
from statecert.reference.state_store import EntryKey, Payload, StateStore
from statecert.reference.storage.written_streams import WrittenStreams

__all__ = [
    "SERIALIZER_ROLES",
    "AsyncSnapshotTask",
    "BaseSerializer",
    "BooleanSerializer",
    "BytesSerializer",
    "CanonicalHeader",
    "CanonicalReader",
    "DefaultOperatorStateBackend",
    "DoubleSerializer",
    "EntryKey",
    "KeyedStateBackendBase",
    "LongSerializer",
    "MsgpackSerializer",
    "Payload",
    "StateMetaInfo",
    "StateStore",
    "StringSerializer",
    "WrittenStreams",
    "descriptor_serializers",
    "restore_serializer",
    "write_canonical_snapshot",
]
