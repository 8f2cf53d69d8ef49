"""Key groups: the unit of state redistribution, with Flink's arithmetic (spec chapter KG).

Functions here are the normative formulas; `KeyGroupRange` is Flink's inclusive range of key groups.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import mmh3

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 128  # KG-5
UPPER_BOUND_MAX_PARALLELISM = 32768  # KG-4


def flink_murmur_hash(code: int) -> int:
    """Flink's `MathUtils.murmurHash(int)`: murmur3-32 of the 4-byte int, made non-negative (KG-2)."""
    h = mmh3.hash(struct.pack("<i", _to_int32(code)), 0, signed=True)
    if h >= 0:
        return h
    return 0 if h == -(2**31) else -h


def _to_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def check_max_parallelism(max_parallelism: int) -> None:
    """Raise ValueError unless 1 <= max_parallelism <= 32768 (KG-4)."""
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(f"max parallelism must be within 1..{UPPER_BOUND_MAX_PARALLELISM}, got {max_parallelism}")


def check_parallelism(parallelism: int, max_parallelism: int) -> None:
    """Raise ValueError unless 1 <= parallelism <= max_parallelism (KG-4)."""
    check_max_parallelism(max_parallelism)
    if not 1 <= parallelism <= max_parallelism:
        raise ValueError(f"parallelism must be within 1..{max_parallelism} (max parallelism), got {parallelism}")


def assign_to_key_group(key_hash: int, max_parallelism: int) -> int:
    """Key group of a key whose stable 32-bit hash is `key_hash`: murmur(hash) % max parallelism (KG-2)."""
    return flink_murmur_hash(key_hash) % max_parallelism


def operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """Index of the parallel operator instance that owns `key_group` (KG-6)."""
    return key_group * parallelism // max_parallelism


def assign_key_to_parallel_operator(key_hash: int, max_parallelism: int, parallelism: int) -> int:
    """Index of the parallel operator instance that owns a key with stable hash `key_hash` (Flink's
    `KeyGroupRangeAssignment.assignKeyToParallelOperator`, KG-2 and KG-6)."""
    return operator_index_for_key_group(max_parallelism, parallelism, assign_to_key_group(key_hash, max_parallelism))


def round_up_to_power_of_two(x: int) -> int:
    """Smallest power of two >= x (for x >= 1)."""
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def compute_default_max_parallelism(parallelism: int) -> int:
    """Flink's default: min(max(roundUpToPowerOfTwo(p + p/2), 128), 32768) (KG-5), for a parallelism in
    1..32768; anything else is a ValueError (Flink: IllegalArgumentException, KG-4)."""
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or not 1 <= parallelism <= 32768:
        raise ValueError(f"parallelism must lie in 1..32768 to compute a default max parallelism, got {parallelism}")
    candidate = round_up_to_power_of_two(parallelism + parallelism // 2)
    return min(max(candidate, DEFAULT_LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)


@dataclass(frozen=True, order=True)
class KeyGroupRange:
    """An inclusive range of key groups [start, end]; empty when end < start (KG-7)."""

    start: int
    end: int

    @classmethod
    def empty(cls) -> KeyGroupRange:
        return cls(0, -1)

    @classmethod
    def of(cls, start: int, end: int) -> KeyGroupRange:
        return cls(start, end) if end >= start else cls.empty()

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    @property
    def is_empty(self) -> bool:
        return self.end < self.start

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        """The key groups in both ranges (KG-8)."""
        return KeyGroupRange.of(max(self.start, other.start), min(self.end, other.end))

    def __str__(self) -> str:
        return "[]" if self.is_empty else f"[{self.start}, {self.end}]"


def key_group_range_for_operator(max_parallelism: int, parallelism: int, operator_index: int) -> KeyGroupRange:
    """Key groups owned by operator index i (KG-7): start = ceil(i*maxP/p), end = floor(((i+1)*maxP-1)/p)."""
    check_parallelism(parallelism, max_parallelism)
    if not 0 <= operator_index < parallelism:
        raise ValueError(f"operator index must be within 0..{parallelism - 1}, got {operator_index}")
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)
