"""The content of a checkpoint's `_metadata` (spec chapter FMT): checkpoint id, kind, and per operator its
parallelism, max parallelism and per-subtask state handles."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from statecert.spec.handles import KeyedStateHandle, OperatorStateHandle


class CheckpointKind(str, enum.Enum):
    """A periodic checkpoint, or a savepoint in one of the two savepoint formats (FMT-4, SP-1, SP-3)."""

    CHECKPOINT = "checkpoint"
    SAVEPOINT_CANONICAL = "savepoint-canonical"
    SAVEPOINT_NATIVE = "savepoint-native"

    @property
    def is_savepoint(self) -> bool:
        return self is not CheckpointKind.CHECKPOINT


@dataclass(frozen=True)
class OperatorSubtaskState:
    """The state handles one parallel subtask acknowledged."""

    managed_keyed_state: tuple[KeyedStateHandle, ...] = ()
    managed_operator_state: tuple[OperatorStateHandle, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.managed_keyed_state and not self.managed_operator_state

    @property
    def state_size(self) -> int:
        return sum(h.size for h in self.managed_keyed_state) + sum(h.size for h in self.managed_operator_state)


@dataclass(frozen=True)
class OperatorState:
    """One operator's state across its subtasks (FMT-4)."""

    operator_id: str
    parallelism: int
    max_parallelism: int
    subtask_states: Mapping[int, OperatorSubtaskState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = [i for i in self.subtask_states if not 0 <= i < self.parallelism]
        if bad:
            raise ValueError(f"operator {self.operator_id}: subtask indexes {bad} outside 0..{self.parallelism - 1}")

    @property
    def state_size(self) -> int:
        return sum(s.state_size for s in self.subtask_states.values())


@dataclass(frozen=True)
class CheckpointMetadata:
    """What `_metadata` holds (FMT-4). `timestamp_ms` is the trigger time."""

    checkpoint_id: int
    operators: tuple[OperatorState, ...]
    kind: CheckpointKind = CheckpointKind.CHECKPOINT
    timestamp_ms: int = 0

    def operator(self, operator_id: str) -> OperatorState:
        for op in self.operators:
            if op.operator_id == operator_id:
                return op
        raise KeyError(f"no operator {operator_id!r} in checkpoint {self.checkpoint_id}")
