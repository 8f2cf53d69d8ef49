"""Serializer compatibility on restore, and eager migration of restored state (SER-3, SER-5..SER-7, TTL-5)."""

from __future__ import annotations

from typing import Any

from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.heap.ttl import rewrap
from statecert.reference.serializers import restore_serializer
from statecert.spec.errors import StateMigrationError
from statecert.spec.serializers import Compatibility, SerializerSnapshot, TypeSerializer
from statecert.spec.state import StateDescriptor, StateKind


def check_key_serializer(new: TypeSerializer[Any], old: SerializerSnapshot) -> TypeSerializer[Any]:
    """Keys are hashed into key groups, so the key serializer may be reconfigured but never migrated (SER-6)."""
    result = new.resolve_compatibility(old)
    if result.kind is Compatibility.COMPATIBLE_AS_IS:
        return new
    if result.kind is Compatibility.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER and result.reconfigured is not None:
        return result.reconfigured
    raise StateMigrationError(
        f"the key serializer cannot take over the restored state ({result.kind.value}: {result.reason}); "
        "key serializer migration is not supported because keys are hashed into key groups"
    )


def check_registered_serializers(meta: StateMetaInfo, source: str) -> None:
    """A restored state's serializers must be restorable from their snapshots (SER-4) when the state is restored,
    registered by the job or not, as Flink's restore reads every state's serializer snapshot: an id no registered
    serializer (nor entry point) has is a StateMigrationError naming `source` and the state."""
    for role, snapshot in (("namespace", meta.namespace_serializer), *meta.serializers.items()):
        try:
            restore_serializer(snapshot)
        except StateMigrationError as exc:
            raise StateMigrationError(f"{source}: state {meta.name!r}: the {role} serializer: {exc}") from None


def resolve_state_serializers(
    store: Any,
    descriptor: StateDescriptor,
    serializers: dict[str, TypeSerializer[Any]],
    namespace_serializer: TypeSerializer[Any],
) -> dict[str, TypeSerializer[Any]]:
    """Check a descriptor against restored state in `store` (a StateStore with `meta`); migrate the entries when
    needed (SER-5). Returns the serializers to use (reconfigured ones where the check produced them)."""
    meta: StateMetaInfo = store.meta
    name = descriptor.name
    if meta.kind is not descriptor.kind:
        raise StateMigrationError(
            f"state {name!r} was written as {meta.kind.value} state and is now requested as {descriptor.kind.value}"
        )
    if meta.ttl != (descriptor.ttl is not None):
        change = "enabled" if descriptor.ttl is not None else "disabled"
        raise StateMigrationError(f"state {name!r}: TTL cannot be {change} for state restored from a snapshot (TTL-5)")
    ns_result = namespace_serializer.resolve_compatibility(meta.namespace_serializer)
    if ns_result.kind is not Compatibility.COMPATIBLE_AS_IS:
        raise StateMigrationError(f"state {name!r}: the namespace serializer changed ({ns_result.kind.value})")
    final: dict[str, TypeSerializer[Any]] = {}
    migrate: dict[str, TypeSerializer[Any]] = {}
    for role, new in serializers.items():
        result = new.resolve_compatibility(meta.serializers[role])
        if result.kind is Compatibility.INCOMPATIBLE:
            raise StateMigrationError(f"state {name!r}: the new {role} serializer is incompatible: {result.reason}")
        if result.kind is Compatibility.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER and result.reconfigured is not None:
            final[role] = result.reconfigured
        else:
            final[role] = new
            if result.kind is Compatibility.COMPATIBLE_AFTER_MIGRATION:
                migrate[role] = new
    if migrate:
        _migrate(store, {role: restore_serializer(meta.serializers[role]) for role in migrate}, migrate)
    store.meta = StateMetaInfo(
        name,
        meta.kind,
        namespace_serializer.snapshot_configuration(),
        {role: s.snapshot_configuration() for role, s in final.items()},
        meta.ttl,
    )
    return final


def _migrate(store: Any, old: dict[str, TypeSerializer[Any]], new: dict[str, TypeSerializer[Any]]) -> None:
    """Read every entry with the old serializer and write it with the new one (SER-5)."""
    ttl = store.meta.ttl
    offset = 8 if ttl else 0

    def convert(role: str, stored: bytes) -> bytes:
        if role not in old:
            return stored
        if role == "user_key":  # map keys carry no TTL timestamp
            return new[role].serialize(old[role].deserialize(stored))
        value = old[role].deserialize(stored[offset:])
        return rewrap(stored, new[role].serialize(value), ttl)

    kind = store.meta.kind
    for key_group, key, ns, payload in list(store.entries()):
        if kind is StateKind.LIST:
            migrated: Any = [convert("element", e) for e in payload]
        elif kind is StateKind.MAP:
            migrated = [[convert("user_key", k), convert("user_value", v)] for k, v in payload]
        else:
            migrated = convert("value", payload)
        store.put_payload(key_group, (key, ns), migrated)
