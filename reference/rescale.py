"""Assigning a checkpoint's state to the subtasks of a (possibly rescaled) operator (KB-RESTORE-2, OS-1..OS-3)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from statecert.spec.errors import StateMigrationError
from statecert.spec.handles import (
    KeyedStateHandle,
    OperatorStateHandle,
    OperatorStateMode,
    OperatorStatePartitions,
    StreamStateHandle,
)
from statecert.spec.keygroups import KeyGroupRange, check_parallelism, key_group_range_for_operator
from statecert.spec.metadata import OperatorState, OperatorSubtaskState


def keyed_handles_for_subtask(
    operator: OperatorState, parallelism: int, index: int, max_parallelism: int | None = None
) -> tuple[KeyedStateHandle, ...]:
    """Every old handle cut to the key groups new subtask `index` of `parallelism` owns (KB-RESTORE-2).

    The max parallelism cannot change across a restore: key groups would move (KB-RESTORE-4)."""
    if max_parallelism is not None and max_parallelism != operator.max_parallelism:
        raise StateMigrationError(
            f"operator {operator.operator_id}: max parallelism changed from {operator.max_parallelism} to "
            f"{max_parallelism}; state cannot be restored with another number of key groups"
        )
    target = key_group_range_for_operator(operator.max_parallelism, parallelism, index)
    return tuple(
        restricted([h for _, st in sorted(operator.subtask_states.items()) for h in st.managed_keyed_state], target)
    )


def restricted(handles: Sequence[KeyedStateHandle], key_group_range: KeyGroupRange) -> list[KeyedStateHandle]:
    """Each handle cut to `key_group_range`; handles that do not overlap it are dropped."""
    return [part for h in handles if (part := h.intersection(key_group_range)) is not None]


def operator_handles_for_subtasks(operator: OperatorState, parallelism: int) -> list[tuple[OperatorStateHandle, ...]]:
    """Redistribute operator state: split lists evenly in order (OS-1), union to all on every restore (OS-2),
    broadcast by copy (OS-3). At unchanged parallelism every subtask keeps its own split and broadcast state and
    still gets every subtask's union elements, as Flink's `RoundRobinOperatorStateRepartitioner` gives them; only
    without union state are the old handles returned as they are."""
    check_parallelism(parallelism, operator.max_parallelism)
    old = [operator.subtask_states.get(i, OperatorSubtaskState()) for i in range(operator.parallelism)]
    unchanged = parallelism == operator.parallelism
    if unchanged and not any(
        part.mode is OperatorStateMode.UNION
        for st in old
        for handle in st.managed_operator_state
        for part in handle.states.values()
    ):
        return [st.managed_operator_state for st in old]
    # per new subtask: delegate -> state name -> (mode, offsets)
    plan: list[dict[StreamStateHandle, dict[str, tuple[OperatorStateMode, list[int]]]]] = [
        defaultdict(dict) for _ in range(parallelism)
    ]

    def give(i: int, delegate: StreamStateHandle, name: str, mode: OperatorStateMode, offsets: list[int]) -> None:
        entry = plan[i][delegate].setdefault(name, (mode, []))
        entry[1].extend(offsets)

    split: dict[str, list[tuple[StreamStateHandle, int]]] = defaultdict(list)
    for old_index, subtask in enumerate(old):
        for handle in subtask.managed_operator_state:
            for name, part in sorted(handle.states.items()):
                if part.mode is OperatorStateMode.SPLIT_DISTRIBUTE and unchanged:
                    give(old_index, handle.delegate, name, part.mode, list(part.offsets))
                elif part.mode is OperatorStateMode.SPLIT_DISTRIBUTE:
                    split[name].extend((handle.delegate, o) for o in part.offsets)
                elif part.mode is OperatorStateMode.UNION:
                    for i in range(parallelism):
                        give(i, handle.delegate, name, part.mode, list(part.offsets))
                else:
                    for i in range(parallelism):
                        if i % operator.parallelism == old_index:
                            give(i, handle.delegate, name, part.mode, list(part.offsets))
    for name, elements in split.items():
        n = len(elements)
        for i in range(parallelism):
            for delegate, offset in elements[i * n // parallelism : (i + 1) * n // parallelism]:
                give(i, delegate, name, OperatorStateMode.SPLIT_DISTRIBUTE, [offset])
    return [
        tuple(
            OperatorStateHandle({n: OperatorStatePartitions(m, tuple(o)) for n, (m, o) in states.items()}, delegate)
            for delegate, states in per_delegate.items()
        )
        for per_delegate in plan
    ]
