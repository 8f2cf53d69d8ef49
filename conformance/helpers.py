"""Small builders the conformance tests share (and statecert's own tests reuse)."""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import io
import os
import threading
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import crc32c
import fsspec

from statecert.conformance.capabilities import declared, supports
from statecert.conformance.interleaving import Interleaving
from statecert.reference.checkpointing import Subtask, take_snapshot
from statecert.reference.checkpointing import create_subtasks as _create_subtasks
from statecert.reference.format.canonical import CanonicalHeader, CanonicalReader, write_key_groups
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.spec.errors import SnapshotCancelledError, StateCertError
from statecert.spec.handles import (
    ByteStreamStateHandle,
    FileStateHandle,
    KeyedStateHandle,
    KeyGroupsStateHandle,
    OperatorStateHandle,
)
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.keygroups import KeyGroupRange, assign_to_key_group, key_group_range_for_operator
from statecert.spec.metadata import CheckpointKind, OperatorState
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import VOID_NAMESPACE, Clock, SystemClock, ValueStateDescriptor

KEYS = StringSerializer()
COUNT = ValueStateDescriptor("count", serializer=LongSerializer())

REJECTED = (StateCertError, ValueError, TypeError)
"""What "rejected" means where the spec names no error type (ERR-3)."""

STATE_NAMES = (
    *("", " ", "a", "a:b", "a/b", "../a", "state:a", "ünï", "計数", "😀", "a\nb", "n" * 1000),
    *("A", "a.", "CON", "\u00e9", "e\u0301"),
)
"""State names a backend may meet (KS-2): empty, non-ASCII, with separators a format or a path might split at, long;
and names a file system would take for others or refuse, for a backend keeping a file per state: "a" and "A" (a
case-insensitive one, as macOS's and Windows' are by default), "a." ("a" on Windows, which drops a trailing dot),
"CON" (a device on Windows), and "é" composed and decomposed (one name on a file system that normalizes Unicode)."""


def shown_name(name: str) -> str:
    """A state name as an assertion message shows it: a long one by its length, one not in Unicode's composed form
    (NFC) by its code points, so that "é" composed and decomposed read apart."""
    if len(name) >= 20:
        return f"'{name[0]}' * {len(name)}"
    return repr(name) if unicodedata.is_normalized("NFC", name) else ascii(name)


LOCAL_DIR: contextvars.ContextVar[str | None] = contextvars.ContextVar("statecert_local_dir", default=None)
"""The running test's local working directory, handed to every backend the suite creates (KB-LOCAL-1)."""


def key_group_of(key: Any, max_parallelism: int = 128, key_serializer: TypeSerializer[Any] = KEYS) -> int:
    """A key's key group by Flink's arithmetic (KG-2), computed by the suite, never asked of the backend."""
    return assign_to_key_group(key_serializer.key_hash(key), max_parallelism)


def owner_of(
    subtasks: Sequence[Subtask], key: Any, max_parallelism: int = 128, key_serializer: TypeSerializer[Any] = KEYS
) -> Any:
    """The keyed backend of the subtask whose key-group range holds `key` (KG-6, KG-7), with `key` current."""
    key_group = key_group_of(key, max_parallelism, key_serializer)
    keyed = next(s.keyed for s in subtasks if key_group in s.keyed.key_group_range)
    keyed.set_current_key(key)
    return keyed


def create_subtasks(backend: Any, key_serializer: TypeSerializer[Any], *args: Any, **kwargs: Any) -> list[Subtask]:
    """The reference glue's subtasks, working in the test's local directory."""
    kwargs.setdefault("local_dir", LOCAL_DIR.get())
    return _create_subtasks(backend, key_serializer, *args, **kwargs)


def keyed_backend(
    state_backend: Any,
    *,
    parallelism: int = 1,
    index: int = 0,
    max_parallelism: int = 128,
    restore: Sequence[KeyedStateHandle] = (),
    clock: Clock | None = None,
    key_serializer: TypeSerializer[Any] = KEYS,
    key_group_range: KeyGroupRange | None = None,
) -> Any:
    rng = key_group_range or key_group_range_for_operator(max_parallelism, parallelism, index)
    params = KeyedBackendParameters(
        "job", "op", key_serializer, max_parallelism, rng, tuple(restore), clock or SystemClock(), LOCAL_DIR.get()
    )
    return state_backend.create_keyed_state_backend(params)


def operator_backend(state_backend: Any, restore: Sequence[OperatorStateHandle] = ()) -> Any:
    """An operator state backend of job "job", operator "op", restored from `restore`."""
    return state_backend.create_operator_state_backend(OperatorBackendParameters("job", "op", tuple(restore)))


CHECKPOINT_OUTCOMES = ("completed", "unconfirmed", "aborted")
"""How a checkpoint ends for its backends, as `conclude_checkpoint` tells them."""


def notify_outcome(backend: Any, checkpoint_id: int, outcome: str) -> None:
    """What a backend hears of how checkpoint `checkpoint_id` ended (`unconfirmed`: nothing, the notification was
    lost)."""
    if outcome == "completed":
        backend.notify_checkpoint_complete(checkpoint_id)
    elif outcome == "aborted":
        backend.notify_checkpoint_aborted(checkpoint_id)


def conclude_checkpoint(keyed_backends: Sequence[Any], location: Any, checkpoint_id: int, outcome: str) -> None:
    """Tell every backend how checkpoint `checkpoint_id` ended: `completed`, `aborted` (its exclusive files are then
    deleted, as the coordinator drops an aborted checkpoint's files, CS-6), or nothing (`unconfirmed`: the
    notification was lost; CL-5, KB-SNAP-8, KB-SNAP-9)."""
    for backend in keyed_backends:
        notify_outcome(backend, checkpoint_id, outcome)
    if outcome == "aborted":
        location.dispose_on_failure()


def snapshot_now(backend: Any, location: Any, checkpoint_id: int = 1) -> Any:
    """Synchronous and asynchronous part back to back."""
    return backend.snapshot(checkpoint_id, 0, location).run()


def run_while(task: Any, writes: Callable[[], None], state_backend: Any, seed: int = 0) -> Any:
    """Run a snapshot's asynchronous part in another thread while `writes` runs in this one, the two taking turns at
    points `seed` chooses (`Interleaving`); the handle. For a backend that does not declare `async_snapshots`, the
    writes come first and `run()` after them, in this thread."""
    if not supports(declared(state_backend), "async_snapshots"):
        writes()
        return task.run()
    return Interleaving(seed).run(writes, task.run)[1]


def run_beside(task: Any, step: Callable[[int], None], at_least: int, seed: int) -> tuple[Any, int]:
    """Run a snapshot's asynchronous part in another thread while this one calls `step(0)`, `step(1)`, ... until
    `run()` has returned and at least `at_least` steps are done, the two taking turns at points `seed` chooses
    (`Interleaving`), so that the whole asynchronous part runs beside the steps; the handle and the number of steps.
    A backend whose two parts share a scratch buffer, or check and then act on shared state, fails here rather than
    only in production."""
    finished = threading.Event()

    def run() -> Any:
        try:
            return task.run()
        finally:
            finished.set()

    def steps() -> int:
        done = 0
        while done < at_least or not finished.is_set():
            step(done)
            done += 1
        return done

    done, handle = Interleaving(seed).run(steps, run)
    return handle, done


def run_beside_a_twin(
    task: Any, step: Callable[[Any, list[Any], int], None], backend: Any, twin: Any, seed: int, snapshot: str
) -> tuple[Any, str]:
    """`run_beside` with `step(backend, reads, i)` (at least 200 steps), then the same steps on `twin`, a backend
    given the same calls without snapshots; asserts that each read the task thread made beside the asynchronous part
    returned what the twin's did (KB-SNAP-2). The handle, and the call described for later messages."""
    read: list[Any] = []
    want: list[Any] = []
    handle, steps = run_beside(task, functools.partial(step, backend, read), at_least=200, seed=seed)
    for i in range(steps):
        step(twin, want, i)
    call = f"{snapshot}, its run() beside {steps} reads and writes in the task thread"
    wrong = next((i for i, (got, w) in enumerate(zip(read, want, strict=True)) if got != w), None)
    assert wrong is None, (
        f"KB-SNAP-2: {call}: read {wrong} returned {read[wrong]!r}, a backend without snapshots {want[wrong]!r}"
    )
    return handle, call


def location_for(storage: Any, checkpoint_id: int = 1, job_id: str = "job") -> Any:
    return storage.create_checkpoint_storage(job_id).initialize_location_for_checkpoint(checkpoint_id)


def savepoint(storage: Any, state_backend: Any, parallelism: int = 4, keys: int = 300) -> tuple[str, dict[str, int]]:
    """A canonical savepoint of value state `count` = i for keys k0..k<keys>; returns pointer and the state."""
    subtasks = create_subtasks(state_backend, KEYS, parallelism, 128)
    expected = {}
    for i in range(keys):
        owner_of(subtasks, f"k{i}").get_or_create_state(COUNT).update(i)
        expected[f"k{i}"] = i
    location = storage.create_checkpoint_storage("job").initialize_location_for_savepoint(1)
    pointer = take_snapshot(subtasks, location, 1, 128, kind=CheckpointKind.SAVEPOINT_CANONICAL)
    for s in subtasks:
        s.dispose()
    return pointer, expected


def counts(state_backend: Any, operator: OperatorState, parallelism: int) -> dict[str, int]:
    """Value state `count` of every key, restored at `parallelism`."""
    out = {}
    for s in create_subtasks(state_backend, KEYS, parallelism, 128, restore_from=operator):
        state = s.keyed.get_or_create_state(COUNT)
        for key in list(s.keyed.get_keys("count", VOID_NAMESPACE)):
            s.keyed.set_current_key(key)
            out[key] = state.value()
        s.dispose()
    return out


class RecordingStreamFactory:
    """A checkpoint's stream factory that keeps every handle its streams returned."""

    def __init__(self, inner: Any, returned: list[Any]) -> None:
        self._inner = inner
        self._returned = returned

    def create_checkpoint_state_output_stream(self, scope: Any) -> Any:
        stream = self._inner.create_checkpoint_state_output_stream(scope)
        close_and_get_handle, returned = stream.close_and_get_handle, self._returned

        def recorded() -> Any:
            handle = close_and_get_handle()
            returned.append(handle)
            return handle

        stream.close_and_get_handle = recorded
        return stream


class FailingStreamFactory:
    """A checkpoint's stream factory whose streams fail as a storage does (a full disk, a lost connection): an
    OSError at their first `write` (`when="write"`) or at `close_and_get_handle` (`when="close"`), after discarding
    what they wrote; only the `nth` stream created, if given. `failures` counts the errors raised."""

    def __init__(self, inner: Any, when: str, nth: int | None = None) -> None:
        self._inner = inner
        self._when = when
        self._nth = nth
        self.created = 0
        self.failures = 0

    def create_checkpoint_state_output_stream(self, scope: Any) -> Any:
        stream = self._inner.create_checkpoint_state_output_stream(scope)
        self.created += 1
        if self._nth is not None and self.created != self._nth:
            return stream

        def fail(*_: Any) -> Any:
            stream.discard()
            self.failures += 1
            raise OSError(f"injected storage failure at {self._when}")

        if self._when == "write":
            stream.write = fail
        else:
            stream.close_and_get_handle = fail
        return stream


def assert_snapshot_fails(backend: Any, location: Any, when: str, requirement: str) -> Any:
    """Take snapshot 1 of a keyed or operator `backend` into streams that fail at `when` (`FailingStreamFactory`)
    and check that its `run()` raises (the storage's OSError, or the backend's own error for it) rather than
    return a handle or None for state it could not write; the task."""
    failing = FailingStreamFactory(location, when)
    task = backend.snapshot(1, 0, failing)
    try:
        returned = task.run()
    except Exception:  # the storage's OSError, or the backend's own error for it
        return task
    raise AssertionError(
        f"{requirement}: every stream of the snapshot failed at {when} ({failing.failures} failures), but run() "
        f"returned {returned!r} instead of raising"
    )


def listed_stream_handles(handle: Any, name: str | None = None) -> list[tuple[str | None, Any]]:
    """The stream handles (files or inline bytes) a nested keyed state handle references, each with the name a
    mapping of the handle lists it under (a native handle's files by their own names), else None."""
    if isinstance(handle, FileStateHandle | ByteStreamStateHandle):
        return [(name, handle)]
    if dataclasses.is_dataclass(handle) and not isinstance(handle, type):
        return [s for f in dataclasses.fields(handle) for s in listed_stream_handles(getattr(handle, f.name))]
    if isinstance(handle, dict):
        return [s for key, value in handle.items() for s in listed_stream_handles(value, str(key))]
    if isinstance(handle, list | tuple):
        return [s for value in handle for s in listed_stream_handles(value)]
    return []


def stream_handles(handle: Any) -> list[Any]:
    """The stream handles (files or inline bytes) a nested keyed state handle references."""
    return [stream for _, stream in listed_stream_handles(handle)]


def rebuilt_handle(
    handle: Any, stream: Callable[[Any], Any] = lambda s: s, name: Callable[[str], str] = lambda n: n
) -> Any:
    """A copy of a (nested) state handle in which every stream handle (a file or inline bytes) is `stream(handle)`,
    and every mapping of names to stream handles (a native handle's files by name) names them `name(name)`."""
    if isinstance(handle, FileStateHandle | ByteStreamStateHandle):
        return stream(handle)
    if dataclasses.is_dataclass(handle) and not isinstance(handle, type):
        fields = [f.name for f in dataclasses.fields(handle) if f.init]
        return dataclasses.replace(handle, **{f: rebuilt_handle(getattr(handle, f), stream, name) for f in fields})
    if isinstance(handle, Mapping):
        return {
            name(k) if isinstance(v, FileStateHandle | ByteStreamStateHandle) else k: rebuilt_handle(v, stream, name)
            for k, v in handle.items()
        }
    if isinstance(handle, list | tuple):
        return type(handle)(rebuilt_handle(value, stream, name) for value in handle)
    return handle


def with_stream_replaced(handle: Any, old: Any, new: Any) -> Any:
    """A copy of a (nested) state handle in which the stream handle `old` is `new`, wherever it occurs."""
    return rebuilt_handle(handle, stream=lambda s: new if type(s) is type(old) and s == old else s)


def raised_from(exc: BaseException, *kinds: type[BaseException]) -> bool:
    """Whether `exc`, or an exception it was raised from or while handling (its cause or context, transitively), is
    one of `kinds`: a test accepts a documented error as it is or wrapped in an error of the backend's own."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kinds):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def files_of(handle: Any) -> set[str]:
    """Every file a (nested) state handle references."""
    return {stream.path for stream in stream_handles(handle) if isinstance(stream, FileStateHandle)}


def unreferenced_files(root: Path, handle: Any) -> list[str]:
    """The files under the local directory `root` that `handle` (None: no handle) does not reference, relative."""
    referenced = {os.path.realpath(fsspec.core.strip_protocol(path)) for path in files_of(handle)}
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and os.path.realpath(p) not in referenced
    )


def rewritten_canonical_stream(
    handle: KeyGroupsStateHandle,
    path: Path,
    change: Callable[[CanonicalHeader, dict[int, list[list[Any]]]], CanonicalHeader],
) -> KeyGroupsStateHandle:
    """The canonical stream of `handle` written again to `path` as `change(header, blocks)` says (it returns the
    header to write and may change the IF-4 entries of the blocks in place), with its size and checksum recorded
    anew, so that only what the stream holds can give a damage away."""
    with CanonicalReader(handle) as reader:
        blocks = {kg: [list(e) for e in reader.key_group(kg)] for kg in handle.key_group_range}
        header = change(reader.header, blocks)
    out = io.BytesIO()
    offsets = write_key_groups(out, header, handle.key_group_range, lambda kg: blocks[kg])  # type: ignore[arg-type]
    path.write_bytes(out.getvalue())
    stream = FileStateHandle(path.as_uri(), len(out.getvalue()), crc32c.crc32c(out.getvalue()))
    return KeyGroupsStateHandle(handle.key_group_range, offsets, stream)


def first_canonical_entry(header: CanonicalHeader, blocks: dict[int, list[list[Any]]], state: str) -> list[Any]:
    """The first IF-4 entry of `state` in the lowest key group holding one, for a damage to change in place."""
    index = [meta.name for meta in header.states].index(state)
    return next(entry for kg in sorted(blocks) for entry in blocks[kg] if entry[0] == index)


class DelegatingStream:
    """A checkpoint output stream (chapter CS) that passes every call to `inner`: a base for streams that change
    one call, whether a test's probe or a broken backend's bug."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> DelegatingStream:
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._inner.__exit__(*exc)


class WrappingStreamFactory:
    """A checkpoint stream factory whose streams are `inner`'s, each passed through `wrap`."""

    def __init__(self, inner: Any, wrap: Callable[[Any], Any]) -> None:
        self._inner = inner
        self._wrap = wrap

    def create_checkpoint_state_output_stream(self, scope: Any) -> Any:
        return self._wrap(self._inner.create_checkpoint_state_output_stream(scope))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _StreamGate:
    """Holds a snapshot's asynchronous part at its `nth` stream call `at` ("write", or "close": once that stream's
    `close_and_get_handle()` has returned its handle) made from a thread other than the gate's, until `go` is set."""

    def __init__(self, at: str, nth: int = 1) -> None:
        self.owner = threading.current_thread()
        self.at = at
        self.nth = nth
        self.calls = 0
        self.reached = threading.Event()
        self.go = threading.Event()
        self._lock = threading.Lock()  # a backend may write its streams from several threads

    def hold(self, call: str) -> None:
        if call != self.at or threading.current_thread() is self.owner:
            return
        with self._lock:
            if self.reached.is_set():
                return
            self.calls += 1
            if self.calls != self.nth:
                return
            self.reached.set()
        self.go.wait(30)


class _HeldStream(DelegatingStream):
    """A stream whose writes and closes pass the gate."""

    def __init__(self, inner: Any, gate: _StreamGate) -> None:
        super().__init__(inner)
        self._gate = gate

    def write(self, data: bytes) -> Any:
        self._gate.hold("write")
        return self._inner.write(data)

    def close_and_get_handle(self) -> Any:
        handle = self._inner.close_and_get_handle()
        self._gate.hold("close")
        return handle


@dataclasses.dataclass(frozen=True)
class EndedSnapshot:
    """What `end_a_snapshot_at` saw: whether the asynchronous part reached the gate, what `run()` returned or
    raised, and what the ending call returned."""

    reached: bool
    outcome: Any
    ended: Any


def end_a_snapshot_at(
    backend: Any,
    location: Any,
    end: str,
    at: str = "write",
    nth: int = 1,
    checkpoint_id: int = 1,
    options: Any = None,
) -> EndedSnapshot:
    """Take snapshot `checkpoint_id` of a keyed or operator `backend` at `location` (with `options`, if any), run
    it in another thread, and end it at its `nth` stream call `at` (see `_StreamGate`) by the backend's `close()`
    (`end="close"`) or the task's own `cancel()` (`end="cancel"`). A part making fewer such calls runs to its end,
    not ended (`reached` False)."""
    gate = _StreamGate(at, nth)
    factory = WrappingStreamFactory(location, lambda stream: _HeldStream(stream, gate))
    extra = () if options is None else (options,)
    task = backend.snapshot(checkpoint_id, 0, factory, *extra)
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(task.run())
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)  # a hung part must not keep the run from ending
    worker.start()
    deadline = time.monotonic() + 30
    while not gate.reached.wait(0.005) and worker.is_alive() and time.monotonic() < deadline:
        pass
    reached = gate.reached.is_set()
    ended = (backend.close() if end == "close" else task.cancel()) if reached else None
    gate.go.set()
    worker.join(60)
    return EndedSnapshot(reached, outcome[0] if outcome else "no result", ended)


def end_a_snapshot_while_it_writes(
    backend: Any, location: Any, end: str, requirement: str, what: str = "the asynchronous part", at: str = "write"
) -> Any:
    """Take snapshot 1 of a keyed or operator `backend` at `location`, run it in another thread, and end it once it
    writes (`at="write"`) or once its first stream returned its handle (`at="close"`): by the backend's `close()`
    (`end="close"`) or the task's own `cancel()` (`end="cancel"`). Asserts that it got there, that `run()` raised
    SnapshotCancelledError and that a `cancel()` returned True (KB-SNAP-6), citing `requirement`; returns the call
    as the assertions name it."""
    seen = end_a_snapshot_at(backend, location, end, at)
    call = f"{end}() during {what}" if at == "write" else f"{end}() once {what} closed its stream"
    assert seen.reached, f"KB-SNAP-2: {what} never {'wrote to' if at == 'write' else 'closed'} its stream"
    assert isinstance(seen.outcome, SnapshotCancelledError), (
        f"{requirement}: {call}: expected run() to raise SnapshotCancelledError, got {seen.outcome!r}"
    )
    if end == "cancel":
        assert seen.ended is True, f"KB-SNAP-6: {call}: expected cancel() to return True, got {seen.ended!r}"
    return call
