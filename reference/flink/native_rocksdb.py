"""Flink's native RocksDB snapshots (an `IncrementalRemoteKeyedStateHandle`: the header stream, the SST files, the
MANIFEST, CURRENT and OPTIONS files), read by opening the files with rocksdict read-only in a scratch directory.

Where not: list state. Flink keeps it as merge operands of its `stringappendtest` operator, which rocksdict cannot
install, so a list state's column family is refused instead of being read as a smaller state."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

from rocksdict import AccessType, Options, Rdict

from statecert.reference.flink.java_input import JavaDataInput
from statecert.reference.flink.keyed_stream import EntryDecoder, FlinkEntry, FlinkKeyedHeader, read_header
from statecert.reference.flink.metadata import FlinkIncrementalHandle
from statecert.spec.errors import CheckpointFormatError


def native_header(handle: FlinkIncrementalHandle, path: str) -> FlinkKeyedHeader:
    if handle.meta is None:
        raise CheckpointFormatError(path, "a native RocksDB snapshot without its meta data stream")
    return read_header(JavaDataInput(handle.meta.read(), handle.meta.url or path))


def native_entries(
    handle: FlinkIncrementalHandle,
    path: str,
    max_parallelism: int,
    states: set[str] | None = None,
    header: FlinkKeyedHeader | None = None,
) -> Iterator[FlinkEntry]:
    """The entries of the states named in `states` (all when None) of one native RocksDB snapshot; `header`: its
    meta data stream's, when the caller read it already."""
    header = header if header is not None else native_header(handle, path)
    decoder = EntryDecoder(header, max_parallelism, path)
    wanted = [m for m in header.states if m.backend_type != "PRIORITY_QUEUE" and (states is None or m.name in states)]
    for meta in wanted:
        if meta.kind == "LIST":
            raise CheckpointFormatError(
                path,
                f"list state {meta.name!r} of a native RocksDB snapshot: Flink stores it as merge operands that "
                "rocksdict cannot merge (read a canonical savepoint of the job instead)",
            )
    with tempfile.TemporaryDirectory(prefix="statecert-flink-native-") as scratch:
        for local, stream in (*handle.shared, *handle.private):
            if stream is None:
                raise CheckpointFormatError(path, f"native file {local}: no stream")
            (Path(scratch) / local).write_bytes(stream.read())
        try:
            families = Rdict.list_cf(scratch)
            raw = {name: Options(raw_mode=True) for name in families}
            db = Rdict(scratch, options=Options(raw_mode=True), access_type=AccessType.read_only(), column_families=raw)
        except Exception as exc:  # rocksdict raises its own exception type for a database it cannot open
            raise CheckpointFormatError(path, f"RocksDB cannot open the native snapshot's files: {exc}") from None
        try:
            for meta in wanted:
                if meta.name not in families:
                    raise CheckpointFormatError(path, f"state {meta.name!r}: no column family of that name")
                for key, value in db.get_column_family(meta.name).items():
                    assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
                    key_group = decoder.key_group(key)
                    if not handle.start <= key_group <= handle.end:
                        raise CheckpointFormatError(
                            path, f"state {meta.name!r}: key group {key_group} outside {handle.start}..{handle.end}"
                        )
                    yield from decoder.entry(meta, key_group, key, value)
        finally:
            db.close()
