"""Serializers and schema compatibility (spec chapter SER).

A serializer turns values into bytes and back, records a configuration snapshot in every checkpoint, and on
restore decides whether the new serializer can read state written by the old one.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


@dataclass(frozen=True)
class SerializerSnapshot:
    """A serializer's configuration as written into a checkpoint (SER-2): plain data only, never code."""

    serializer_id: str
    version: int
    config: Mapping[str, Any] = field(default_factory=dict)

    def to_plain(self) -> dict[str, Any]:
        return {"id": self.serializer_id, "version": self.version, "config": dict(self.config)}

    @classmethod
    def from_plain(cls, data: Mapping[str, Any]) -> SerializerSnapshot:
        if not isinstance(data, Mapping):
            raise ValueError(f"malformed serializer snapshot: {data!r}")
        if not isinstance(data.get("id"), str) or not isinstance(data.get("version"), int):
            raise ValueError(f"malformed serializer snapshot: {data!r}")
        config = data.get("config", {})
        if not isinstance(config, Mapping):
            raise ValueError(f"malformed serializer configuration: {config!r}")
        return cls(data["id"], data["version"], dict(config))


class Compatibility(enum.Enum):
    """The four outcomes of resolving a new serializer against an old snapshot (SER-3)."""

    COMPATIBLE_AS_IS = "compatible-as-is"
    COMPATIBLE_AFTER_MIGRATION = "compatible-after-migration"
    COMPATIBLE_WITH_RECONFIGURED_SERIALIZER = "compatible-with-reconfigured-serializer"
    INCOMPATIBLE = "incompatible"


@dataclass(frozen=True)
class SchemaCompatibility(Generic[T]):
    """Result of `TypeSerializer.resolve_compatibility`; carries the reconfigured serializer when there is one."""

    kind: Compatibility
    reconfigured: TypeSerializer[T] | None = None
    reason: str = ""

    @classmethod
    def as_is(cls) -> SchemaCompatibility[T]:
        return cls(Compatibility.COMPATIBLE_AS_IS)

    @classmethod
    def after_migration(cls, reason: str = "") -> SchemaCompatibility[T]:
        return cls(Compatibility.COMPATIBLE_AFTER_MIGRATION, reason=reason)

    @classmethod
    def with_reconfigured(cls, serializer: TypeSerializer[T], reason: str = "") -> SchemaCompatibility[T]:
        return cls(Compatibility.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER, serializer, reason)

    @classmethod
    def incompatible(cls, reason: str) -> SchemaCompatibility[T]:
        return cls(Compatibility.INCOMPATIBLE, reason=reason)


@runtime_checkable
class TypeSerializer(Protocol[T]):
    """Bytes <-> values for one type (SER-1), callable from several threads at once (there is no `duplicate()`).
    Deserializing untrusted bytes must never execute code (SER-8)."""

    @property
    def serializer_id(self) -> str:
        """The registry id written into snapshots (SER-4)."""
        ...

    def serialize(self, value: T) -> bytes: ...

    def deserialize(self, data: bytes) -> T: ...

    def key_hash(self, value: T) -> int:
        """A 32-bit hash identical in every process and interpreter run; key groups derive from it (KG-1)."""
        ...

    def snapshot_configuration(self) -> SerializerSnapshot: ...

    def resolve_compatibility(self, old: SerializerSnapshot) -> SchemaCompatibility[T]:
        """Can this (new) serializer take over state written under `old`? (SER-3)"""
        ...
