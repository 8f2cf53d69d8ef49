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
from contextlib import contextmanager
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


def _rewritten(keyed: Any, scratch: str) -> KeyGroupsStateHandle | None:
    """A restored keyed backend's canonical savepoint, written to `scratch` (None when it holds no state)."""
    url = Path(scratch, "canonical").as_uri()
    location = CheckpointStorageLocationImpl(1, url, url, 0, None)
    canonical = keyed.snapshot(1, 0, location, CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)).run()
    return canonical if isinstance(canonical, KeyGroupsStateHandle) else None


def _reference_reads(handle: Any) -> bool:
    """Whether the reference reads `handle` itself: canonical, RocksDB's native format, or a changelog over
    either."""
    if isinstance(handle, IncrementalKeyedStateHandle):
        return bool(handle.snapshot_format == ROCKSDB_NATIVE_FORMAT)
    if isinstance(handle, ChangelogStateBackendHandle):
        return all(_reference_reads(part) for part in handle.materialized)
    return isinstance(handle, KeyGroupsStateHandle)


def _changelog_key_serializer(handle: ChangelogStateBackendHandle, max_parallelism: int) -> tuple[Any, bool]:
    """The key serializer a changelog handle was written with, and whether its materialization is RocksDB's."""
    native = next((p for p in handle.materialized if isinstance(p, IncrementalKeyedStateHandle)), None)
    if native is not None:
        return read_native_meta(native)[0], True
    canonical = next((p for p in handle.materialized if isinstance(p, KeyGroupsStateHandle)), None)
    if canonical is not None:
        with CanonicalReader(canonical) as reader:
            return reader.header.key_serializer, False
    with handle.changelog[0].delegate.open() as f:
        return decode_segment(f.read(), "changelog segment", max_parallelism).key_serializer, False


@contextmanager
def canonical_view(
    operator: str, handle: Any, max_parallelism: int, written_by: WrittenBy | None = None
) -> Iterator[KeyGroupsStateHandle | None]:
    """`handle` as a canonical snapshot: itself, or, for any other format, the canonical savepoint the backend that
    reads it writes to scratch space after restoring it (removed on exit); None for a handle without state. A
    native RocksDB snapshot is restored by the RocksDB backend, a changelog replayed into the backend of its
    materialization (CL-4), a format only a third-party backend reads by `written_by`."""
    ours = written_by is None or _reference_reads(handle)
    if isinstance(handle, KeyGroupsStateHandle) and ours:
        yield handle
        return
    if isinstance(handle, ChangelogStateBackendHandle) and ours:
        if not handle.materialized and not handle.changelog:
            yield None
            return
        snapshot, native = _changelog_key_serializer(handle, max_parallelism)
        with tempfile.TemporaryDirectory(prefix="statecert-reader-") as scratch:
            config = {"state.backend.type": "rocksdb" if native else "hashmap"}
            backend = load_state_backend(job_config={**config, "state.backend.rocksdb.localdir": f"{scratch}/local"})
            keys = restore_serializer(snapshot)
            params = KeyedBackendParameters(
                "reader", operator, keys, max_parallelism, handle.key_group_range, (handle,)
            )
            with restore_keyed_backend(backend, params, (handle,)) as keyed:
                yield _rewritten(keyed, scratch)
        return
    if ours:  # RocksDB's native format, restored by the RocksDB backend
        if not isinstance(handle, IncrementalKeyedStateHandle) or handle.snapshot_format != ROCKSDB_NATIVE_FORMAT:
            raise ValueError(f"no reader for native format {getattr(handle, 'snapshot_format', type(handle))!r}")
        written_by = WrittenBy({"state.backend.type": "rocksdb"}, restore_serializer(read_native_meta(handle)[0]))
    assert written_by is not None
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
        with create_keyed_backend(load_state_backend(job_config=written_by.backend_config), params) as keyed:
            yield _rewritten(keyed, scratch)


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
    with canonical_view(operator, handle, max_parallelism, written_by) as canonical:
        if canonical is not None:
            yield from _canonical_rows(operator, canonical, max_parallelism)


def read_keyed_state(
    spark: Any,
    pointer: str,
    operator: str | None = None,
    written_by: WrittenBy | None = None,
    state: str | None = None,
) -> Any:
    """One keyed state of a checkpoint or savepoint as a DataFrame with typed columns, read in parallel (one Spark
    task per subtask snapshot): `spark.read.format("statecert")` with these options (see `datasource`). `operator`
    and `state` may be left out where the snapshot has only one; `written_by` restores a format only a third-party
    backend reads. A choice naming nothing there, or a damaged snapshot, raises here, in the driver, as the
    documented StateCertError it is (not as a Spark analysis error around it)."""
    from statecert.scenarios.spark.datasource import FORMAT, register, select

    options = {"path": pointer, "operator": operator, "state": state}
    if written_by is not None:
        options["written_by.backend"] = json.dumps(dict(written_by.backend_config), sort_keys=True)
        snapshot = written_by.key_serializer.snapshot_configuration().to_plain()
        options["written_by.key_serializer"] = json.dumps(snapshot, sort_keys=True)
    given = {name: value for name, value in options.items() if value is not None}
    select(given)
    register(spark)
    reader = spark.read.format(FORMAT)
    for name, value in given.items():
        if name != "path":
            reader = reader.option(name, value)
    return reader.load(pointer)
