"""The stateful operator the simulator and the Spark runner run: a running aggregate per key in value state.

`count` adds 1 per record, `sum` adds the record's value (derived from its offset, so no input field is needed).
The key is the record's key, or its source split (`split`: a few hot keys). The value is a record whose schema
has two versions: version 2 adds `last_offset` (compatible after migration, so a job can resume with it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from statecert.reference.key_types import KeyType
from statecert.reference.serializers import LongSerializer, RecordSerializer
from statecert.spec.state import ValueStateDescriptor

OPERATORS = ("count", "sum")
KEY_SELECTORS = ("key", "split")


@overload
def record_value(offset: int) -> int: ...
@overload
def record_value(offset: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]: ...
def record_value(offset: Any) -> Any:
    """The value a `sum` adds for the record at `offset` (or for each of an array of offsets)."""
    return offset % 7 + 1


@dataclass(frozen=True)
class KeyedAggregate:
    operator: str = "count"
    key_selector: str = "key"
    serializer_version: int = 1
    key_type: KeyType = field(default_factory=KeyType)  # the keys' Java type: which hashCode places them
    _plain: bool = field(init=False, repr=False, compare=False, default=False)  # `key` returns the record's key

    def __post_init__(self) -> None:
        if self.operator not in OPERATORS or self.key_selector not in KEY_SELECTORS:
            raise ValueError(f"operator must be one of {OPERATORS}, key selector one of {KEY_SELECTORS}")
        if self.serializer_version not in (1, 2):
            raise ValueError(f"serializer version must be 1 or 2, got {self.serializer_version}")
        object.__setattr__(self, "_plain", self.key_selector == "key" and self.key_type.is_string)

    def key(self, key: str, source: int) -> Any:
        if self._plain:  # string keys by the record's key: the common case, on every record's path
            return key
        return self.key_of_name(key if self.key_selector == "key" else f"s{source}")

    def key_of_name(self, name: str) -> Any:
        """The aggregate key named `name` (a record's key, or `s<source>`), of the job's key type."""
        return name if self.key_type.is_string else self.key_type.of(name)

    def render(self, key: Any) -> str:
        """A key as text, as the state reader writes it (SCN-8): the oracle compares keys of every type as text."""
        return key if isinstance(key, str) else json.dumps(key)

    def weight(self, offset: int) -> int:
        return 1 if self.operator == "count" else record_value(offset)

    @property
    def descriptor(self) -> ValueStateDescriptor[Any]:
        fields: list[tuple[str, Any, Any]] = [("total", LongSerializer(), 0)]
        if self.serializer_version == 2:
            fields.append(("last_offset", LongSerializer(), -1))
        return ValueStateDescriptor(self.operator, serializer=RecordSerializer(fields))

    def add(self, value: dict[str, Any] | None, offset: int) -> dict[str, Any]:
        total = (value or {}).get("total", 0) + self.weight(offset)  # on every record's path: `value_of` inlined
        return {"total": total, "last_offset": offset} if self.serializer_version == 2 else {"total": total}

    def weights(self, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """`weight` of each offset, vectorized."""
        return np.ones_like(offsets) if self.operator == "count" else record_value(offsets)

    def fold(
        self, values: list[dict[str, Any] | None], index: npt.NDArray[np.intp], offsets: npt.NDArray[np.int64]
    ) -> tuple[list[dict[str, Any]], npt.NDArray[np.int64]]:
        """`add` over many keys' records at once, as a mini-batch operator applies an epoch: `values[i]` is key
        i's value before, `index[r]` the key of record r (records in arrival order, every key with a record),
        `offsets[r]` its offset. Returns each key's value after its last record and, per record, the running total
        of its key after it (what `add` one record at a time gives), without a Python step per record."""
        counts = np.bincount(index, minlength=len(values))
        order = np.argsort(index, kind="stable")  # records grouped by key, each key's in arrival order
        weights = self.weights(offsets[order])
        running = np.cumsum(weights)
        ends = np.cumsum(counts)
        starts = ends - counts
        before = running[starts] - weights[starts]  # the running sum before each key's first record
        bases = np.array([self.total(v) for v in values], dtype=np.int64)
        grouped = running + np.repeat(bases - before, counts)
        totals = np.empty_like(grouped)
        totals[order] = grouped
        last = offsets[order][ends - 1]
        after = [self.value_of(int(grouped[e - 1]), int(o)) for e, o in zip(ends.tolist(), last.tolist(), strict=True)]
        return after, totals

    def value_of(self, total: int, last_offset: int) -> dict[str, Any]:
        """The state value holding `total`, after the record at `last_offset`."""
        return {"total": total, "last_offset": last_offset} if self.serializer_version == 2 else {"total": total}

    @staticmethod
    def total(value: dict[str, Any] | None) -> int:
        return int((value or {}).get("total", 0))
