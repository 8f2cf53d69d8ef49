"""The keyed state backend (spec chapter KB): current key, state access, two-phase snapshots, restore with
rescaling, checkpoint notifications and lifecycle."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

from statecert.spec.handles import KeyedStateHandle
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import Clock, State, StateDescriptor, SystemClock
from statecert.spec.storage import (
    DEFAULT_LOCATION_REFERENCE,
    CheckpointStorageLocationReference,
    CheckpointStreamFactory,
)

K = TypeVar("K")
H = TypeVar("H", covariant=True)


class SnapshotType(str, enum.Enum):
    """What a snapshot is for: a checkpoint, or a savepoint in a given format (KB-SNAP-1, SP-1, SP-3)."""

    CHECKPOINT = "checkpoint"
    SAVEPOINT_CANONICAL = "savepoint-canonical"
    SAVEPOINT_NATIVE = "savepoint-native"


@dataclass(frozen=True)
class CheckpointOptions:
    """How to take a snapshot. `full` is Flink's `FULL_CHECKPOINT`: the snapshot references no file of an earlier
    snapshot or of the handles the backend was restored from, as the coordinator asks until the first checkpoint
    after a restore from a snapshot completes (KB-SNAP-10, COORD-13); a backend whose snapshots are always full
    ignores it."""

    snapshot_type: SnapshotType = SnapshotType.CHECKPOINT
    full: bool = False
    target_location: CheckpointStorageLocationReference = DEFAULT_LOCATION_REFERENCE
    """Where the checkpoint goes, as the coordinator sends it with the barrier (CS-13, Flink's `getTargetLocation`)."""


DEFAULT_CHECKPOINT_OPTIONS = CheckpointOptions()


@dataclass(frozen=True)
class KeyedBackendParameters(Generic[K]):
    """Everything a keyed backend is created with; `restore_state` may hold handles of any ranges (KB-RESTORE-1);
    `local_dir`, when set, is a local working directory the backend may share with others (KB-LOCAL-1)."""

    job_id: str
    operator_id: str
    key_serializer: TypeSerializer[K]
    max_parallelism: int
    key_group_range: KeyGroupRange
    restore_state: Sequence[KeyedStateHandle] = ()
    ttl_clock: Clock = field(default_factory=SystemClock)
    local_dir: str | None = None


class SnapshotTask(Protocol[H]):
    """The asynchronous part of a snapshot; the synchronous part already ran when this was returned (KB-SNAP-2)."""

    def run(self) -> H | None:
        """Write the snapshot; None when no state is registered, and None or a handle when no state has entries
        (KB-SNAP-7). May run in another thread."""
        ...

    def cancel(self) -> bool:
        """Ask the task to stop; `run` then raises SnapshotCancelledError and leaves no files, and the answer is True,
        even when the cancel comes after the last stream was written and before `run` returns. After `run` has
        returned, False and nothing changes (KB-SNAP-6)."""
        ...

    @property
    def done(self) -> bool: ...


class KeyedStateBackend(Protocol[K]):
    """Keyed state for one subtask's key-group range (KB-1)."""

    @property
    def key_group_range(self) -> KeyGroupRange: ...

    @property
    def number_of_key_groups(self) -> int: ...

    @property
    def key_serializer(self) -> TypeSerializer[K]: ...

    def set_current_key(self, key: K) -> None:
        """Select the key of further state accesses; a key outside this backend's range is an error (KB-KEY-2)."""
        ...

    def get_current_key(self) -> K: ...

    @property
    def current_key_group(self) -> int: ...

    def get_or_create_state(
        self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer[Any] | None = None
    ) -> Any:
        """The state for `descriptor`, in the void namespace until `set_current_namespace` (KB-STATE-1)."""
        ...

    def get_partitioned_state(
        self,
        namespace: Any,
        descriptor: StateDescriptor,
        namespace_serializer: TypeSerializer[Any] | None = None,
    ) -> Any: ...

    def get_keys(self, state_name: str, namespace: Any) -> Iterator[K]:
        """Every key with an entry in `state_name` under `namespace` (KB-KEYS-1)."""
        ...

    def get_keys_and_namespaces(self, state_name: str) -> Iterator[tuple[K, Any]]: ...

    def num_state_entries(self, state_name: str | None = None) -> int:
        """Number of entries, of one state or all: one per key and namespace holding state, or for map state one per
        user key, as Flink's RocksDB backend counts; zero exactly when nothing is stored (KS-4)."""
        ...

    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: CheckpointStreamFactory,
        options: CheckpointOptions = ...,
    ) -> SnapshotTask[KeyedStateHandle]: ...

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` completed: its files may be the base of later snapshots (KB-SNAP-8), unless it
        is a savepoint or a later checkpoint was notified first (KB-SNAP-9)."""
        ...

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` was aborted: its files are never a base (KB-SNAP-9)."""
        ...

    def close(self) -> None:
        """Release resources and cancel running snapshots (KB-LIFE-1, KB-SNAP-6)."""
        ...

    def dispose(self) -> None: ...

    def __enter__(self) -> KeyedStateBackend[K]: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class InternalKvState(State, Protocol):
    """Marker for the state objects a keyed backend returns."""
