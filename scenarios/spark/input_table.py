"""The scenario's input as a real Spark source: drawn once on the driver from the scenario's seed (the records the
simulator draws), written as one Parquet file per source split at any fsspec URL, and read back by every epoch as
a DataFrame. Each record carries its aggregate key's id (an index into the input's key names, `keys.parquet`) and
its key group (KG-2), computed vectorized: one hash per distinct key, spread over the records by id; the owning
subtask is then a Spark SQL expression of it (KG-6). Epochs read ids, not key strings: moving strings from the JVM
into Python costs about twice as much.

A split's row groups hold one epoch each, so an epoch's offset filter reads only its own row group."""

from __future__ import annotations

import functools
import json
import operator
import random
from dataclasses import asdict, dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.reference.simulator.inputs import generate_inputs
from statecert.spec.keygroups import assign_to_key_group

SCHEMA = "source int, offset long, key string, key_id int, key_group int"  # a split file's columns, as Spark DDL
EPOCH_COLUMNS = ("source", "offset", "key_id")  # what an epoch moves into Python
_KEYS = "keys.parquet"  # the aggregate keys' names, in order of id
_MARKER = "_INPUT.json"  # written last: what the files hold; an input without it is rewritten


@dataclass(frozen=True)
class InputShape:
    """What decides the input table's content: the seeded records and the key groups of their aggregate keys."""

    seed: int
    sources: int
    keys_per_source: int
    records_per_source: int
    key_skew: float
    records_per_epoch: int
    max_parallelism: int
    key_selector: str
    key_type: str


def aggregate_names(aggregate: KeyedAggregate, table: pa.Table) -> pa.ChunkedArray:
    """The name of each record's aggregate key: its own key, or `s<source>` for the `split` key selector."""
    if aggregate.key_selector == "key":
        return table["key"]
    return pc.binary_join_element_wise("s", pc.cast(table["source"], pa.string()), "")


def split_path(url: str, source: int) -> str:
    return f"{url}/split-{source}.parquet"


def write_input(shape: InputShape, aggregate: KeyedAggregate, url: str) -> list[str]:
    """The input's splits as Parquet files under `url` (any fsspec URL), unless an input of the same shape is
    already there; returns the aggregate keys' names in order of id. The marker file goes last, so a half-written
    input is never taken for a whole one."""
    fs, root = fsspec.core.url_to_fs(url)
    marker = f"{root}/{_MARKER}"
    wanted = json.dumps(asdict(shape), sort_keys=True)
    if fs.exists(marker):
        with fs.open(marker, "r") as f:
            same = f.read() == wanted
        if same:
            with fs.open(f"{root}/{_KEYS}", "rb") as f:
                return [str(name) for name in pq.read_table(f)["name"].to_pylist()]
        fs.rm_file(marker)
    fs.makedirs(root, exist_ok=True)
    rng = random.Random(shape.seed)
    splits = generate_inputs(rng, shape.sources, shape.keys_per_source, shape.records_per_source, shape.key_skew)
    tables = [
        pa.table(
            {
                "source": pa.array([r.source for r in records], pa.int32()),
                "offset": pa.array([r.offset for r in records], pa.int64()),
                "key": pa.array([r.key for r in records], pa.string()),
            }
        )
        for records in splits
    ]
    # one dictionary over all splits: a key's id is the same in every split
    names_per_split = [aggregate_names(aggregate, t) for t in tables]
    dictionary = pc.unique(pa.chunked_array([c for n in names_per_split for c in n.chunks], pa.string()))
    names = [str(name) for name in dictionary.to_pylist()]
    serializer = aggregate.key_type.serializer()
    groups = np.array(
        [assign_to_key_group(serializer.key_hash(aggregate.key_of_name(n)), shape.max_parallelism) for n in names],
        dtype=np.int32,
    )
    for source, (table, split_names) in enumerate(zip(tables, names_per_split, strict=True)):
        ids = pc.index_in(split_names, value_set=dictionary).combine_chunks()
        table = table.append_column("key_id", ids.cast(pa.int32()))
        table = table.append_column("key_group", pa.array(groups[ids.to_numpy(zero_copy_only=False)], pa.int32()))
        with fs.open(split_path(root, source), "wb") as f:
            pq.write_table(table, f, row_group_size=max(1, shape.records_per_epoch))
    with fs.open(f"{root}/{_KEYS}", "wb") as f:
        pq.write_table(pa.table({"name": pa.array(names, pa.string())}), f)
    with fs.open(marker, "w") as f:
        f.write(wanted)
    return names


def spark_url(url: str) -> str:
    """The URL Spark's Hadoop file systems read for an fsspec URL: a local path as `file:`, `s3://` as `s3a://`
    (the Hadoop S3 connector's scheme); other schemes (hdfs, gs, abfs, file) as they are."""
    protocol = fsspec.utils.get_protocol(url)
    if protocol in ("file", "local"):
        return "file://" + str(fsspec.core.url_to_fs(url)[1])
    if protocol == "s3":
        return "s3a://" + url.split("://", 1)[1]
    return url


def scan(spark: Any, url: str, sources: int) -> Any:
    """All source splits' files as one DataFrame: listed once per job run, filtered per epoch (`read_epoch`)."""
    paths = [spark_url(split_path(url, source)) for source in range(sources)]
    return spark.read.schema(SCHEMA).parquet(*paths)


def read_epoch(splits: Any, ranges: dict[int, tuple[int, int]], parallelism: int, max_parallelism: int) -> Any:
    """The epoch's records of the DataFrame `splits` (`scan`) as `EPOCH_COLUMNS`, with the subtask that owns each
    record's key group: `key_group * parallelism div max_parallelism` (KG-6)."""
    from pyspark.sql import functions as F

    if not ranges:
        raise ValueError("an epoch reads at least one source split")
    wanted = [(F.col("source") == s) & (F.col("offset") >= a) & (F.col("offset") < b) for s, (a, b) in ranges.items()]
    subtask = F.expr(f"CAST(key_group * {parallelism} DIV {max_parallelism} AS INT)")
    return splits.where(functools.reduce(operator.or_, wanted)).select(*EPOCH_COLUMNS, subtask.alias("subtask"))
