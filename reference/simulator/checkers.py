"""What must hold at the end of a simulation: per key no record lost, none duplicated, order kept (the
exactly-once invariants), and termination."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

Output = tuple[str, int, int]  # key, source offset, the key's running total after the record


@dataclass(frozen=True)
class CheckResult:
    lost: int
    duplicated: int
    out_of_order: int
    wrong_counts: int

    @property
    def exactly_once(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.out_of_order == 0 and self.wrong_counts == 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exactly_once": self.exactly_once}


def check_outputs(
    expected: dict[str, list[int]],
    committed: Sequence[Output],
    initial_totals: Mapping[str, int] | None = None,
    weight: Callable[[int], int] = lambda offset: 1,
) -> CheckResult:
    """`expected`: per key the source offsets in order; `committed`: the sink's committed output in commit order,
    each with the key's running total; `initial_totals`: per key the total a restored job starts from;
    `weight`: what the record at an offset adds to the total (1 when counting)."""
    seen: dict[str, list[int]] = defaultdict(list)
    totals = dict(initial_totals or {})
    wrong_counts = 0
    for key, offset, total in committed:
        seen[key].append(offset)
        totals[key] = totals.get(key, 0) + weight(offset)
        if total != totals[key]:
            wrong_counts += 1
    lost = duplicated = out_of_order = 0
    for key, offsets in expected.items():
        got = seen.get(key, [])
        counts = Counter(got)
        lost += sum(1 for o in offsets if o not in counts)
        duplicated += sum(c - 1 for c in counts.values() if c > 1)
        out_of_order += sum(1 for a, b in itertools.pairwise(got) if b < a)
    return CheckResult(lost, duplicated, out_of_order, wrong_counts)
