"""What the canonical format records about each registered state: kind, serializer snapshots, TTL (FMT-6, SER-2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statecert.reference.format.handle_codec import field
from statecert.spec.serializers import SerializerSnapshot
from statecert.spec.state import StateKind, check_state_name


@dataclass(frozen=True)
class StateMetaInfo:
    """A registered keyed state as written into a snapshot. `serializers` holds the value serializer under
    `value` (value, reducing, aggregating), `element` (list) or `user_key` and `user_value` (map)."""

    name: str
    kind: StateKind
    namespace_serializer: SerializerSnapshot
    serializers: dict[str, SerializerSnapshot]
    ttl: bool

    def to_plain(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "namespace_serializer": self.namespace_serializer.to_plain(),
            "serializers": {role: s.to_plain() for role, s in sorted(self.serializers.items())},
            "ttl": self.ttl,
        }

    @classmethod
    def from_plain(cls, data: Any) -> StateMetaInfo:
        """Decode and validate (IF-3): the name one KS-2 allows (a stream may hold a NUL no backend may be asked
        for, nor a RocksDB column family hold), the serializer roles exactly those of the state's kind."""
        meta = cls(
            check_state_name(field(data, "name", str)),
            StateKind(field(data, "kind", str)),
            SerializerSnapshot.from_plain(field(data, "namespace_serializer", dict)),
            {str(role): SerializerSnapshot.from_plain(s) for role, s in field(data, "serializers", dict).items()},
            field(data, "ttl", bool),
        )
        if set(meta.serializers) != set(SERIALIZER_ROLES[meta.kind]):
            raise ValueError(
                f"state {meta.name!r}: serializer roles {sorted(meta.serializers)} do not match {meta.kind.value} "
                f"state ({list(SERIALIZER_ROLES[meta.kind])})"
            )
        return meta


SERIALIZER_ROLES: dict[StateKind, tuple[str, ...]] = {
    StateKind.VALUE: ("value",),
    StateKind.REDUCING: ("value",),
    StateKind.AGGREGATING: ("value",),
    StateKind.LIST: ("element",),
    StateKind.MAP: ("user_key", "user_value"),
}
