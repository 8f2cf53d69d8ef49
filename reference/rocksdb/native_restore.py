"""Reading a RocksDB native handle (RDB-3, RDB-7): its state meta data, its files downloaded (each verified against
its recorded size and checksum) and opened, and a full verification scan for `inspect --verify` (FMT-14)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import msgpack
import rocksdict

from statecert.reference.format.canonical import describe
from statecert.reference.format.entry_check import EntryValidator, restorable
from statecert.reference.format.handle_codec import field
from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.rocksdb.column_family_store import iterate_entries
from statecert.reference.rocksdb.files import download_files
from statecert.reference.rocksdb.log_files import check_log_files
from statecert.spec.errors import CheckpointCorruptedError, CheckpointFormatError
from statecert.spec.handles import IncrementalKeyedStateHandle, StreamStateHandle
from statecert.spec.serializers import SerializerSnapshot

MAX_META_BYTES = 1 << 26
SST_SUFFIX = ".sst"


def column_family_name(state_name: str) -> str:
    return f"state:{state_name}"


def open_database(path: Path, options: rocksdict.Options) -> rocksdict.Rdict:
    """Open a RocksDB directory with every column family it holds (RocksDB refuses to open a subset)."""
    names = [n for n in rocksdict.Rdict.list_cf(str(path), options) if n != "default"]
    return rocksdict.Rdict(str(path), options, column_families={n: options for n in names})


def open_read_only(path: Path, options: rocksdict.Options, column_families: Sequence[str]) -> rocksdict.Rdict:
    """Open a RocksDB directory read-only with the column families named (a read-only open may name a subset): no
    OPTIONS file, MANIFEST or log is written, less than half the time of an open for writing."""
    families = dict.fromkeys(column_families, options)
    return rocksdict.Rdict(str(path), options, column_families=families, access_type=rocksdict.AccessType.read_only())


def read_native_meta(handle: IncrementalKeyedStateHandle) -> tuple[SerializerSnapshot, list[StateMetaInfo]]:
    """The key serializer and the states of a native handle, validated (FMT-8)."""
    name = describe(handle.meta_state)
    with handle.meta_state.open() as f:
        raw = f.read(MAX_META_BYTES + 1)
    if len(raw) > MAX_META_BYTES:
        raise CheckpointFormatError(name, f"RocksDB state meta data larger than {MAX_META_BYTES} bytes")
    try:
        plain = msgpack.unpackb(raw, raw=False, strict_map_key=True)
        key_serializer = SerializerSnapshot.from_plain(field(plain, "key_serializer", dict))
        metas = [StateMetaInfo.from_plain(m) for m in field(plain, "states", list)]
    except (ValueError, TypeError, AttributeError, RecursionError, msgpack.UnpackException) as exc:
        raise CheckpointFormatError(name, f"malformed RocksDB state meta data: {exc!r}") from None
    if len({m.name for m in metas}) != len(metas):
        raise CheckpointFormatError(name, "malformed RocksDB state meta data: a state is described twice")
    return key_serializer, metas


def open_native_files(
    handle: IncrementalKeyedStateHandle,
    target: Path,
    options: rocksdict.Options,
    read_only: Sequence[str] | None = None,
) -> rocksdict.Rdict:
    """Download a native handle's files into `target`, check the ones RocksDB reads as logs, and open them (for
    reading only, with the column families named, when `read_only` names them: files only read, then deleted);
    RocksDB's own complaints (a bare Exception from rocksdict) become CheckpointCorruptedError (RDB-7)."""
    name = describe(handle.meta_state)
    files = {**handle.shared_state, **handle.private_state}
    try:
        download_files(files, target)
    except ValueError as exc:
        raise CheckpointFormatError(name, str(exc)) from None
    try:
        check_log_files(target, files.keys())  # RocksDB's log reader can loop forever on a damaged record
    except ValueError as exc:
        raise CheckpointCorruptedError(name, f"the RocksDB files of this handle are damaged: {exc}") from None
    try:
        # A RocksDB checkpoint holds exactly its live SST files. RocksDB treats a MANIFEST cut short as a crash and
        # opens an older version without some of them: a smaller state. Check on a read-only open (no compaction
        # can change the live files meanwhile), then open for use.
        live = live_sst_files(target, options)
        shipped = {n for n in (*handle.shared_state, *handle.private_state) if n.endswith(SST_SUFFIX)}
        if live != shipped:
            raise CheckpointCorruptedError(
                name,
                f"the RocksDB files do not describe the handle's SST files (not live: {sorted(shipped - live)[:3]}, "
                f"unknown: {sorted(live - shipped)[:3]})",
            )
        if read_only is not None:  # a family the files lack is the caller's to report, as a missing state
            held = set(rocksdict.Rdict.list_cf(str(target), options))
            return open_read_only(target, options, [f for f in read_only if f in held])
        return open_database(target, options)
    except CheckpointCorruptedError:
        raise
    except Exception as exc:  # rocksdict raises bare Exception("Corruption: ...") and the like
        said = " ".join(str(exc).split())  # RocksDB's messages may run over several lines
        named = _checkpoint_file_named(said, files)
        problem = f"the RocksDB files of this handle do not open: {said}"
        raise CheckpointCorruptedError(named or name, problem + (f" (handle {name})" if named else "")) from None


def _checkpoint_file_named(message: str, files: dict[str, StreamStateHandle]) -> str | None:
    """The checkpoint's own name for the file a RocksDB message names first by its downloaded copy, if it names one:
    the error then names the file in the checkpoint, not a working copy the restore has deleted (FMT-8)."""
    named = [(message.find(f"/{listed}"), listed) for listed in files if f"/{listed}" in message]
    return describe(files[min(named)[1]]) if named else None


def live_sst_files(path: Path, options: rocksdict.Options) -> set[str]:
    """The SST files the MANIFEST of the RocksDB directory at `path` lists, from a read-only open."""
    names = [n for n in rocksdict.Rdict.list_cf(str(path), options) if n != "default"]
    db = open_read_only(path, options, names)
    try:
        return {str(f["name"]).lstrip("/") for f in db.live_files()}
    finally:
        db.close()
        del db


def verify_native_handle(handle: IncrementalKeyedStateHandle, max_parallelism: int) -> None:
    """Download, open and scan every entry of a native handle, validated like a restore would (FMT-14)."""
    name = describe(handle.meta_state)
    key_serializer, metas = read_native_meta(handle)
    scratch = Path(tempfile.mkdtemp(prefix="statecert-verify-"))
    options = rocksdict.Options(raw_mode=True)
    try:
        db = open_native_files(handle, scratch / "db", options)
        try:
            families = set(rocksdict.Rdict.list_cf(str(scratch / "db"), options)) - {"default"}
            if not {column_family_name(m.name) for m in metas} <= families:
                raise CheckpointFormatError(name, "the state meta data names a state the RocksDB files do not hold")
            validator = EntryValidator(metas, restorable(key_serializer), max_parallelism, name)
            for index, meta in enumerate(metas):
                column_family = db.get_column_family(column_family_name(meta.name))
                for key_group, key, ns, payload in iterate_entries(column_family, meta.kind, where=name):
                    if key_group not in handle.key_group_range:
                        raise CheckpointFormatError(
                            name,
                            f"state {meta.name!r} holds key group {key_group}, outside the handle's "
                            f"{handle.key_group_range}",
                        )
                    validator.check(key_group, index, key, ns, payload)
                del column_family
        finally:
            db.close()
            del db
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
