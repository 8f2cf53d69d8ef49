"""Reading everything a checkpoint references, to report every problem before anyone restores it (FMT-14): each
file exists, is a regular file inside the checkpoint, has the recorded size and checksum, and every canonical,
operator and native stream parses and decodes. `statecert inspect --verify` prints the result."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

import fsspec

from statecert.reference.changelog.replay import applied_changes, takes_over
from statecert.reference.format.canonical import CanonicalReader, describe
from statecert.reference.format.entry_check import EntryValidator, restorable
from statecert.reference.format.operator_stream import read_operator_states
from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.migration import check_key_serializer, check_registered_serializers
from statecert.reference.operator_state import check_elements
from statecert.reference.rocksdb.native_restore import read_native_meta, verify_native_handle
from statecert.reference.serializers import restore_serializer
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.spec.errors import (
    CheckpointCorruptedError,
    CheckpointFormatError,
    StateCertError,
    StateMigrationError,
)
from statecert.spec.handles import (
    CANONICAL_FORMAT,
    ROCKSDB_NATIVE_FORMAT,
    ByteStreamStateHandle,
    ChangelogSegmentHandle,
    ChangelogStateBackendHandle,
    FileStateHandle,
    IncrementalKeyedStateHandle,
    KeyedStateHandle,
    KeyGroupsStateHandle,
    OperatorStateHandle,
    StreamStateHandle,
)
from statecert.spec.metadata import CheckpointMetadata
from statecert.spec.serializers import SerializerSnapshot


@dataclass(frozen=True)
class VerificationReport:
    """What `verify_checkpoint` read: the number of state streams checked and every problem found."""

    pointer: str
    streams_checked: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def _open_and_close(handle: StreamStateHandle) -> None:
    """FileStateHandle.open() checks existence, type, size and checksum; inline bytes are covered by `_metadata`."""
    if not isinstance(handle, ByteStreamStateHandle):
        handle.open().close()


def _read_canonical(
    handle: KeyGroupsStateHandle, max_parallelism: int, described: dict[str, StateMetaInfo] | None = None
) -> None:
    """Every entry of a canonical stream, checked as a restore checks it (FMT-15); `described` collects the states
    of the operator's streams read before: one described differently by two of them is refused, as a restore of
    both into one backend refuses it (any restore at a lower parallelism)."""
    with CanonicalReader(handle) as reader:
        _restorable_states(reader.header.key_serializer, reader.header.states, described, reader.name)
        validator = EntryValidator(
            reader.header.states, restorable(reader.header.key_serializer), max_parallelism, reader.name
        )
        for key_group, entries in reader.entries(handle.key_group_range):
            for index, key, ns, payload in entries:
                validator.check(key_group, index, key, ns, payload)


def _restorable_states(
    key_serializer: SerializerSnapshot,
    states: Sequence[StateMetaInfo],
    described: dict[str, StateMetaInfo] | None,
    source: str,
) -> None:
    """The states of one keyed stream or native handle, refused as a restore of every key group refuses them: a
    state described differently by another handle of the operator (restored into one backend, at any lower
    parallelism), a key serializer to migrate, a serializer id nothing registers."""
    for meta in states:
        if described is not None and described.setdefault(meta.name, meta) != meta:
            raise StateMigrationError(f"{source}: state {meta.name!r} is described differently by two handles")
    _key_serializer_usable(key_serializer, source)
    for meta in states:
        check_registered_serializers(meta, source)  # what a restore checks of every restored state


def _read_native(
    handle: IncrementalKeyedStateHandle, max_parallelism: int, described: dict[str, StateMetaInfo] | None
) -> None:
    """A native RocksDB handle: its states checked as a canonical stream's header is, then every entry (FMT-14)."""
    key_serializer, metas = read_native_meta(handle)
    _restorable_states(key_serializer, metas, described, describe(handle.meta_state))
    verify_native_handle(handle, max_parallelism)


def _key_serializer_usable(snapshot: SerializerSnapshot, source: str) -> None:
    """A restore refuses keys whose serializer it would have to migrate (SER-6), whichever job restores them: the
    registered serializer of the snapshot's id must take the keys over as they are or reconfigured."""
    try:  # an id no registered serializer has (SER-4): a serializer of a package not installed here is reported too
        serializer = restore_serializer(snapshot)
    except StateCertError as exc:
        raise CheckpointFormatError(source, f"the key serializer: {exc}") from None
    try:
        check_key_serializer(serializer, snapshot)
    except StateCertError as exc:
        raise CheckpointFormatError(source, str(exc)) from None


def _read_operator(handle: OperatorStateHandle) -> None:
    for name, (mode, serializer, elements) in read_operator_states(handle).items():
        check_elements(name, mode, serializer, elements, describe(handle.delegate))


def _stat(handle: FileStateHandle) -> None:
    """Existence, type and size only: what `inspect` checks without reading content."""
    fs, path = fsspec.core.url_to_fs(handle.path)
    try:
        info = fs.info(path)
    except (OSError, ValueError) as exc:
        raise CheckpointFormatError(handle.path, f"state file missing or unreadable: {exc}") from None
    if info.get("islink") or info.get("type") != "file":
        raise CheckpointFormatError(handle.path, "not a regular file")
    if info.get("size") != handle.size:
        raise CheckpointCorruptedError(
            handle.path, f"size {info.get('size')} bytes, the checkpoint recorded {handle.size}"
        )


def _keyed_streams(keyed: KeyedStateHandle) -> list[StreamStateHandle]:
    if isinstance(keyed, IncrementalKeyedStateHandle):
        return [*keyed.shared_state.values(), *keyed.private_state.values(), keyed.meta_state]
    if isinstance(keyed, ChangelogStateBackendHandle):
        streams: list[StreamStateHandle] = [segment.delegate for segment in keyed.changelog]
        for part in keyed.materialized:
            streams += _keyed_streams(part)
        return streams
    return [keyed.delegate]


def _files(metadata: CheckpointMetadata) -> Iterator[FileStateHandle]:
    for op in metadata.operators:
        for subtask in op.subtask_states.values():
            for keyed in subtask.managed_keyed_state:
                yield from (s for s in _keyed_streams(keyed) if isinstance(s, FileStateHandle))
            yield from (h.delegate for h in subtask.managed_operator_state if isinstance(h.delegate, FileStateHandle))


def _read_segment(
    keyed: ChangelogStateBackendHandle,
    segment: ChangelogSegmentHandle,
    max_parallelism: int,
    described: dict[str, StateMetaInfo] | None,
) -> None:
    """Every change a restore of the handle's key groups would apply, checked as replay checks it (CL-4, FMT-15),
    and each state the segment describes, registered over its materialized description as replay registers it."""
    states, _ = applied_changes(keyed, segment, max_parallelism, keyed.key_group_range)
    for name, logged in states.items():
        materialized = (described or {}).get(name)
        problem = None if materialized is None else takes_over(materialized, logged.meta)
        if problem is not None:
            raise StateMigrationError(f"{describe(segment.delegate)}: {problem}")


def _keyed_checks(
    keyed: KeyedStateHandle, max_parallelism: int, described: dict[str, StateMetaInfo] | None = None
) -> Iterator[tuple[str, Callable[[], None]]]:
    if isinstance(keyed, ChangelogStateBackendHandle):
        for part in keyed.materialized:
            yield from _keyed_checks(part, max_parallelism, described)
        for segment in keyed.changelog:
            yield describe(segment.delegate), partial(_read_segment, keyed, segment, max_parallelism, described)
    elif isinstance(keyed, IncrementalKeyedStateHandle) and keyed.snapshot_format == ROCKSDB_NATIVE_FORMAT:
        yield describe(keyed.meta_state), partial(_read_native, keyed, max_parallelism, described)
    elif isinstance(keyed, IncrementalKeyedStateHandle):
        for stream in (*keyed.shared_state.values(), *keyed.private_state.values(), keyed.meta_state):
            yield describe(stream), partial(_open_and_close, stream)
    elif keyed.snapshot_format == CANONICAL_FORMAT:
        yield describe(keyed.delegate), partial(_read_canonical, keyed, max_parallelism, described)
    elif isinstance(keyed, KeyGroupsStateHandle) and not _other_backends_format(keyed.snapshot_format):
        yield describe(keyed.delegate), partial(_unreadable_format, keyed)
    else:
        yield describe(keyed.delegate), partial(_open_and_close, keyed.delegate)


def _other_backends_format(snapshot_format: str) -> bool:
    """A native format of a backend other than the reference's (`native:<name>`, KB-RESTORE-5): only that backend
    reads it, so `inspect --verify` checks its file and not its content."""
    return snapshot_format.startswith("native:") and snapshot_format != ROCKSDB_NATIVE_FORMAT


def _unreadable_format(handle: KeyGroupsStateHandle) -> None:
    """A key-groups handle in a format no backend restores from such a handle: not canonical, not another backend's
    own, or a format the spec gives another kind of handle (RocksDB's native files, a changelog); every backend
    refuses it (KB-RESTORE-5), so `inspect --verify` does."""
    raise CheckpointFormatError(
        describe(handle.delegate),
        f"a key-groups state handle in format {handle.snapshot_format!r}, which no reader has",
    )


def _checks(metadata: CheckpointMetadata) -> Iterator[tuple[str, Callable[[], None]]]:
    """(what, check) for every state stream of the checkpoint, each check raising StateCertError on a problem."""
    for op in metadata.operators:
        described: dict[str, StateMetaInfo] = {}  # the states of the operator's canonical streams, by name
        for subtask in op.subtask_states.values():
            for keyed in subtask.managed_keyed_state:
                yield from _keyed_checks(keyed, op.max_parallelism, described)
            for handle in subtask.managed_operator_state:
                yield describe(handle.delegate), partial(_read_operator, handle)


def verify_checkpoint(
    pointer: str, progress: Callable[[int, int], None] = lambda done, total: None, read_content: bool = True
) -> VerificationReport:
    """Read every file of the checkpoint or savepoint at `pointer` (with `read_content` False: only check that each
    exists as a regular file of the recorded size); problems are reported, not raised. A `_metadata` that does not
    load is the one problem reported."""
    try:
        metadata = load_checkpoint_metadata(pointer)
    except StateCertError as exc:
        return VerificationReport(pointer, 0, (str(exc),))
    shallow: list[tuple[str, Callable[[], None]]] = [(f.path, partial(_stat, f)) for f in _files(metadata)]
    checks = list(_checks(metadata)) if read_content else shallow
    problems = []
    for done, (what, check) in enumerate(checks, 1):
        try:
            check()
        except StateCertError as exc:
            problems.append(str(exc) if what in str(exc) else f"{what}: {exc}")
        progress(done, len(checks))
    return VerificationReport(pointer, len(checks), tuple(problems))
