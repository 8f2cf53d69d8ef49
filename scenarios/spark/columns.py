"""The Spark columns of a key or value, for both halves of the state data source (statecert's snapshots and
Flink's): one column named after its role, or one per field of a struct (`key_f0`, `value_total`, ...)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql.types import DataType, StructField, StructType

Convert = Callable[[Any], Any]


def role_columns(prefix: str, typed: tuple[DataType, Convert], split: bool) -> tuple[list[StructField], Convert]:
    """The columns of a value of Spark type `typed[0]` (made from a decoded value by `typed[1]`): one named
    `prefix`, or with `split` one per field of its struct (`prefix_field`); and how a value becomes their cells."""
    data_type, convert = typed
    if split and isinstance(data_type, StructType):
        return [StructField(f"{prefix}_{f.name}", f.dataType) for f in data_type.fields], convert
    return [StructField(prefix, data_type)], lambda v: (convert(v),)
