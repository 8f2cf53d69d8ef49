"""Union list state in the keyed job both runners run (OS-2): each keyed subtask writes one marker, its index and
the checkpoint it snapshots, before every snapshot, so that what each subtask reads back after a restore can be
checked against what every old subtask wrote into the checkpoint restored, whether or not the parallelism changed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from statecert.reference.serializers import StringSerializer
from statecert.spec.state import ListStateDescriptor

UNION_MARKERS = ListStateDescriptor("subtask-markers", element_serializer=StringSerializer())


def marker(subtask: int, checkpoint_id: int) -> str:
    """What subtask `subtask` keeps in its union list state when it snapshots checkpoint `checkpoint_id`."""
    return f"subtask {subtask} at checkpoint {checkpoint_id}"


@dataclass(frozen=True)
class UnionRestore:
    """A subtask's restore: the checkpoint restored, its parallelism, and the union elements the subtask read."""

    checkpoint_id: int
    parallelism: int
    subtask: int
    elements: tuple[str, ...]

    @property
    def expected(self) -> tuple[str, ...]:
        """Every old subtask's marker of the checkpoint restored, once each (OS-2)."""
        return tuple(sorted(marker(j, self.checkpoint_id) for j in range(self.parallelism)))


def union_problems(restores: Iterable[UnionRestore]) -> list[str]:
    """Each restore whose subtask did not read every old subtask's union element, stated as expected vs got."""
    return [
        f"OS-2: subtask {r.subtask} restored from checkpoint {r.checkpoint_id} (parallelism {r.parallelism}): "
        f"expected the union list {list(r.expected)}, got {sorted(r.elements)}"
        for r in restores
        if tuple(sorted(r.elements)) != r.expected
    ]
