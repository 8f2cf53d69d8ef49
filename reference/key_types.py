"""The Java type a job's keys have (`[job] key_type` of a scenario or job file): which key serializer, and so which
`hashCode`, places them in key groups (KG-1). A Flink job keyed by `Types.INT` puts key 7 in another key group than
one keyed by `Types.LONG` or `Types.STRING`, so a backend is exercised with the types real jobs use.

Record keys of the seeded input are names (`s<source>-k<i>`); a numeric key type maps the name's index
`source * keys_per_source + i` (or `source` for the `split` key selector) zig-zag onto the signed integers
(0, -1, 1, -2, ...), so keys are distinct and half of them negative."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from statecert.reference.serializers import (
    ByteSerializer,
    IntSerializer,
    JavaDoubleSerializer,
    LongSerializer,
    ShortSerializer,
    StringSerializer,
)

# name -> (serializer class, number of distinct keys the type holds, Spark SQL type of the key column)
_TYPES: dict[str, tuple[type[Any], int, str]] = {
    "string": (StringSerializer, 2**63, "string"),
    "long": (LongSerializer, 2**64, "bigint"),
    "int": (IntSerializer, 2**32, "int"),
    "short": (ShortSerializer, 2**16, "smallint"),
    "byte": (ByteSerializer, 2**8, "tinyint"),
    "double": (JavaDoubleSerializer, 2**53, "double"),
}
KEY_TYPES = tuple(_TYPES)
_SERIALIZERS: dict[str, Any] = {}


def _zigzag(n: int) -> int:
    """0, 1, 2, 3, ... -> 0, -1, 1, -2, ...: a bijection of the naturals onto the integers."""
    return n // 2 if n % 2 == 0 else -(n // 2) - 1


@dataclass(frozen=True)
class KeyType:
    """One of `KEY_TYPES`; `keys_per_source` spaces the sources' key indices apart."""

    name: str = "string"
    keys_per_source: int = 10

    def __post_init__(self) -> None:
        if self.name not in _TYPES:
            raise ValueError(f"key type must be one of {', '.join(KEY_TYPES)}, got {self.name!r}")

    @property
    def is_string(self) -> bool:
        return self.name == "string"

    def serializer(self) -> Any:
        """The key serializer (stateless, one per type); its `key_hash` is the Java type's `hashCode` (KG-1)."""
        if self.name not in _SERIALIZERS:
            _SERIALIZERS[self.name] = _TYPES[self.name][0]()
        return _SERIALIZERS[self.name]

    @property
    def capacity(self) -> int:
        """How many distinct keys the type holds (a scenario with more keys than that is invalid)."""
        return _TYPES[self.name][1]

    @property
    def spark_type(self) -> str:
        return _TYPES[self.name][2]

    @functools.lru_cache(maxsize=1 << 16)  # noqa: B019 (a frozen value object: the cache keeps no instance alive long)
    def of(self, name: str) -> Any:
        """The typed key of a key name (`s<source>-k<i>` or `s<source>`)."""
        if self.is_string:
            return name
        source, _, index = name[1:].partition("-k")
        n = int(source) * self.keys_per_source + int(index) if index else int(source)
        value = _zigzag(n)
        return float(value) if self.name == "double" else value

    def second_stage(self, key: Any) -> Any:
        """The key of the same record in a 3-stage job's second keyed shuffle: another key of the same type, so
        the second shuffle partitions differently; `first_stage` undoes it."""
        if self.is_string:
            return f"{key}/2"
        return key + 0.5 if self.name == "double" else ~key

    def first_stage(self, key: Any) -> Any:
        if self.is_string:
            return str(key).removesuffix("/2")
        return key - 0.5 if self.name == "double" else ~key
