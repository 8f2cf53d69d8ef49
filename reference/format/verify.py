"""Reading everything a checkpoint references, to report every problem before anyone restores it (FMT-14): each
file exists, is a regular file inside the checkpoint, has the recorded size and checksum, and every canonical,
operator and native stream parses and decodes. `statecert inspect --verify` prints the result."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import fsspec

from statecert.reference.changelog.replay import applied_changes
from statecert.reference.format.canonical import CanonicalReader, describe
from statecert.reference.format.entry_check import EntryValidator, restorable
from statecert.reference.format.operator_stream import read_operator_states
from statecert.reference.operator_state import check_elements
from statecert.reference.rocksdb.native_restore import verify_native_handle
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.spec.errors import CheckpointCorruptedError, CheckpointFormatError, StateCertError
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


def _read_canonical(handle: KeyGroupsStateHandle, max_parallelism: int) -> None:
    with CanonicalReader(handle) as reader:
        validator = EntryValidator(
            reader.header.states, restorable(reader.header.key_serializer), max_parallelism, reader.name
        )
        for key_group, entries in reader.entries(handle.key_group_range):
            for index, key, ns, payload in entries:
                validator.check(key_group, index, key, ns, payload)


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


def _read_segment(keyed: ChangelogStateBackendHandle, segment: ChangelogSegmentHandle, max_parallelism: int) -> None:
    """Every change a restore of the handle's key groups would apply, checked as replay checks it (CL-4, FMT-15)."""
    applied_changes(keyed, segment, max_parallelism, keyed.key_group_range)


def _keyed_checks(keyed: KeyedStateHandle, max_parallelism: int) -> Iterator[tuple[str, Callable[[], None]]]:
    if isinstance(keyed, ChangelogStateBackendHandle):
        for part in keyed.materialized:
            yield from _keyed_checks(part, max_parallelism)
        for segment in keyed.changelog:
            yield describe(segment.delegate), partial(_read_segment, keyed, segment, max_parallelism)
    elif isinstance(keyed, IncrementalKeyedStateHandle) and keyed.snapshot_format == ROCKSDB_NATIVE_FORMAT:
        yield describe(keyed.meta_state), partial(verify_native_handle, keyed, max_parallelism)
    elif isinstance(keyed, IncrementalKeyedStateHandle):
        for stream in (*keyed.shared_state.values(), *keyed.private_state.values(), keyed.meta_state):
            yield describe(stream), partial(_open_and_close, stream)
    elif keyed.snapshot_format == CANONICAL_FORMAT:
        yield describe(keyed.delegate), partial(_read_canonical, keyed, max_parallelism)
    else:
        yield describe(keyed.delegate), partial(_open_and_close, keyed.delegate)


def _checks(metadata: CheckpointMetadata) -> Iterator[tuple[str, Callable[[], None]]]:
    """(what, check) for every state stream of the checkpoint, each check raising StateCertError on a problem."""
    for op in metadata.operators:
        for subtask in op.subtask_states.values():
            for keyed in subtask.managed_keyed_state:
                yield from _keyed_checks(keyed, op.max_parallelism)
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
