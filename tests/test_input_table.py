"""The Spark runner's input table (`scenarios/spark/input_table.py`): the Parquet files hold exactly the records the
simulator draws from the seed, each with its aggregate key's id and key group (KG-2), one epoch per row group; an
input is reused only when its marker says it is whole and of the same shape."""

from __future__ import annotations

import dataclasses
import random
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecert.reference.key_types import KEY_TYPES, KeyType
from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.reference.simulator.inputs import generate_inputs
from statecert.scenarios.spark import input_table
from statecert.spec.keygroups import assign_to_key_group

shapes = st.builds(
    input_table.InputShape,
    seed=st.integers(0, 2**31),
    sources=st.integers(1, 3),
    keys_per_source=st.integers(1, 20),
    records_per_source=st.integers(0, 120),
    key_skew=st.sampled_from([0.0, 1.2]),
    records_per_epoch=st.integers(1, 50),
    max_parallelism=st.sampled_from([1, 7, 128, 32768]),
    key_selector=st.sampled_from(["key", "split"]),
    key_type=st.sampled_from(KEY_TYPES),
)


def aggregate_for(shape: input_table.InputShape) -> KeyedAggregate:
    return KeyedAggregate(key_selector=shape.key_selector, key_type=KeyType(name=shape.key_type))


@pytest.mark.requirement("SCN-6", "KG-2")
@settings(max_examples=30, deadline=None)
@given(shape=shapes)
def test_input_table_holds_the_seeded_records_with_their_key_ids_and_key_groups(
    shape: input_table.InputShape,
) -> None:
    aggregate = aggregate_for(shape)
    expected = generate_inputs(
        random.Random(shape.seed), shape.sources, shape.keys_per_source, shape.records_per_source, shape.key_skew
    )
    serializer = aggregate.key_type.serializer()
    with tempfile.TemporaryDirectory() as directory:
        names = input_table.write_input(shape, aggregate, directory)
        assert len(set(names)) == len(names), f"key names repeat: {names}"
        for source, records in enumerate(expected):
            path = input_table.split_path(directory, source)
            table = pq.read_table(path)
            rows = table.to_pylist()
            got = [(r["source"], r["offset"], r["key"]) for r in rows]
            assert got == [(r.source, r.offset, r.key) for r in records], f"split {source}: records differ"
            for row in rows:
                name = row["key"] if shape.key_selector == "key" else f"s{row['source']}"
                assert names[row["key_id"]] == name, f"split {source} offset {row['offset']}: key id"
                group = assign_to_key_group(serializer.key_hash(aggregate.key_of_name(name)), shape.max_parallelism)
                assert row["key_group"] == group, f"key {name!r}: expected key group {group}, got {row['key_group']}"
            metadata = pq.ParquetFile(path).metadata
            for g in range(metadata.num_row_groups):
                offsets = pq.ParquetFile(path).read_row_group(g, columns=["offset"])["offset"].to_pylist()
                epochs = {o // shape.records_per_epoch for o in offsets}
                assert len(epochs) <= 1, f"split {source} row group {g} spans epochs {sorted(epochs)}"


@pytest.mark.requirement("SCN-6")
def test_an_input_of_the_same_shape_is_reused_and_another_shape_or_a_missing_marker_rewrites_it() -> None:
    shape = input_table.InputShape(3, 2, 10, 50, 0.0, 20, 128, "key", "string")
    aggregate = aggregate_for(shape)
    with tempfile.TemporaryDirectory() as directory:
        names = input_table.write_input(shape, aggregate, directory)
        split = Path(input_table.split_path(directory, 0))
        written = split.stat().st_mtime_ns
        assert input_table.write_input(shape, aggregate, directory) == names
        assert split.stat().st_mtime_ns == written, "an input of the same shape was written again"

        other = dataclasses.replace(shape, seed=4)
        input_table.write_input(other, aggregate, directory)
        keys = pq.read_table(split)["key"].to_pylist()
        expected = generate_inputs(random.Random(4), 2, 10, 50, 0.0)[0]
        assert keys == [r.key for r in expected], "an input of another shape was reused"

        (Path(directory) / "_INPUT.json").unlink()  # as if the writer died before the marker
        split.write_bytes(b"half written")
        input_table.write_input(other, aggregate, directory)
        assert pq.read_table(split)["key"].to_pylist() == keys, "an input without its marker was reused"
