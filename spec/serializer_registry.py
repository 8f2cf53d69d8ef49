"""Serializers restorable from the snapshots they write (SER-4): the registry every backend reads old state with.

A backend that migrates restored state (SER-5) must turn the serializer snapshot in the checkpoint back into the
serializer that wrote it, as Flink's `TypeSerializerSnapshot.restoreSerializer()` does. Snapshots are plain data
(SER-2), so the code comes from this registry: serializers registered in-process with `register_serializer`, or
by third-party packages through the entry-point group `statecert.serializers` (name: the serializer id, value: a
callable from `SerializerSnapshot` to the serializer). A snapshot never names code to import (SER-8).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from statecert.spec.errors import StateMigrationError
from statecert.spec.serializers import SerializerSnapshot, TypeSerializer

ENTRY_POINT_GROUP = "statecert.serializers"

RestoreFunction = Callable[[SerializerSnapshot], TypeSerializer[Any]]

_REGISTRY: dict[str, RestoreFunction] = {}


def register_serializer(serializer_id: str, from_snapshot: RestoreFunction) -> None:
    """Make the serializer with this id restorable from the snapshots it writes (SER-4); a later registration of
    the same id replaces the earlier one."""
    _REGISTRY[serializer_id] = from_snapshot


def registered_serializer_ids() -> list[str]:
    """The ids registered in this process so far (entry points are looked up on first use)."""
    return sorted(_REGISTRY)


def restore_serializer(snapshot: SerializerSnapshot) -> TypeSerializer[Any]:
    """The serializer that wrote state under `snapshot` (SER-4). An id neither registered nor offered by an entry
    point, or a configuration its restore function rejects (serializers nested past Python's recursion limit
    included), is a `StateMigrationError`."""
    factory = _REGISTRY.get(snapshot.serializer_id)
    if factory is None:
        for ep in entry_points(group=ENTRY_POINT_GROUP, name=snapshot.serializer_id):
            factory = _REGISTRY[snapshot.serializer_id] = ep.load()
    if factory is None:
        raise StateMigrationError(
            f"unknown serializer {snapshot.serializer_id!r} in the snapshot; known: {registered_serializer_ids()}"
        )
    try:
        return factory(snapshot)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:  # any shape the factory did not expect
        raise StateMigrationError(f"malformed configuration of serializer {snapshot.serializer_id!r}: {exc}") from exc
    except RecursionError:  # a hostile snapshot nesting serializers (tuple in tuple...) deeper than the stack
        raise StateMigrationError(f"serializer {snapshot.serializer_id!r} nests serializers too deeply") from None
