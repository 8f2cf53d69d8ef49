"""`HashMapStateBackend`: the heap backend as a state backend factory, loadable as `hashmap` (SB-1, LD-3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statecert.reference.heap.keyed_backend import HeapKeyedStateBackend
from statecert.reference.operator_state import DefaultOperatorStateBackend
from statecert.spec.backend import BackendCapabilities
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.operator_backend import OperatorBackendParameters


class HashMapStateBackend:
    """Keyed state on the heap; its native savepoints are in the canonical format."""

    name = "hashmap"
    capabilities = BackendCapabilities(
        async_snapshots=True,
        incremental_checkpoints=False,
        canonical_savepoints=True,
        native_savepoint_format=None,
        rescaling=True,
        operator_state=True,
        ttl=True,
        schema_evolution=True,
        timers=True,
    )

    def create_keyed_state_backend(self, params: KeyedBackendParameters[Any]) -> HeapKeyedStateBackend:
        return HeapKeyedStateBackend(params)

    def create_operator_state_backend(self, params: OperatorBackendParameters) -> DefaultOperatorStateBackend:
        return DefaultOperatorStateBackend(params)

    def __repr__(self) -> str:
        return "HashMapStateBackend()"


def hashmap_backend_factory(config: Mapping[str, object]) -> HashMapStateBackend:
    """Entry point `hashmap` in `statecert.state_backends`; the heap backend has no settings."""
    return HashMapStateBackend()
