"""Taking an operator's snapshot across its subtasks and restoring subtasks from it: the glue a coordinator or a
test uses between backends, storage and `_metadata` (KB-SNAP-1, FMT-4, KB-RESTORE-2)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from statecert.reference.rescale import keyed_handles_for_subtask, operator_handles_for_subtasks
from statecert.spec.backend import StateBackend
from statecert.spec.keyed_backend import CheckpointOptions, KeyedBackendParameters, SnapshotType
from statecert.spec.keygroups import key_group_range_for_operator
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata, OperatorState, OperatorSubtaskState
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import Clock, SystemClock


@dataclass
class PendingSubtaskSnapshot:
    """A subtask's snapshot whose synchronous parts are taken (KB-SNAP-2): `run()` runs the asynchronous parts."""

    keyed: Any
    operator: Any  # None without operator state

    def run(self) -> OperatorSubtaskState:
        keyed = self.keyed.run()
        operator = self.operator.run() if self.operator is not None else None
        return OperatorSubtaskState((keyed,) if keyed else (), (operator,) if operator else ())


@dataclass
class Subtask:
    """The keyed and operator backends of one parallel instance of an operator."""

    index: int
    keyed: Any
    operator: Any  # None when the backend declares no operator state

    def snapshot_call(self, checkpoint_id: int, location: Any, options: CheckpointOptions) -> PendingSubtaskSnapshot:
        """The synchronous parts of the keyed and operator snapshots; their asynchronous parts run later."""
        keyed = self.keyed.snapshot(checkpoint_id, 0, location, options)
        operator = self.operator.snapshot(checkpoint_id, 0, location, options) if self.operator else None
        return PendingSubtaskSnapshot(keyed, operator)

    def snapshot(self, checkpoint_id: int, location: Any, options: CheckpointOptions) -> OperatorSubtaskState:
        return self.snapshot_call(checkpoint_id, location, options).run()

    def dispose(self) -> None:
        self.keyed.dispose()
        if self.operator is not None:
            self.operator.dispose()


def create_subtasks(
    backend: StateBackend,
    key_serializer: TypeSerializer[Any],
    parallelism: int,
    max_parallelism: int,
    *,
    job_id: str = "job",
    operator_id: str = "op",
    restore_from: OperatorState | None = None,
    clock: Clock | None = None,
    local_dir: str | None = None,
) -> list[Subtask]:
    """`parallelism` subtasks, each restored from its share of `restore_from` when given (KB-RESTORE-2, OS-1..3);
    `local_dir` is handed to every keyed backend as its working directory (KB-LOCAL-1). When one cannot be created
    (a damaged checkpoint, say), those already created are disposed before the error propagates, so a failed
    restore leaves no open backend and no working directory behind."""
    operator_shares = operator_handles_for_subtasks(restore_from, parallelism) if restore_from else [()] * parallelism
    with_operator_state = getattr(getattr(backend, "capabilities", None), "operator_state", True)
    subtasks: list[Subtask] = []
    with contextlib.ExitStack() as created:  # disposed if a later backend cannot be created
        for i in range(parallelism):
            keyed_handles = (
                keyed_handles_for_subtask(restore_from, parallelism, i, max_parallelism) if restore_from else ()
            )
            params = KeyedBackendParameters(
                job_id,
                operator_id,
                key_serializer,
                max_parallelism,
                key_group_range_for_operator(max_parallelism, parallelism, i),
                keyed_handles,
                clock or SystemClock(),
                local_dir,
            )
            keyed = create_keyed_backend(backend, params)
            created.callback(keyed.dispose)
            operator = (
                backend.create_operator_state_backend(
                    OperatorBackendParameters(job_id, operator_id, operator_shares[i])
                )
                if with_operator_state
                else None
            )
            if operator is not None:
                created.callback(operator.dispose)
            subtasks.append(Subtask(i, keyed, operator))
        created.pop_all()
    return subtasks


def create_keyed_backend(backend: StateBackend, params: KeyedBackendParameters[Any]) -> Any:
    """The backend's keyed backend; changelog handles restored into a backend without changelog are replayed
    into it first, so switching changelog off works from its checkpoints (CL-6)."""
    from statecert.reference.changelog.backend import ChangelogStateBackend
    from statecert.reference.changelog.replay import restore_keyed_backend
    from statecert.spec.handles import ChangelogStateBackendHandle

    if isinstance(backend, ChangelogStateBackend) or not any(
        isinstance(h, ChangelogStateBackendHandle) for h in params.restore_state
    ):
        return backend.create_keyed_state_backend(params)
    return restore_keyed_backend(backend, params, params.restore_state)


def take_snapshot(
    subtasks: Sequence[Subtask],
    location: Any,
    checkpoint_id: int,
    max_parallelism: int,
    *,
    operator_id: str = "op",
    kind: CheckpointKind = CheckpointKind.CHECKPOINT,
    timestamp_ms: int = 0,
) -> str:
    """Snapshot every subtask into `location` and complete it by writing `_metadata`; returns the pointer."""
    options = CheckpointOptions(SnapshotType(kind.value))
    states = {s.index: s.snapshot(checkpoint_id, location, options) for s in subtasks}
    return complete_snapshot(location, checkpoint_id, states, max_parallelism, operator_id, kind, timestamp_ms)


def complete_snapshot(
    location: Any,
    checkpoint_id: int,
    states: dict[int, OperatorSubtaskState],
    max_parallelism: int,
    operator_id: str = "op",
    kind: CheckpointKind = CheckpointKind.CHECKPOINT,
    timestamp_ms: int = 0,
) -> str:
    """Complete a snapshot whose subtasks' states (by subtask index) are written: write its `_metadata` into
    `location`; returns the pointer."""
    operator = OperatorState(operator_id, len(states), max_parallelism, states)
    return location.write_metadata(  # type: ignore[no-any-return]
        CheckpointMetadata(checkpoint_id, (operator,), kind, timestamp_ms)
    )
