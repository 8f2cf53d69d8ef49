"""The Flink half of `spark.read.format("statecert")`: one keyed state of a checkpoint or savepoint written by Apache
Flink, with Spark types from Flink's serializer snapshots (`Long` a long, `Tuple2<Integer, Double>` one column per
field, a list an array, a map state one row per entry, ...). A serializer the reader does not decode (Kryo, POJO,
...) gives a string column holding `<undecodable: its class>` for every value."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from statecert.reference.flink.keyed_stream import FlinkStateMeta
from statecert.reference.flink.metadata import FlinkKeyedHandle, load_flink_checkpoint
from statecert.reference.flink.serializers import FlinkSerializer
from statecert.reference.flink.snapshot import choose_operator, entries_of, header_of, keyed_handles
from statecert.scenarios.spark.columns import Convert, role_columns
from statecert.spec.errors import IllegalConfigurationError

SCALARS: dict[str, DataType] = {
    "long": LongType(),
    "int": IntegerType(),
    "short": ShortType(),
    "byte": ByteType(),
    "double": DoubleType(),
    "float": FloatType(),
    "boolean": BooleanType(),
    "char": StringType(),
    "string": StringType(),
    "void": StringType(),
}


def flink_spark_type(serializer: FlinkSerializer) -> tuple[DataType, Convert]:
    """The Spark type of a Flink serializer's values, and how a decoded value becomes one."""
    if not serializer.decodable:
        return StringType(), str
    if serializer.kind in SCALARS:
        return SCALARS[serializer.kind], lambda v: v
    parts = [flink_spark_type(f) for f in serializer.fields]
    if serializer.kind in ("tuple", "row"):
        struct = StructType([StructField(f"f{i}", t) for i, (t, _) in enumerate(parts)])
        return struct, lambda v: tuple(c(x) for (_, c), x in zip(parts, v, strict=True))
    if serializer.kind == "list":
        ((element, convert),) = parts
        return ArrayType(element), lambda v: [convert(e) for e in v]
    (key, key_convert), (value, value_convert) = parts
    return MapType(key, value), lambda v: {key_convert(k): value_convert(x) for k, x in v.items()}


def _columns(prefix: str, serializer: FlinkSerializer) -> tuple[list[StructField], Convert]:
    return role_columns(prefix, flink_spark_type(serializer), True)


@dataclass(frozen=True)
class FlinkLayout:
    """One Flink state's schema and converters."""

    operator: str
    meta: FlinkStateMeta
    schema: StructType
    key: Convert
    values: tuple[Convert, ...]

    @classmethod
    def of(cls, operator: str, key_serializer: FlinkSerializer, meta: FlinkStateMeta) -> FlinkLayout:
        key_fields, key = _columns("key", key_serializer)
        fields = [StructField("operator", StringType()), StructField("key_group", IntegerType()), *key_fields]
        fields += [StructField("namespace", StringType()), StructField("state", StringType())]
        value = meta.value
        values: list[Convert] = []
        if meta.kind == "MAP":
            for prefix, serializer in zip(("user_key", "user_value"), value.fields, strict=True):
                columns, convert = _columns(prefix, serializer)
                fields += columns
                values.append(convert)
        else:
            columns, convert = _columns("value", value)
            fields += columns
            values.append(convert)
        return cls(operator, meta, StructType(fields), key, tuple(values))


@dataclass
class FlinkHandlePartition(InputPartition):
    """One subtask's keyed state of a Flink snapshot."""

    path: str
    handle: FlinkKeyedHandle
    max_parallelism: int


def select_flink(options: Mapping[str, str]) -> tuple[str, list[FlinkHandlePartition], FlinkLayout]:
    pointer = options["path"]
    checkpoint = load_flink_checkpoint(pointer)
    op = choose_operator(checkpoint, options.get("operator"))
    handles = keyed_handles(op)
    header = header_of(handles[0], checkpoint.path, op.max_parallelism)
    by_name = {m.name: m for m in header.states if m.backend_type != "PRIORITY_QUEUE"}
    state = options.get("state")
    if state is None and len(by_name) == 1:
        state = next(iter(by_name))
    if state is None or state not in by_name:
        raise IllegalConfigurationError(
            f"statecert data source: option state={state!r}: operator {op.uid or op.name!r} has states "
            f"{', '.join(sorted(by_name))}"
        )
    label = op.uid or op.name or op.operator_id
    parts = [FlinkHandlePartition(checkpoint.path, h, op.max_parallelism) for h in handles]
    return label, parts, FlinkLayout.of(label, header.key_serializer, by_name[state])


def flink_rows(part: FlinkHandlePartition, layout: FlinkLayout) -> Iterator[tuple[Any, ...]]:
    """The rows of `layout`'s state in one subtask's snapshot."""
    meta = layout.meta
    for entry in entries_of(part.handle, part.path, part.max_parallelism, {meta.name}):
        head = (layout.operator, entry.key_group, *layout.key(entry.key), None, meta.name)
        if meta.kind == "MAP":
            yield (*head, *layout.values[0](entry.user_key), *layout.values[1](entry.value))
        else:
            yield (*head, *layout.values[0](entry.value))
