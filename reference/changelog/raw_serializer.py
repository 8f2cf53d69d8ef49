"""A serializer that passes already serialized bytes through under another serializer's snapshot, so a replay
writes exactly the bytes the original serializer produced without knowing that serializer (CL-4)."""

from __future__ import annotations

from typing import Any

from statecert.reference.serializers import restore_serializer
from statecert.spec.serializers import SchemaCompatibility, SerializerSnapshot


class RawSerializer:
    def __init__(self, snapshot: SerializerSnapshot) -> None:
        self._snapshot = snapshot

    @property
    def serializer_id(self) -> str:
        return self._snapshot.serializer_id

    def serialize(self, value: Any) -> bytes:
        """Bytes pass through; anything else (a backend serializing the void namespace itself) goes through the
        serializer the registry restores for the snapshot."""
        if isinstance(value, bytes):
            return value
        return restore_serializer(self._snapshot).serialize(value)

    def deserialize(self, data: bytes) -> bytes:
        return bytes(data)

    def key_hash(self, value: Any) -> int:
        raise TypeError("replayed state is never keyed by a raw serializer")

    def snapshot_configuration(self) -> SerializerSnapshot:
        return self._snapshot

    def resolve_compatibility(self, old: SerializerSnapshot) -> SchemaCompatibility[Any]:
        if old == self._snapshot:
            return SchemaCompatibility.as_is()
        return SchemaCompatibility.incompatible(f"the log was written under {self._snapshot}, the state under {old}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawSerializer) and other._snapshot == self._snapshot

    def __hash__(self) -> int:
        return hash(self._snapshot.serializer_id)
