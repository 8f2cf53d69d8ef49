"""`spark.read.format("statecert")`: a state of a savepoint as typed columns (SCN-8). Rows are checked against the
values written through a keyed backend, over generated state; one Spark read checks the schema and that Spark gives
the same rows."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statecert.reference.checkpointing import create_keyed_backend
from statecert.reference.loader import load_state_backend
from statecert.reference.serializers import (
    IntSerializer,
    JavaBooleanSerializer,
    LongSerializer,
    MsgpackSerializer,
    RecordSerializer,
    StringSerializer,
    TupleSerializer,
)
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.scenarios.spark.datasource import select, typed_rows
from statecert.scenarios.spark.state_reader import read_keyed_state
from statecert.spec.errors import IllegalConfigurationError
from statecert.spec.keyed_backend import CheckpointOptions, KeyedBackendParameters, SnapshotType
from statecert.spec.keygroups import assign_to_key_group, key_group_range_for_operator
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata, OperatorState, OperatorSubtaskState
from statecert.spec.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

MAX_PARALLELISM = 16
KEYS = TupleSerializer(StringSerializer(), LongSerializer())
DESCRIPTORS = {
    "totals": ValueStateDescriptor(
        "totals", serializer=RecordSerializer([("total", LongSerializer(), 0), ("name", StringSerializer(), "")])
    ),
    "events": ListStateDescriptor("events", element_serializer=IntSerializer()),
    "flags": MapStateDescriptor(
        "flags", user_key_serializer=StringSerializer(), user_value_serializer=JavaBooleanSerializer()
    ),
    "blob": ValueStateDescriptor("blob", serializer=MsgpackSerializer()),
}
LONGS = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=8)
STATE = st.dictionaries(
    st.tuples(TEXT, LONGS),
    st.fixed_dictionaries(
        {
            "totals": st.tuples(LONGS, TEXT),
            "events": st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=4),
            "flags": st.dictionaries(TEXT, st.booleans(), min_size=1, max_size=3),
            "blob": st.dictionaries(TEXT, st.integers(0, 9), max_size=2),
        }
    ),
    min_size=1,
    max_size=12,
)


def write_savepoint(
    directory: Path,
    state: dict[tuple[str, int], dict[str, Any]],
    parallelism: int = 2,
    config: Any = None,
    then: dict[tuple[str, int], dict[str, Any]] | None = None,
) -> str:
    """A canonical savepoint of operator `op` holding `state`, written through the heap backend by `parallelism`
    subtasks; its pointer. With a backend `config`, checkpoint 2 of the backend it configures instead, `then`
    written over `state` after checkpoint 1 completed (for the changelog backend: changes logged after the
    materialization)."""
    storage = FileSystemCheckpointStorage(directory.as_uri(), savepoint_dir=(directory / "sp").as_uri())
    access = storage.create_checkpoint_storage("job")
    if config is None:
        locations = [access.initialize_location_for_savepoint(1)]
    else:
        locations = [access.initialize_location_for_checkpoint(1), access.initialize_location_for_checkpoint(2)]
    kind = SnapshotType.SAVEPOINT_CANONICAL if config is None else SnapshotType.CHECKPOINT
    backend = load_state_backend(job_config=config or {"state.backend.type": "hashmap"})
    subtasks = {}
    for index in range(parallelism):
        key_groups = key_group_range_for_operator(MAX_PARALLELISM, parallelism, index)
        params = KeyedBackendParameters("job", "op", KEYS, MAX_PARALLELISM, key_groups)
        with create_keyed_backend(backend, params) as keyed:
            states = {name: keyed.get_or_create_state(d) for name, d in DESCRIPTORS.items()}
            for checkpoint_id, (location, written) in enumerate(
                zip(locations, (state, then or {}), strict=False), start=1
            ):
                for key, values in written.items():
                    if assign_to_key_group(KEYS.key_hash(key), MAX_PARALLELISM) not in key_groups:
                        continue
                    keyed.set_current_key(key)
                    states["totals"].update({"total": values["totals"][0], "name": values["totals"][1]})
                    states["events"].update(values["events"])
                    states["flags"].clear()
                    states["flags"].put_all(values["flags"])
                    states["blob"].update(values["blob"])
                handle = keyed.snapshot(checkpoint_id, 0, location, CheckpointOptions(kind)).run()
                keyed.notify_checkpoint_complete(checkpoint_id)
        subtasks[index] = OperatorSubtaskState((handle,) if handle is not None else ())
    operator = OperatorState("op", parallelism, MAX_PARALLELISM, subtasks)
    written_kind = CheckpointKind.SAVEPOINT_CANONICAL if config is None else CheckpointKind.CHECKPOINT
    metadata = CheckpointMetadata(len(locations), (operator,), written_kind)
    return str(locations[-1].write_metadata(metadata))


def read(pointer: str, state: str) -> list[tuple[Any, ...]]:
    """Every row of `state` through the data source's reader, without Spark."""
    _, parts, layout = select({"path": pointer, "state": state})
    return [row for part in parts for row in typed_rows(part, layout, None)]


@pytest.mark.requirement("SCN-8")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=STATE)
def test_each_state_reads_back_as_typed_columns_what_was_written(state: dict[tuple[str, int], Any]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        pointer = write_savepoint(Path(scratch), state)
        totals = {(r[2], r[3]): (r[6], r[7]) for r in read(pointer, "totals")}
        events = {(r[2], r[3]): r[6] for r in read(pointer, "events")}
        flags = {(r[2], r[3], r[6]): r[7] for r in read(pointer, "flags")}
        blobs = {(r[2], r[3]): json.loads(r[6]) for r in read(pointer, "blob")}
    expected_totals = {k: v["totals"] for k, v in state.items()}
    assert totals == expected_totals, f"SCN-8: read(totals): expected {expected_totals}, got {totals}"
    assert events == {k: v["events"] for k, v in state.items()}, f"SCN-8: read(events) gave {events}"
    expected_flags = {(*k, f): b for k, v in state.items() for f, b in v["flags"].items()}
    assert flags == expected_flags, f"SCN-8: read(flags): expected {expected_flags}, got {flags}"
    assert blobs == {k: v["blob"] for k, v in state.items()}, f"SCN-8: read(blob) gave {blobs}"


@pytest.mark.requirement("SCN-8", "CL-4")
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=STATE, then=STATE)
def test_a_changelog_checkpoint_reads_as_the_savepoint_of_the_same_state(
    backend: str, state: dict[tuple[str, int], Any], then: dict[tuple[str, int], Any]
) -> None:
    """A checkpoint of the changelog backend, its later changes replayed from the log over the materialization
    (CL-4), reads back the rows a canonical savepoint of the same state gives."""
    config = {"state.backend.type": backend, "state.changelog.enabled": "true"}
    with tempfile.TemporaryDirectory() as scratch:
        config["state.backend.rocksdb.localdir"] = f"{scratch}/local"
        changelog = write_savepoint(Path(scratch, "changelog"), state, config=config, then=then)
        canonical = write_savepoint(Path(scratch, "canonical"), {**state, **then})
        for name in DESCRIPTORS:
            got, expected = sorted(read(changelog, name), key=repr), sorted(read(canonical, name), key=repr)
            assert got == expected, f"SCN-8: {backend} changelog checkpoint, state {name}: {got} != {expected}"


@pytest.mark.requirement("SCN-8")
def test_a_state_must_be_chosen_where_there_are_several_and_exist(tmp_path: Path) -> None:
    pointer = write_savepoint(tmp_path, {("a", 1): _one()})
    for options, named in (({"path": pointer}, "state=None"), ({"path": pointer, "state": "x"}, "state='x'")):
        with pytest.raises(IllegalConfigurationError, match=rf"option {named}: operator 'op' has states blob, "):
            select(options)
    with pytest.raises(IllegalConfigurationError, match=r"option operator='other': .* has keyed state of: op"):
        select({"path": pointer, "operator": "other", "state": "totals"})


@pytest.mark.requirement("SCN-8")
def test_spark_reads_the_typed_columns_the_reader_gives(spark: Any, tmp_path: Path) -> None:
    from statecert.scenarios.spark.datasource import register

    state = {("a", 1): _one(), ("b", -(2**63)): _one(total=2**63 - 1)}
    pointer = write_savepoint(tmp_path, state)
    register(spark)
    frame = spark.read.format("statecert").option("state", "totals").load(pointer)
    schema = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    expected = {
        "operator": "string",
        "key_group": "int",
        "key_f0": "string",
        "key_f1": "bigint",
        "namespace": "string",
        "state": "string",
        "value_total": "bigint",
        "value_name": "string",
    }
    assert schema == expected, f"SCN-8: format('statecert') schema: expected {expected}, got {schema}"
    rows = sorted(tuple(r) for r in frame.collect())
    assert rows == sorted(read(pointer, "totals")), f"SCN-8: Spark read {rows}"
    events = spark.read.format("statecert").option("state", "events").load(pointer)
    assert events.schema["value"].dataType.simpleString() == "array<int>"
    with pytest.raises(IllegalConfigurationError, match=r"^statecert data source: option state='nope': "):
        read_keyed_state(spark, pointer, state="nope")


def _one(total: int = 7) -> dict[str, Any]:
    return {"totals": (total, "n"), "events": [1, 2], "flags": {"f": True}, "blob": {"x": 1}}


@pytest.mark.requirement("SCN-8", "IF-9")
def test_spark_reads_a_savepoint_flink_wrote_as_typed_columns(spark: Any) -> None:
    from tests.flink.savepoints import GOLDEN, expected_state

    pointer = str(GOLDEN / "rocksdb-canonical-savepoint-compressed")
    pair = read_keyed_state(spark, pointer, operator="words", state="pair")
    schema = {f.name: f.dataType.simpleString() for f in pair.schema.fields}
    assert schema == {
        "operator": "string",
        "key_group": "int",
        "key": "string",
        "namespace": "string",
        "state": "string",
        "value_f0": "int",
        "value_f1": "double",
    }, f"SCN-8: read_keyed_state(words, pair) of Flink's savepoint: schema {schema}"
    expected = expected_state()["words"]
    got = {r["key"]: (r["value_f0"], r["value_f1"]) for r in pair.collect()}
    want = {key: value for (key, name), value in expected.items() if name == "pair"}
    assert got == want, f"SCN-8: Flink's pair state read by Spark: expected {want}, got {got}"
    parity = read_keyed_state(spark, pointer, operator="words", state="parity")
    columns = [parity.schema[c].dataType.simpleString() for c in ("user_key", "user_value")]
    assert columns == ["int", "boolean"], f"SCN-8: Flink's map state parity: user_key, user_value types {columns}"
    entries = sum(len(v) for (_, name), v in expected.items() if name == "parity")
    assert parity.count() == entries, f"SCN-8: Flink's map state parity: expected {entries} rows (one per entry)"
    seen = read_keyed_state(spark, pointer, operator="words", state="seen").schema["value"].dataType.simpleString()
    assert seen == "array<bigint>", f"SCN-8: Flink's list state seen: expected array<bigint>, got {seen}"
    for name, undecodable in (("opaque", "java.util.UUID"), ("point", "FlinkSavepoints$Point")):
        values = {r["value"] for r in read_keyed_state(spark, pointer, operator="words", state=name).collect()}
        assert values == {f"<undecodable: {undecodable}>"}, f"SCN-8: a Kryo or POJO column {name} reads as {values}"
    nested = {name: read_keyed_state(spark, pointer, operator="words", state=name) for name in ("history", "totals")}
    types = {name: frame.schema["value"].dataType.simpleString() for name, frame in nested.items()}
    assert types == {
        "history": "array<struct<f0:string,f1:bigint>>",
        "totals": "map<string,struct<f0:int,f1:double>>",
    }, f"SCN-8: nested Flink composites as Spark types: {types}"
    totals = {r["key"]: {k: tuple(v) for k, v in r["value"].items()} for r in nested["totals"].collect()}
    assert totals == {key: value for (key, name), value in expected.items() if name == "totals"}, (
        f"SCN-8: Flink's map of rows read by Spark: {totals}"
    )
