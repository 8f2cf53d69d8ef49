"""`spark.read.format("statecert")`: one keyed state of a checkpoint or savepoint as a DataFrame with typed columns,
typed by the serializer snapshots the snapshot records (a PySpark Python data source, like Spark's own state data
source for its checkpoints). One Spark task reads each subtask's snapshot.

    spark.dataSource.register(StateCertDataSource)
    spark.read.format("statecert").option("operator", "counter").option("state", "count").load(pointer)

Columns: `operator`, `key_group`, the key, `namespace`, `state`, then the value: `value` (value, reducing and
aggregating state), `value` as an array (list state), or `user_key` and `user_value`, one row per entry (map state).
A tuple or record key or value is one column per field (`key_f0`, `value_total`, ...); nested ones are structs. A
serializer without a Spark type (msgpack's plain data, a third party's) gives its values as JSON text.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from statecert.reference.flink.snapshot import is_flink_snapshot
from statecert.reference.format.canonical import CanonicalReader
from statecert.reference.format.entry_check import EntryValidator
from statecert.reference.format.state_meta import SERIALIZER_ROLES, StateMetaInfo
from statecert.reference.serializers import restore_serializer
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.scenarios.spark.columns import Convert, role_columns
from statecert.scenarios.spark.flink_source import FlinkHandlePartition, FlinkLayout, flink_rows, select_flink
from statecert.scenarios.spark.state_reader import WrittenBy, canonical_view
from statecert.spec.errors import CheckpointFormatError, IllegalConfigurationError
from statecert.spec.serializers import SerializerSnapshot
from statecert.spec.state import StateKind

FORMAT = "statecert"
# Spark's type of each scalar serializer of the reference (Java's widths: a Flink `Long` is a Spark long, ...)
SCALAR_TYPES: dict[str, DataType] = {
    "str": StringType(),
    "long": LongType(),
    "int": IntegerType(),
    "short": ShortType(),
    "byte": ByteType(),
    "double": DoubleType(),
    "java-double": DoubleType(),
    "bool": BooleanType(),
    "java-bool": BooleanType(),
    "bytes": BinaryType(),
    "enum": StringType(),
}


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def spark_type(snapshot: SerializerSnapshot) -> tuple[DataType, Convert]:
    """The Spark type of a serializer's values, and how a deserialized value becomes a value of it."""
    sid, config = snapshot.serializer_id, snapshot.config
    if sid in SCALAR_TYPES:
        return SCALAR_TYPES[sid], lambda v: v
    if sid == "void-namespace":
        return StringType(), lambda v: None
    if sid == "tuple":
        parts = [spark_type(SerializerSnapshot.from_plain(f)) for f in config["fields"]]
        struct = StructType([StructField(f"f{i}", t) for i, (t, _) in enumerate(parts)])
        return struct, lambda v: tuple(c(x) for (_, c), x in zip(parts, v, strict=True))
    if sid == "record":
        fields = [(f["name"], spark_type(SerializerSnapshot.from_plain(f["serializer"]))) for f in config["fields"]]
        struct = StructType([StructField(name, t) for name, (t, _) in fields])
        return struct, lambda v: tuple(c(v.get(name)) for name, (_, c) in fields)
    return StringType(), _json


def _columns(prefix: str, snapshot: SerializerSnapshot) -> tuple[list[StructField], Convert]:
    """The columns of a key or value: one named `prefix`, or one per field of a tuple or record (`prefix_field`)."""
    return role_columns(prefix, spark_type(snapshot), snapshot.serializer_id in ("tuple", "record"))


@dataclass(frozen=True)
class StateLayout:
    """What one state's rows look like: the schema, and how an entry's deserialized parts become a row's cells."""

    meta: StateMetaInfo
    schema: StructType
    key: Convert
    namespace: Convert
    values: tuple[Convert, ...]

    @classmethod
    def of(cls, key_serializer: SerializerSnapshot, meta: StateMetaInfo) -> StateLayout:
        key_fields, key = _columns("key", key_serializer)
        ns_type, namespace = spark_type(meta.namespace_serializer)
        fields = [StructField("operator", StringType()), StructField("key_group", IntegerType()), *key_fields]
        fields += [StructField("namespace", ns_type), StructField("state", StringType())]
        values: list[Convert] = []
        if meta.kind is StateKind.LIST:
            element, convert = spark_type(meta.serializers["element"])
            fields.append(StructField("value", ArrayType(element)))
            values.append(lambda v: ([convert(e) for e in v],))
        else:
            roles = SERIALIZER_ROLES[meta.kind]
            prefixes = ("value",) if len(roles) == 1 else ("user_key", "user_value")
            for role, prefix in zip(roles, prefixes, strict=True):
                columns, convert = _columns(prefix, meta.serializers[role])
                fields += columns
                values.append(convert)
        return cls(meta, StructType(fields), key, lambda v: (namespace(v),), tuple(values))


Layout: TypeAlias = StateLayout | FlinkLayout
# the operator, one partition per subtask snapshot, and the layout of the state chosen
Selection: TypeAlias = tuple[str, Sequence[InputPartition], Layout]


@dataclass
class HandlePartition(InputPartition):
    """One subtask's keyed state snapshot: what one Spark task reads."""

    operator: str
    handle: Any
    max_parallelism: int


def _written_by(options: Mapping[str, str]) -> WrittenBy | None:
    """The backend that wrote a format the reference cannot read, from the `written_by.*` options (JSON)."""
    if "written_by.backend" not in options:
        return None
    try:
        backend = json.loads(options["written_by.backend"])
        key = SerializerSnapshot.from_plain(json.loads(options["written_by.key_serializer"]))
        if not isinstance(backend, dict):
            raise ValueError(f"written_by.backend is not a JSON object: {options['written_by.backend']!r}")
    except (KeyError, ValueError) as exc:
        raise IllegalConfigurationError(f"statecert data source: options written_by.*: {exc}") from None
    return WrittenBy(backend, restore_serializer(key))


def select(options: Mapping[str, str]) -> Selection:
    """The operator and state the options select (each may be left out when there is one), its handles and its
    layout, read from the first snapshot's header."""
    pointer = options.get("path")
    if not pointer:
        raise IllegalConfigurationError("statecert data source: no path: load(<checkpoint or savepoint>)")
    if is_flink_snapshot(pointer):
        return select_flink(options)
    metadata = load_checkpoint_metadata(pointer)
    keyed = {
        op.operator_id: [
            HandlePartition(op.operator_id, h, op.max_parallelism)
            for index in sorted(op.subtask_states)
            for h in op.subtask_states[index].managed_keyed_state
        ]
        for op in metadata.operators
    }
    keyed = {op: parts for op, parts in keyed.items() if parts}
    operator = options.get("operator")
    if operator is None and len(keyed) == 1:
        operator = next(iter(keyed))
    if operator is None or operator not in keyed:
        choice = ", ".join(sorted(keyed)) or "none"
        raise IllegalConfigurationError(
            f"statecert data source: option operator={operator!r}: {pointer} has keyed state of: {choice}"
        )
    parts, written_by = keyed[operator], _written_by(options)
    for part in parts:
        with canonical_view(operator, part.handle, part.max_parallelism, written_by) as canonical:
            if canonical is None:
                continue
            with CanonicalReader(canonical) as reader:
                key_serializer, states = reader.header.key_serializer, reader.header.states
            break
    else:
        raise IllegalConfigurationError(f"statecert data source: operator {operator!r} of {pointer} holds no state")
    by_name = {m.name: m for m in states}
    state = options.get("state")
    if state is None and len(by_name) == 1:
        state = next(iter(by_name))
    if state is None or state not in by_name:
        raise IllegalConfigurationError(
            f"statecert data source: option state={state!r}: operator {operator!r} has states "
            f"{', '.join(sorted(by_name))}"
        )
    try:  # the header was read from the checkpoint: a snapshot of the wrong shape is a damaged checkpoint
        layout = StateLayout.of(key_serializer, by_name[state])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointFormatError(
            pointer, f"state {state!r}: a serializer snapshot of no known shape: {exc!r}"
        ) from None
    return operator, parts, layout


class StateCertDataSource(DataSource):
    """`format("statecert")`: options `operator` and `state` (each needed only where there is a choice), and for
    a format only a third-party backend reads, `written_by.backend` (its loader configuration as JSON) and
    `written_by.key_serializer` (the key serializer's snapshot as JSON)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    @functools.cached_property
    def _selection(self) -> Selection:
        """The options' selection, made once per instance (reading the header may restore a backend): Spark asks for
        the schema and then the reader of the same data source."""
        return select(self.options)

    def schema(self) -> StructType:
        return self._selection[2].schema

    def reader(self, schema: StructType) -> StateCertReader:
        _, parts, layout = self._selection
        return StateCertReader(self.options, parts, layout)


class StateCertReader(DataSourceReader):
    """Reads the selected state's entries of one subtask snapshot per partition, validating each (FMT-15)."""

    def __init__(self, options: Mapping[str, str], parts: Sequence[InputPartition], layout: Layout) -> None:
        self.options = dict(options)
        self.parts, self.layout = parts, layout

    def partitions(self) -> list[InputPartition]:
        return list(self.parts)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if isinstance(partition, FlinkHandlePartition):
            assert isinstance(self.layout, FlinkLayout)
            yield from flink_rows(partition, self.layout)
            return
        assert isinstance(partition, HandlePartition) and isinstance(self.layout, StateLayout)
        yield from typed_rows(partition, self.layout, _written_by(self.options))


def typed_rows(part: HandlePartition, layout: StateLayout, written_by: WrittenBy | None) -> Iterator[tuple[Any, ...]]:
    """The rows of `layout`'s state in one subtask snapshot."""
    meta = layout.meta
    with canonical_view(part.operator, part.handle, part.max_parallelism, written_by) as canonical:
        if canonical is None:
            return
        with CanonicalReader(canonical) as reader:
            keys = restore_serializer(reader.header.key_serializer)
            metas = reader.header.states
            validator = EntryValidator(metas, keys, part.max_parallelism, reader.name)
            wanted = next((i for i, m in enumerate(metas) if m.name == meta.name), None)
            if wanted is None:
                return
            namespaces = restore_serializer(metas[wanted].namespace_serializer)
            values = [restore_serializer(metas[wanted].serializers[r]) for r in SERIALIZER_ROLES[meta.kind]]
            for key_group, entries in reader.entries(canonical.key_group_range):
                for index, raw_key, raw_ns, payload in entries:
                    validator.check(key_group, index, raw_key, raw_ns, payload)
                    if index != wanted:
                        continue
                    head = (part.operator, key_group, *layout.key(keys.deserialize(raw_key)))
                    head += (*layout.namespace(namespaces.deserialize(raw_ns)), meta.name)
                    if meta.kind is StateKind.MAP:
                        for k, v in payload:
                            key_cells = layout.values[0](values[0].deserialize(k))
                            yield (*head, *key_cells, *layout.values[1](values[1].deserialize(v)))
                    elif meta.kind is StateKind.LIST:
                        yield (*head, *layout.values[0]([values[0].deserialize(e) for e in payload]))
                    else:
                        yield (*head, *layout.values[0](values[0].deserialize(payload)))


def register(spark: Any) -> None:
    """Make `spark.read.format("statecert")` available in this session."""
    spark.dataSource.register(StateCertDataSource)
