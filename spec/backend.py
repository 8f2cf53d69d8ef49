"""The state backend: a factory of keyed and operator backends that declares what it supports (chapter SB)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from statecert.spec.keyed_backend import KeyedBackendParameters, KeyedStateBackend
from statecert.spec.operator_backend import OperatorBackendParameters, OperatorStateBackend


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend supports, by behaviour (SB-2). A capability declared False must fail with the documented
    error rather than misbehave (SB-3)."""

    async_snapshots: bool = True
    incremental_checkpoints: bool = False
    canonical_savepoints: bool = True
    native_savepoint_format: str | None = None
    rescaling: bool = True
    operator_state: bool = True
    ttl: bool = True
    schema_evolution: bool = True
    timers: bool = False
    """Keeps event-time and processing-time timers (chapter TM); False by default, so a backend written before
    timers were specified is not tested for them."""


@runtime_checkable
class StateBackend(Protocol):
    """Creates keyed and operator state backends for subtasks (SB-1)."""

    name: str
    capabilities: BackendCapabilities

    def create_keyed_state_backend(self, params: KeyedBackendParameters[Any]) -> KeyedStateBackend[Any]: ...

    def create_operator_state_backend(self, params: OperatorBackendParameters) -> OperatorStateBackend: ...


@runtime_checkable
class ConfigurableStateBackend(StateBackend, Protocol):
    """A backend that takes settings from job/cluster configuration; its explicit settings win (LD-2)."""

    def configure(self, config: Mapping[str, object]) -> StateBackend: ...


StateBackendFactory = Callable[[Mapping[str, object]], StateBackend]
"""What an entry point in `statecert.state_backends` or a `module:attr` path names (LD-3)."""
