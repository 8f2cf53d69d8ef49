"""Reading a checkpoint's or savepoint's keyed state as rows, and as a Spark DataFrame (one row per operator, key,
namespace and state), like Flink's State Processor API or Spark's state data source.

Canonical snapshots are decoded directly with the serializers their header records (never unpickled); a native
RocksDB snapshot is first restored by the RocksDB backend and rewritten as a canonical one in a scratch directory.
A format only a third-party backend reads (its own native format, or a changelog over it) is restored the same way
by the backend the job ran on, when the caller names it (`WrittenBy`), as Flink's State Processor API is given the
state backend that wrote a savepoint.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statecert.reference.changelog.records import decode_segment
from statecert.reference.changelog.replay import restore_keyed_backend
from statecert.reference.checkpointing import create_keyed_backend
from statecert.reference.format.canonical import CanonicalReader
from statecert.reference.format.entry_check import EntryValidator
from statecert.reference.format.state_meta import SERIALIZER_ROLES
from statecert.reference.loader import load_state_backend
from statecert.reference.rocksdb.native_restore import read_native_meta
from statecert.reference.serializers import restore_serializer
from statecert.reference.storage.location import CheckpointStorageLocationImpl, load_checkpoint_metadata
from statecert.spec.handles import (
    ROCKSDB_NATIVE_FORMAT,
    ChangelogStateBackendHandle,
    IncrementalKeyedStateHandle,
    KeyGroupsStateHandle,
)
from statecert.spec.keyed_backend import CheckpointOptions, KeyedBackendParameters, SnapshotType
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import StateKind


@dataclass(frozen=True)
class WrittenBy:
    """The backend a job ran on (its loader configuration, LD-1) and the job's key serializer: what restores a
    format the reference cannot read."""

    backend_config: Mapping[str, object]
    key_serializer: TypeSerializer[Any]


COLUMNS = ("operator", "key_group", "key", "namespace", "state", "value")
SCHEMA = "operator string, key_group int, key string, namespace string, state string, value string"

Row = tuple[str, int, str, str, str, str]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _canonical_rows(operator: str, handle: KeyGroupsStateHandle, max_parallelism: int) -> Iterator[Row]:
    """Rows of a canonical stream; every entry is validated first (FMT-15), so hostile bytes are a documented
    CheckpointFormatError, never a ValueError from a serializer."""
    with CanonicalReader(handle) as reader:
        keys = restore_serializer(reader.header.key_serializer)
        metas = reader.header.states
        validator = EntryValidator(metas, keys, max_parallelism, reader.name)
        namespaces = [restore_serializer(m.namespace_serializer) for m in metas]
        values = [[restore_serializer(m.serializers[r]) for r in SERIALIZER_ROLES[m.kind]] for m in metas]
        for key_group, entries in reader.entries(handle.key_group_range):
            for index, raw_key, raw_ns, payload in entries:
                validator.check(key_group, index, raw_key, raw_ns, payload)
                meta, serializers = metas[index], values[index]
                if meta.kind is StateKind.LIST:
                    value: Any = [serializers[0].deserialize(e) for e in payload]
                elif meta.kind is StateKind.MAP:
                    value = {_text(serializers[0].deserialize(k)): serializers[1].deserialize(v) for k, v in payload}
                else:
                    value = serializers[0].deserialize(payload)
                key = _text(keys.deserialize(raw_key))
                namespace = _text(namespaces[index].deserialize(raw_ns))
                yield operator, key_group, key, namespace, meta.name, _text(value)


def _native_rows(operator: str, handle: IncrementalKeyedStateHandle, max_parallelism: int) -> Iterator[Row]:
    """Restore with the RocksDB backend, write a canonical savepoint to scratch space, read that."""
    if handle.snapshot_format != ROCKSDB_NATIVE_FORMAT:
        raise ValueError(f"no reader for native format {handle.snapshot_format!r}")
    key_serializer, _ = read_native_meta(handle)
    rocksdb = WrittenBy({"state.backend.type": "rocksdb"}, restore_serializer(key_serializer))
    yield from _foreign_rows(operator, handle, max_parallelism, rocksdb)


def _rewritten_rows(operator: str, keyed: Any, max_parallelism: int, scratch: str) -> Iterator[Row]:
    """Rows of a restored keyed backend, through a canonical savepoint it writes to `scratch`."""
    url = Path(scratch, "canonical").as_uri()
    location = CheckpointStorageLocationImpl(1, url, url, 0, None)
    options = CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)
    canonical = keyed.snapshot(1, 0, location, options).run()
    if isinstance(canonical, KeyGroupsStateHandle):
        yield from _canonical_rows(operator, canonical, max_parallelism)


def _foreign_rows(operator: str, handle: Any, max_parallelism: int, written_by: WrittenBy) -> Iterator[Row]:
    """Restore with the backend the job ran on, write a canonical savepoint to scratch space, read that."""
    backend = load_state_backend(job_config=written_by.backend_config)
    with tempfile.TemporaryDirectory(prefix="statecert-reader-") as scratch:
        params = KeyedBackendParameters(
            "reader",
            operator,
            written_by.key_serializer,
            max_parallelism,
            handle.key_group_range,
            (handle,),
            local_dir=f"{scratch}/local",
        )
        with create_keyed_backend(backend, params) as keyed:
            rows = list(_rewritten_rows(operator, keyed, max_parallelism, scratch))
    yield from rows


def _reference_reads(handle: Any) -> bool:
    """Whether the reference reads `handle` itself: canonical, RocksDB's native format, or a changelog over
    either."""
    if isinstance(handle, IncrementalKeyedStateHandle):
        return handle.snapshot_format == ROCKSDB_NATIVE_FORMAT
    if isinstance(handle, ChangelogStateBackendHandle):
        return all(_reference_reads(part) for part in handle.materialized)
    return isinstance(handle, KeyGroupsStateHandle)


def _changelog_rows(operator: str, handle: ChangelogStateBackendHandle, max_parallelism: int) -> Iterator[Row]:
    """Replay the handle into the backend that wrote its materialization (RocksDB for native files, else the heap
    backend), write a canonical savepoint to scratch space, read that (CL-4)."""
    native = any(isinstance(part, IncrementalKeyedStateHandle) for part in handle.materialized)
    if native:
        snapshot, _ = read_native_meta(
            next(p for p in handle.materialized if isinstance(p, IncrementalKeyedStateHandle))
        )
    elif handle.materialized:
        with CanonicalReader(handle.materialized[0]) as reader:  # type: ignore[arg-type]
            snapshot = reader.header.key_serializer
    elif handle.changelog:
        with handle.changelog[0].delegate.open() as f:
            snapshot = decode_segment(f.read(), "changelog segment", max_parallelism).key_serializer
    else:
        return
    keys = restore_serializer(snapshot)
    with tempfile.TemporaryDirectory(prefix="statecert-reader-") as scratch:
        backend = load_state_backend(
            job_config={
                "state.backend.type": "rocksdb" if native else "hashmap",
                "state.backend.rocksdb.localdir": f"{scratch}/local",
            }
        )
        params = KeyedBackendParameters("reader", operator, keys, max_parallelism, handle.key_group_range, (handle,))
        with restore_keyed_backend(backend, params, (handle,)) as keyed:
            rows = list(_rewritten_rows(operator, keyed, max_parallelism, scratch))
    yield from rows


def keyed_state_rows(pointer: str, operator: str | None = None, written_by: WrittenBy | None = None) -> Iterator[Row]:
    """Every keyed state entry of a checkpoint or savepoint (directory or `_metadata`), in plain Python."""
    metadata = load_checkpoint_metadata(pointer)
    for op in metadata.operators:
        if operator is not None and op.operator_id != operator:
            continue
        for index in sorted(op.subtask_states):
            for handle in op.subtask_states[index].managed_keyed_state:
                yield from _handle_rows(op.operator_id, handle, op.max_parallelism, written_by)


def _handle_rows(
    operator: str, handle: Any, max_parallelism: int, written_by: WrittenBy | None = None
) -> Iterator[Row]:
    if written_by is not None and not _reference_reads(handle):
        yield from _foreign_rows(operator, handle, max_parallelism, written_by)
    elif isinstance(handle, KeyGroupsStateHandle):
        yield from _canonical_rows(operator, handle, max_parallelism)
    elif isinstance(handle, IncrementalKeyedStateHandle):
        yield from _native_rows(operator, handle, max_parallelism)
    elif isinstance(handle, ChangelogStateBackendHandle):
        yield from _changelog_rows(operator, handle, max_parallelism)


def read_keyed_state(spark: Any, pointer: str, operator: str | None = None, written_by: WrittenBy | None = None) -> Any:
    """The keyed state of a checkpoint or savepoint as a DataFrame with `COLUMNS`, read in parallel: one Spark
    task per subtask snapshot (the handles travel in the closure; the workers read the state files)."""
    metadata = load_checkpoint_metadata(pointer)
    work = [
        (op.operator_id, handle, op.max_parallelism, written_by)
        for op in metadata.operators
        if operator is None or op.operator_id == operator
        for index in sorted(op.subtask_states)
        for handle in op.subtask_states[index].managed_keyed_state
    ]
    rdd = spark.sparkContext.parallelize(work, max(1, len(work))).flatMap(lambda w: _handle_rows(*w))
    return spark.createDataFrame(rdd, SCHEMA)
