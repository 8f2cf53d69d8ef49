"""What must hold at the end of a simulation: per key no record lost, none duplicated, order kept (the
exactly-once invariants), and termination."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

Output = tuple[str, int, int]  # key, source offset, count after the record


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
    expected: dict[str, list[int]], committed: Sequence[Output], initial_counts: Mapping[str, int] | None = None
) -> CheckResult:
    """`expected`: per key the source offsets in order; `committed`: the sink's committed output in commit order;
    `initial_counts`: per key the count a restored job starts from (records counted before its restore point)."""
    seen: dict[str, list[int]] = defaultdict(list)
    initial = initial_counts or {}
    wrong_counts = 0
    for key, offset, count in committed:
        seen[key].append(offset)
        if count != initial.get(key, 0) + len(seen[key]):
            wrong_counts += 1
    lost = duplicated = out_of_order = 0
    for key, offsets in expected.items():
        got = seen.get(key, [])
        counts = Counter(got)
        lost += sum(1 for o in offsets if o not in counts)
        duplicated += sum(c - 1 for c in counts.values() if c > 1)
        out_of_order += sum(1 for a, b in itertools.pairwise(got) if b < a)
    return CheckResult(lost, duplicated, out_of_order, wrong_counts)
