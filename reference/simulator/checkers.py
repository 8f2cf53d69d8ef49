"""What must hold at the end of a simulation: per key no record lost, none duplicated, order kept (the
exactly-once invariants), and termination."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

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


def check_output_columns(
    expected_keys: npt.NDArray[np.int64],
    expected_offsets: npt.NDArray[np.int64],
    committed: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]],
    initial_totals: npt.NDArray[np.int64],
    weights: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]],
) -> CheckResult:
    """`check_outputs` over columns, for runs of millions of records: keys are dense indexes (`initial_totals[k]`
    is key k's total when the run starts); `expected_keys[i]`, `expected_offsets[i]` the expected records in
    source order; `committed` the sink's (key, offset, running total) columns in commit order."""
    keys, offsets, totals = committed
    key_count = len(initial_totals)
    order = np.argsort(keys, kind="stable")  # per key, in commit order
    k, o, t = keys[order], offsets[order], totals[order]
    w = weights(o)
    running = np.cumsum(w)
    first = np.ones(len(k), dtype=bool)
    first[1:] = k[1:] != k[:-1]
    start = np.maximum.accumulate(np.where(first, np.arange(len(k)), 0))
    within = running - running[start] + w[start]
    wrong_counts = int(np.count_nonzero(initial_totals[k] + within != t))
    checked = np.zeros(key_count, dtype=bool)  # keys with expected records: the others are not judged
    checked[expected_keys] = True
    mask = checked[k]
    k, o = k[mask], o[mask]
    out_of_order = int(np.count_nonzero((k[1:] == k[:-1]) & (o[1:] < o[:-1])))
    stride = int(max(o.max(initial=0), expected_offsets.max(initial=0))) + 1
    pairs, counts = np.unique(k * stride + o, return_counts=True)
    duplicated = int((counts - 1).sum())
    wanted = np.sort(expected_keys * stride + expected_offsets)  # sorted needles: a cache-friendly search
    at = np.minimum(np.searchsorted(pairs, wanted), max(len(pairs) - 1, 0))
    lost = len(wanted) if not len(pairs) else int(np.count_nonzero(pairs[at] != wanted))
    return CheckResult(lost, duplicated, out_of_order, wrong_counts)
