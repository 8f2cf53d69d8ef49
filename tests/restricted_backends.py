"""Correct backends that declare capabilities False and fail with the documented errors instead (SB-3): the suite
must certify them. `nothing_optional` declares every optional capability False."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.heap.keyed_backend import HeapKeyedStateBackend
from statecert.spec.backend import BackendCapabilities
from statecert.spec.errors import StateMigrationError, UnsupportedFeatureError
from statecert.spec.keyed_backend import SnapshotType


class _Minimal(HeapKeyedStateBackend):
    """The heap backend without TTL, canonical savepoints, rescaling, schema evolution or timers."""

    def restore_handles(self, handles: Any) -> None:
        foreign = [h for h in handles if getattr(h, "key_group_range", self.key_group_range) != self.key_group_range]
        if foreign:
            raise UnsupportedFeatureError(f"{self.backend_name}: restoring another key-group range (no rescaling)")
        super().restore_handles(handles)

    def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
        if descriptor.ttl is not None:
            raise UnsupportedFeatureError(f"state {descriptor.name!r}: this backend has no TTL")
        from statecert.reference.keyed_backend_base import descriptor_serializers

        store = self.stores.get(descriptor.name)
        if store is not None and descriptor.name not in self._states:
            for role, serializer in descriptor_serializers(descriptor).items():
                if serializer.snapshot_configuration() != store.meta.serializers.get(role):
                    raise StateMigrationError(f"state {descriptor.name!r}: no schema evolution ({role} changed)")
        return super().get_or_create_state(descriptor, namespace_serializer)

    def get_timer_service(self, name: str, namespace_serializer: Any, triggerable: Any) -> Any:
        raise UnsupportedFeatureError("this backend keeps no timers")

    def snapshot(self, checkpoint_id: int, timestamp_ms: int, stream_factory: Any, options: Any = None) -> Any:
        from statecert.spec.keyed_backend import DEFAULT_CHECKPOINT_OPTIONS

        options = options or DEFAULT_CHECKPOINT_OPTIONS
        if options.snapshot_type is SnapshotType.SAVEPOINT_CANONICAL:
            raise UnsupportedFeatureError("this backend writes no canonical savepoints")
        return super().snapshot(checkpoint_id, timestamp_ms, stream_factory, options)


class NothingOptional(HashMapStateBackend):
    name = "nothing-optional"
    capabilities = BackendCapabilities(
        async_snapshots=False,
        incremental_checkpoints=False,
        canonical_savepoints=False,
        native_savepoint_format=None,
        rescaling=False,
        operator_state=False,
        ttl=False,
        schema_evolution=False,
    )

    def create_keyed_state_backend(self, params: Any) -> Any:
        return _Minimal(params)

    def create_operator_state_backend(self, params: Any) -> Any:
        raise UnsupportedFeatureError("this backend has no operator state")


def nothing_optional(config: Mapping[str, object]) -> NothingOptional:
    return NothingOptional()
