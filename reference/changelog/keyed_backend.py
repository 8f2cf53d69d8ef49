"""`ChangelogKeyedStateBackend`: any keyed backend with every state change also appended to a log (chapter CL).

A checkpoint uploads only the log's tail and references the latest materialization (a snapshot of the wrapped
backend written into the shared scope); a materialization is started when the materialization interval has
passed, written in the asynchronous part of that checkpoint and used from the next checkpoint on; once a
checkpoint holding a materialization completes, the log before it is truncated (CL-2, CL-5). Savepoints are the
wrapped backend's own (CL-7)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from statecert.reference.changelog.logging_states import LOGGING_STATES, LoggingState
from statecert.reference.changelog.records import LoggedState, Op
from statecert.reference.changelog.replay import ChangeReader, restore_keyed_backend
from statecert.reference.changelog.shared_scope import SharedScopeStreamFactory
from statecert.reference.changelog.writer import StateChangelogWriter
from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.keyed_backend_base import descriptor_serializers
from statecert.reference.serializers import VOID_NAMESPACE_SERIALIZER
from statecert.reference.snapshot_task import AsyncSnapshotTask
from statecert.reference.storage.written_streams import discard_stream_handles
from statecert.reference.timers.timer_service import KeyedTimerService
from statecert.spec.errors import BackendClosedError, StateMigrationError
from statecert.spec.handles import ChangelogStateBackendHandle, KeyedStateHandle
from statecert.spec.keyed_backend import (
    DEFAULT_CHECKPOINT_OPTIONS,
    CheckpointOptions,
    KeyedBackendParameters,
    SnapshotType,
)
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import StateDescriptor
from statecert.spec.storage import CheckpointStreamFactory
from statecert.spec.timers import Triggerable


@dataclass(frozen=True)
class Materialization:
    """A completed snapshot of the wrapped backend: what checkpoints reference until the next one."""

    materialization_id: int
    sequence: int
    handles: tuple[Any, ...]


@dataclass(frozen=True)
class ChangelogSettings:
    """Flink's defaults: materialize every 10 minutes, tolerate 3 materialization failures in a row; `storage`
    `filesystem` uploads segments as files, `memory` keeps them inline in `_metadata` (tests, small state)."""

    materialize_interval_ms: int = 600_000
    max_failures_allowed: int = 3
    storage: str = "filesystem"


class ChangelogKeyedStateBackend:
    backend_name = "changelog"
    change_reader: ChangeReader | None = None
    """How restore reads the log (None: `read_changes`); replaceable for fault-injection tests."""

    def __init__(self, delegate_factory: Any, params: KeyedBackendParameters[Any], settings: ChangelogSettings) -> None:
        self._params = params
        self._settings = settings
        self._clock = params.ttl_clock
        self._delegate = restore_keyed_backend(delegate_factory, params, params.restore_state, self.change_reader)
        self._writer = StateChangelogWriter(
            params.key_serializer.snapshot_configuration(), inline=settings.storage == "memory"
        )
        self._states: dict[str, LoggingState] = {}
        self._ttl_states: set[str] = set()
        self._timer_services: dict[str, KeyedTimerService] = {}
        self._lock = threading.Lock()
        self._base: Materialization | None = None  # None: the next checkpoint materializes first (CL-6)
        self._materializing = False
        self._next_materialization = 0
        self._last_materialization_ms = self._clock.now_ms()
        self.failed_materializations = 0
        self._checkpoint_bases: dict[int, Materialization] = {}
        self._confirmed = -1
        self._pending: set[AsyncSnapshotTask[KeyedStateHandle]] = set()
        self._closed = False

    # -- delegation ------------------------------------------------------------------------------------------------
    @property
    def delegate(self) -> Any:
        """The wrapped keyed backend."""
        return self._delegate

    @property
    def key_group_range(self) -> KeyGroupRange:
        return self._delegate.key_group_range  # type: ignore[no-any-return]

    @property
    def number_of_key_groups(self) -> int:
        return self._delegate.number_of_key_groups  # type: ignore[no-any-return]

    @property
    def key_serializer(self) -> TypeSerializer[Any]:
        return self._delegate.key_serializer  # type: ignore[no-any-return]

    def set_current_key(self, key: Any) -> None:
        self.check_open()
        self._delegate.set_current_key(key)

    def get_current_key(self) -> Any:
        return self._delegate.get_current_key()

    @property
    def current_key_group(self) -> int:
        return self._delegate.current_key_group  # type: ignore[no-any-return]

    def get_keys(self, state_name: str, namespace: Any) -> Iterator[Any]:
        self.check_open()
        return self._delegate.get_keys(state_name, namespace)  # type: ignore[no-any-return]

    def get_keys_and_namespaces(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        self.check_open()
        return self._delegate.get_keys_and_namespaces(state_name)  # type: ignore[no-any-return]

    def num_state_entries(self, state_name: str | None = None) -> int:
        return self._delegate.num_state_entries(state_name)  # type: ignore[no-any-return]

    # -- states ----------------------------------------------------------------------------------------------------
    def get_or_create_state(
        self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer[Any] | None = None
    ) -> Any:
        self.check_open()
        delegate_state = self._delegate.get_or_create_state(descriptor, namespace_serializer)
        existing = self._states.get(descriptor.name)
        if existing is not None and existing.delegate is delegate_state:
            return existing
        namespaces = namespace_serializer or VOID_NAMESPACE_SERIALIZER
        serializers = descriptor_serializers(descriptor)
        meta = StateMetaInfo(
            descriptor.name,
            descriptor.kind,
            namespaces.snapshot_configuration(),
            {role: s.snapshot_configuration() for role, s in serializers.items()},
            descriptor.ttl is not None,
        )
        self._writer.describe(LoggedState(meta, descriptor.ttl))
        if descriptor.ttl is not None:
            self._ttl_states.add(descriptor.name)
        state = LOGGING_STATES[descriptor.kind](
            self, delegate_state, descriptor.name, namespaces, serializers, descriptor.ttl
        )
        self._states[descriptor.name] = state
        return state

    def get_partitioned_state(
        self, namespace: Any, descriptor: StateDescriptor, namespace_serializer: TypeSerializer[Any] | None = None
    ) -> Any:
        state = self.get_or_create_state(descriptor, namespace_serializer)
        state.set_current_namespace(namespace)
        return state

    def current_key_and_group(self) -> tuple[bytes, int]:
        """The current key, serialized, and its key group: what a change made now is logged under."""
        return self._delegate.key_serializer.serialize(self._delegate.get_current_key()), self.current_key_group

    def log_change(
        self, state: str, op: Op, namespace: bytes, payload: Any, at: tuple[bytes, int] | None = None
    ) -> None:
        """Append one change (CL-3) of the current key, or of the key and key group `at` (a map iteration's reads
        belong to the key it iterates, KS-MAP-2); the time is recorded for TTL'd states only (replay needs it
        there, CL-4), 0 elsewhere."""
        key, key_group = at if at is not None else self.current_key_and_group()
        self._writer.append(
            key_group,
            state,
            op,
            key,
            namespace,
            self._clock.now_ms() if state in self._ttl_states else 0,
            payload,
        )

    # -- timers ----------------------------------------------------------------------------------------------------
    def get_timer_service(
        self, name: str, namespace_serializer: TypeSerializer[Any], triggerable: Triggerable[Any, Any]
    ) -> KeyedTimerService:
        """Timers kept as logged keyed state of this backend, so they are logged and replayed too (TM, CL-1)."""
        self.check_open()
        service = self._timer_services.get(name)
        if service is None:
            service = self._timer_services[name] = KeyedTimerService(self, name, namespace_serializer, triggerable)
        elif service.namespace_serializer != namespace_serializer:
            raise StateMigrationError(f"timer service {name!r} was created with another namespace serializer")
        service.triggerable = triggerable
        return service

    # -- snapshots -------------------------------------------------------------------------------------------------
    @property
    def changelog_bytes_uploaded(self) -> int:
        return self._writer.bytes_uploaded

    def snapshot(
        self,
        checkpoint_id: int,
        timestamp_ms: int,
        stream_factory: CheckpointStreamFactory,
        options: CheckpointOptions = DEFAULT_CHECKPOINT_OPTIONS,
    ) -> Any:
        self.check_open()
        if options.snapshot_type is not SnapshotType.CHECKPOINT:
            return self._delegate.snapshot(checkpoint_id, timestamp_ms, stream_factory, options)  # CL-7
        pending = self._writer.capture()
        base = self._base
        materialization = None
        now = self._clock.now_ms()
        due = now - self._last_materialization_ms >= self._settings.materialize_interval_ms
        # A new materialization waits until the current one is confirmed (a checkpoint holding it completed): an
        # incremental wrapped backend diffs against its last confirmed snapshot, whose files must still be
        # referenced by retained checkpoints when the new one is used (CL-5, KB-SNAP-9).
        confirmed = base is not None and base.materialization_id <= self._confirmed
        if options.full:  # a full checkpoint references nothing earlier: a materialization of its own (KB-SNAP-10)
            base = None
        if base is None or (due and not self._materializing and confirmed):
            self._next_materialization += 1
            materialization_id = self._next_materialization
            materialization = (
                materialization_id,
                pending.up_to,
                self._delegate.snapshot(
                    materialization_id, timestamp_ms, SharedScopeStreamFactory(stream_factory), options
                ),
            )
            self._materializing = True
            self._last_materialization_ms = now
        key_group_range = self.key_group_range

        def write(cancelled: Callable[[], bool]) -> KeyedStateHandle | None:
            used = base
            if used is not None:
                self._writer.upload(pending, stream_factory, checkpoint_id)
            if materialization is not None:
                done = self._materialize(materialization, required=used is None)
                if used is None and done is not None:
                    used = done
                    self._writer.skip_to(done.sequence)
            assert used is not None
            with self._lock:
                self._checkpoint_bases[checkpoint_id] = used
            segments = self._writer.segments_after(used.sequence)
            if not used.handles and not segments:
                return None  # nothing was ever written (KB-SNAP-7)
            return ChangelogStateBackendHandle(
                key_group_range, used.materialization_id, used.sequence, used.handles, segments
            )

        def discard_written() -> None:
            self._drop_upload(checkpoint_id)

        task: AsyncSnapshotTask[KeyedStateHandle] = AsyncSnapshotTask(write, self._pending.discard, discard_written)
        self._pending.add(task)
        return task

    def _drop_upload(self, checkpoint_id: int) -> None:
        """A checkpoint's asynchronous part failed or was cancelled, perhaps after its log segment was written: the
        segment's file goes, unless a later snapshot already references it, and its changes not in the current
        materialization go into the next segment (KB-SNAP-6). A materialization it took stays as the base (CL-2)."""
        with self._lock:
            self._checkpoint_bases.pop(checkpoint_id, None)
            covered = self._base.sequence if self._base is not None else 0
        dropped = self._writer.reset(checkpoint_id, covered)
        if dropped is not None:
            discard_stream_handles([dropped.delegate])

    def _materialize(self, materialization: tuple[int, int, Any], required: bool) -> Materialization | None:
        """Run a materialization's asynchronous part. A failure is tolerated `max_failures_allowed` times in a
        row while an older materialization can stand in (CL-8); otherwise it fails the checkpoint."""
        materialization_id, sequence, task = materialization
        try:
            handle = task.run()
        except Exception:
            self.failed_materializations += 1
            if required or self.failed_materializations > self._settings.max_failures_allowed:
                raise
            return None
        finally:
            self._materializing = False
        self.failed_materializations = 0
        done = Materialization(materialization_id, sequence, (handle,) if handle is not None else ())
        with self._lock:
            self._base = done
        return done

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """The log before the completed checkpoint's materialization is not needed by later checkpoints (CL-5);
        the wrapped backend learns that the materialization is complete (an incremental one's base)."""
        with self._lock:
            used = self._checkpoint_bases.pop(checkpoint_id, None)
            for older in [c for c in self._checkpoint_bases if c < checkpoint_id]:
                del self._checkpoint_bases[older]
        self._writer.confirm(checkpoint_id)
        if used is not None and used.materialization_id > self._confirmed:
            self._confirmed = used.materialization_id
            self._writer.truncate(used.sequence)
            self._delegate.notify_checkpoint_complete(used.materialization_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """The aborted checkpoint's log segment, if it was the latest upload, is uploaded again by the next
        checkpoint instead of being referenced by it (KB-SNAP-9), as Flink's changelog backend resets its writer."""
        with self._lock:
            self._checkpoint_bases.pop(checkpoint_id, None)
        self._writer.reset(checkpoint_id)

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def check_open(self) -> None:
        if self._closed:
            raise BackendClosedError("the changelog keyed state backend is closed (KB-LIFE-2)")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in list(self._pending):
            task.cancel()
        self._states.clear()
        self._timer_services.clear()
        self._delegate.close()

    def dispose(self) -> None:
        self.close()
        self._delegate.dispose()

    def __enter__(self) -> ChangelogKeyedStateBackend:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
