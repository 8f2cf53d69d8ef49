"""The storage a keyed state kind works on: one state's entries by key group and (key bytes, namespace bytes).

The state kinds (`keyed_states`) are written once against this interface; the heap backend implements it with
copy-on-write dicts, the RocksDB backend with a column family. Stored values are the serializers' bytes, TTL-
wrapped when the state has TTL. A *payload* is an entry in the canonical format's form: bytes (value, reducing,
aggregating), a list of element bytes (list), or a list of `[user key, value]` pairs (map).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from statecert.reference.format.state_meta import StateMetaInfo

EntryKey = tuple[bytes, bytes]  # (key bytes, namespace bytes)
Payload = Any


class StateStore(Protocol):
    meta: StateMetaInfo
    """The state's kind, serializer snapshots and TTL flag; replaced when the state migrates."""

    def get(self, key_group: int, key: EntryKey) -> bytes | None: ...

    def put(self, key_group: int, key: EntryKey, value: bytes) -> None: ...

    def delete(self, key_group: int, key: EntryKey) -> None:
        """Remove the entry of any kind, a whole list or map included."""
        ...

    def get_list(self, key_group: int, key: EntryKey) -> list[bytes] | None: ...

    def set_list(self, key_group: int, key: EntryKey, elements: list[bytes]) -> None:
        """Replace the elements; an empty list removes the entry."""
        ...

    def append_list(self, key_group: int, key: EntryKey, elements: list[bytes]) -> None: ...

    def map_get(self, key_group: int, key: EntryKey, user_key: bytes) -> bytes | None: ...

    def map_put(self, key_group: int, key: EntryKey, entries: Mapping[bytes, bytes]) -> None: ...

    def map_remove(self, key_group: int, key: EntryKey, user_key: bytes) -> None:
        """Remove one user key; removing the last one removes the entry (KS-MAP-4)."""
        ...

    def map_items(self, key_group: int, key: EntryKey) -> list[tuple[bytes, bytes]]: ...

    def entries(self) -> Iterator[tuple[int, bytes, bytes, Payload]]:
        """(key group, key bytes, namespace bytes, payload) of every entry, in key-group order."""
        ...

    def put_payload(self, key_group: int, key: EntryKey, payload: Payload) -> None:
        """Replace an entry with a payload (restore and migration)."""
        ...

    def __len__(self) -> int:
        """Number of (key, namespace) entries (KS-4)."""
        ...
