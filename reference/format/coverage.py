"""Key-group coverage of a decoded `_metadata` (FMT-11): operator ids and subtask indexes unique, every keyed
handle inside the key groups its subtask owns, no key group claimed twice within an operator. A checkpoint that
breaks this would restore a subset of its state (or the same key twice) without an error."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from statecert.spec.keygroups import key_group_range_for_operator
from statecert.spec.metadata import OperatorState


def check_operators(operators: Sequence[OperatorState]) -> None:
    """Raise ValueError naming the operator, subtask and key groups at the first coverage problem."""
    seen: set[str] = set()
    for op in operators:
        if op.operator_id in seen:
            raise ValueError(f"operator {op.operator_id!r} appears twice")
        seen.add(op.operator_id)
        claimed: list[tuple[int, int, int]] = []
        for index, subtask in op.subtask_states.items():
            owned = key_group_range_for_operator(op.max_parallelism, op.parallelism, index)
            for handle in subtask.managed_keyed_state:
                rng = handle.key_group_range
                if rng.is_empty:
                    continue
                if rng.start < owned.start or rng.end > owned.end:
                    raise ValueError(
                        f"operator {op.operator_id!r}: subtask {index} owns key groups {owned} at parallelism "
                        f"{op.parallelism}, but declares a handle for {rng}"
                    )
                claimed.append((rng.start, rng.end, index))
        claimed.sort()
        for (_, end, first), (start, _, second) in itertools.pairwise(claimed):
            if start <= end:
                raise ValueError(
                    f"operator {op.operator_id!r}: key group {start} is claimed twice (subtasks {first} and {second})"
                )
