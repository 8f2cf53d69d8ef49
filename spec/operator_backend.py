"""The operator (non-keyed) state backend (spec chapter OS): split-redistributed list state, union list state
and broadcast state."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, TypeVar

from statecert.spec.handles import OperatorStateHandle
from statecert.spec.keyed_backend import CheckpointOptions, SnapshotTask
from statecert.spec.state import ListStateDescriptor, MapStateDescriptor
from statecert.spec.storage import CheckpointStreamFactory

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class OperatorBackendParameters:
    job_id: str
    operator_id: str
    restore_state: Sequence[OperatorStateHandle] = ()


class OperatorListState(Protocol[T]):
    def get(self) -> list[T]: ...

    def add(self, value: T) -> None: ...

    def add_all(self, values: Iterable[T]) -> None: ...

    def update(self, values: Iterable[T]) -> None: ...

    def clear(self) -> None: ...


class BroadcastState(Protocol[K, V]):
    """A map every subtask holds in full (OS-3), Flink's `BroadcastState`: entries by user key, in no set order."""

    def get(self, key: K) -> V | None: ...

    def put(self, key: K, value: V) -> None: ...

    def remove(self, key: K) -> None: ...

    def contains(self, key: K) -> bool: ...

    def items(self) -> Iterable[tuple[K, V]]:
        """Every (key, value) entry once, in any order (OS-3)."""
        ...

    def clear(self) -> None: ...


class OperatorStateBackend(Protocol):
    """Operator state of one subtask (OS-1..OS-6)."""

    def get_list_state(self, descriptor: ListStateDescriptor[Any]) -> OperatorListState[Any]:
        """List state whose elements are split evenly over the new subtasks on rescale (OS-1)."""
        ...

    def get_union_list_state(self, descriptor: ListStateDescriptor[Any]) -> OperatorListState[Any]:
        """List state whose every element goes to every subtask on restore (OS-2)."""
        ...

    def get_broadcast_state(self, descriptor: MapStateDescriptor[Any, Any]) -> BroadcastState[Any, Any]:
        """A map every subtask holds in full (OS-3)."""
        ...

    @property
    def registered_state_names(self) -> set[str]:
        """The states registered, and the restored ones not registered again (OS-6)."""
        ...

    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: CheckpointStreamFactory,
        options: CheckpointOptions = ...,
    ) -> SnapshotTask[OperatorStateHandle]: ...

    def close(self) -> None: ...

    def dispose(self) -> None: ...

    def __enter__(self) -> OperatorStateBackend: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
