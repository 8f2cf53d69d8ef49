"""Correct backends that declare capabilities False and fail with the documented errors instead (SB-3): the suite
must certify them. `without_<capability>` declares one optional capability False, so every combination of the
others with it is exercised too (a backend with canonical savepoints but no rescaling, say);
`nothing_optional` declares every optional capability False."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.heap.keyed_backend import HeapKeyedStateBackend
from statecert.spec.errors import StateMigrationError, UnsupportedFeatureError
from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS, SnapshotType
from tests.broken_backends import _declaring_off, _SharesBuffer


class _NoRescaling(HeapKeyedStateBackend):
    """Restores only handles of its own key-group range."""

    def restore_handles(self, handles: Any) -> None:
        foreign = [h for h in handles if getattr(h, "key_group_range", self.key_group_range) != self.key_group_range]
        if foreign:
            raise UnsupportedFeatureError(f"{self.backend_name}: restoring another key-group range (no rescaling)")
        super().restore_handles(handles)


class _NoTtl(HeapKeyedStateBackend):
    def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
        if descriptor.ttl is not None:
            raise UnsupportedFeatureError(f"state {descriptor.name!r}: this backend has no TTL")
        return super().get_or_create_state(descriptor, namespace_serializer)


class _NoSchemaEvolution(HeapKeyedStateBackend):
    """Restored state is registered only with the serializers that wrote it."""

    def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
        from statecert.reference.keyed_backend_base import descriptor_serializers

        store = self.stores.get(descriptor.name)
        if store is not None and descriptor.name not in self._states:
            for role, serializer in descriptor_serializers(descriptor).items():
                if serializer.snapshot_configuration() != store.meta.serializers.get(role):
                    raise StateMigrationError(f"state {descriptor.name!r}: no schema evolution ({role} changed)")
        return super().get_or_create_state(descriptor, namespace_serializer)


class _NoTimers(HeapKeyedStateBackend):
    def get_timer_service(self, name: str, namespace_serializer: Any, triggerable: Any) -> Any:
        raise UnsupportedFeatureError("this backend keeps no timers")


class _NoCanonicalSavepoints(HeapKeyedStateBackend):
    def snapshot(self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, options: Any = None) -> Any:
        options = options or DEFAULT_CHECKPOINT_OPTIONS
        if options.snapshot_type is SnapshotType.SAVEPOINT_CANONICAL:
            raise UnsupportedFeatureError("this backend writes no canonical savepoints")
        return super().snapshot(checkpoint_id, timestamp_ms, stream_factory, options)


KEYED_WITHOUT: dict[str, tuple[type[HeapKeyedStateBackend], ...]] = {
    "rescaling": (_NoRescaling,),
    "ttl": (_NoTtl,),
    "schema_evolution": (_NoSchemaEvolution,),
    "timers": (_NoTimers,),
    "canonical_savepoints": (_NoCanonicalSavepoints,),
    "operator_state": (),  # refused by the factory below
    # not safe beside the task thread: its task thread and asynchronous part share one buffer (broken backend 132),
    # which is correct when run() is never called while the task thread works
    "async_snapshots": (_SharesBuffer,),
}
"""The optional capabilities of `BackendCapabilities` the heap backend declares, each with what its keyed backend
does without it."""


def _restricted(name: str, off: tuple[str, ...]) -> Callable[[Mapping[str, object]], HashMapStateBackend]:
    mixins = tuple(mixin for capability in off for mixin in KEYED_WITHOUT[capability])
    keyed = type("Keyed", (*mixins, HeapKeyedStateBackend), {}) if mixins else HeapKeyedStateBackend
    return _declaring_off(off, keyed, name)


without_rescaling = _restricted("without-rescaling", ("rescaling",))
without_ttl = _restricted("without-ttl", ("ttl",))
without_schema_evolution = _restricted("without-schema-evolution", ("schema_evolution",))
without_timers = _restricted("without-timers", ("timers",))
without_canonical_savepoints = _restricted("without-canonical-savepoints", ("canonical_savepoints",))
without_operator_state = _restricted("without-operator-state", ("operator_state",))
without_async_snapshots = _restricted("without-async-snapshots", ("async_snapshots",))
nothing_optional = _restricted("nothing-optional", tuple(KEYED_WITHOUT))
