"""Restore of a changelog backend (CL-4): the wrapped backend restores the materialized handles, the changes of
the backend's key groups after each materialization are replayed in sequence order through the public state API
(serialized payloads passed through under their original serializer snapshots, each at its logged time so TTL
timestamps come out as written), and the result is handed to a fresh wrapped backend through a canonical
snapshot in memory (the wrapped backend's own checkpoint format if it writes no canonical savepoints), so states
stay unregistered until the job registers them (KB-RESTORE-3)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import fsspec

from statecert.reference.changelog.raw_serializer import RawSerializer
from statecert.reference.changelog.records import Change, LoggedState, Op, decode_segment
from statecert.reference.format.canonical import describe
from statecert.reference.format.entry_check import EntryValidator, restorable
from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.migration import check_key_serializer
from statecert.reference.serializers import restore_serializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.literal_paths import remove_tree
from statecert.spec.errors import CheckpointFormatError, StateMigrationError, UnsupportedSnapshotError
from statecert.spec.handles import (
    CHANGELOG_FORMAT,
    ChangelogSegmentHandle,
    ChangelogStateBackendHandle,
    KeyedStateHandle,
)
from statecert.spec.keyed_backend import CheckpointOptions, KeyedBackendParameters, SnapshotType
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.serializers import Compatibility, TypeSerializer
from statecert.spec.state import (
    AggregatingStateDescriptor,
    Clock,
    InternalAppendingState,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateKind,
    ValueStateDescriptor,
)


class ReplayClock:
    """The job's clock, except while a change is replayed: then the change's logged time."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.replaying_at: int | None = None

    def now_ms(self) -> int:
        return self.replaying_at if self.replaying_at is not None else self._clock.now_ms()


def _never(*args: Any) -> Any:
    raise AssertionError("a replayed state never calls its functions (CL-4)")


def _accumulator(accumulator: Any) -> Any:
    return accumulator


class _NoAggregate:
    """Replay adds, merges and creates nothing; a replayed read (TOUCH) reads the accumulator as it is."""

    create_accumulator = add = merge = staticmethod(_never)
    get_result = staticmethod(_accumulator)


def _descriptor(logged: LoggedState, serializers: dict[str, Any]) -> StateDescriptor:
    name, ttl = logged.meta.name, logged.ttl
    kind = logged.meta.kind
    if kind is StateKind.VALUE:
        return ValueStateDescriptor(name, ttl, serializer=serializers["value"])
    if kind is StateKind.LIST:
        return ListStateDescriptor(name, ttl, element_serializer=serializers["element"])
    if kind is StateKind.MAP:
        return MapStateDescriptor(
            name, ttl, user_key_serializer=serializers["user_key"], user_value_serializer=serializers["user_value"]
        )
    if kind is StateKind.REDUCING:
        return ReducingStateDescriptor(name, ttl, reduce_function=_never, serializer=serializers["value"])
    return AggregatingStateDescriptor(
        name, ttl, aggregate_function=_NoAggregate(), accumulator_serializer=serializers["value"]
    )


APPLICABLE_OPS: dict[StateKind, frozenset[Op]] = {
    StateKind.VALUE: frozenset({Op.CLEAR, Op.SET, Op.TOUCH}),
    StateKind.REDUCING: frozenset({Op.CLEAR, Op.SET, Op.TOUCH}),
    StateKind.AGGREGATING: frozenset({Op.CLEAR, Op.SET, Op.TOUCH}),
    StateKind.LIST: frozenset({Op.CLEAR, Op.ADD, Op.ADD_ALL, Op.REPLACE, Op.MERGE, Op.TOUCH}),
    StateKind.MAP: frozenset({Op.CLEAR, Op.PUT, Op.REMOVE, Op.TOUCH}),
}
"""The ops a change of each state kind may carry (CL-3): what `apply` replays."""


def _logged_values(change: Change, kind: StateKind) -> list[tuple[str, bytes]]:
    """The serialized values a change carries, each with the serializer role that reads it (the decoder has checked
    the payload's shape for its op)."""
    op, payload = change.op, change.payload
    if op is Op.SET and payload is not None:
        return [("value", payload)]
    if op is Op.ADD:
        return [("element", payload)]
    if op in (Op.ADD_ALL, Op.REPLACE):
        return [("element", element) for element in payload]
    if op is Op.MERGE:
        return [("namespace", source) for source in payload]
    if op is Op.PUT:
        return [("user_key", payload[0])] + ([("user_value", payload[1])] if payload[1] is not None else [])
    if op is Op.REMOVE or (op is Op.TOUCH and kind is StateKind.MAP and payload is not None):
        return [("user_key", payload)]
    return []


def applied_changes(
    handle: ChangelogStateBackendHandle,
    segment: ChangelogSegmentHandle,
    max_parallelism: int,
    key_groups: KeyGroupRange,
    key_serializer: TypeSerializer[Any] | None = None,
) -> tuple[dict[str, LoggedState], list[Change]]:
    """The states a segment describes and the changes of it a restore of `key_groups` applies (those after the
    handle's materialization), each checked as a restore checks a canonical entry (FMT-15): within the segment's
    sequence range, its key in its serializer's encoding and of the key group it is logged under, its namespace in
    its serializer's encoding; else CheckpointFormatError naming the segment. The segment's key serializer is checked
    as a canonical stream's is (SER-6): against the job's `key_serializer` on restore, against the serializer its
    snapshot restores when there is no job (`inspect --verify`); one to migrate is a StateMigrationError. Restore and
    `inspect --verify` both read segments through it, so that they refuse the same changes."""
    name = str(getattr(segment.delegate, "path", getattr(segment.delegate, "handle_name", "changelog segment")))
    with segment.delegate.open() as f:
        data = f.read()
    content = decode_segment(data, name, max_parallelism)
    try:
        check_key_serializer(key_serializer or restore_serializer(content.key_serializer), content.key_serializer)
    except StateMigrationError as exc:
        raise StateMigrationError(f"{name}: {exc}") from None
    metas = [logged.meta for logged in content.states.values()]
    index = {meta.name: i for i, meta in enumerate(metas)}
    validator = EntryValidator(metas, restorable(content.key_serializer, name), max_parallelism, name)
    applied = []
    for change in content.changes:
        if not segment.from_sequence < change.sequence <= segment.to_sequence:
            raise CheckpointFormatError(name, f"change {change.sequence} lies outside the segment's range")
        if change.sequence <= handle.materialized_sequence or change.key_group not in key_groups:
            continue
        # a change of another key group, or a key in another encoding, would add a key no lookup finds or overwrite
        # another key's state
        validator.check_key(change.key_group, index[change.state], change.key, change.namespace)
        kind = content.states[change.state].meta.kind
        if change.op is Op.TOUCH and kind is not StateKind.MAP and change.payload is not None:
            what = f"change {change.sequence}: a TOUCH of {kind.value} state with a user key"
            raise CheckpointFormatError(name, what)
        if change.op not in APPLICABLE_OPS[kind]:
            what = f"change {change.sequence}: a {change.op.name} change of {kind.value} state"
            raise CheckpointFormatError(name, what)
        for role, value in _logged_values(change, kind):
            if role == "namespace":
                validator.check_namespace(change.key_group, index[change.state], value)
            else:
                validator.check_logged_value(change.key_group, index[change.state], role, value)
        applied.append(change)
    return content.states, applied


def read_changes(
    handles: Sequence[ChangelogStateBackendHandle], params: KeyedBackendParameters[Any]
) -> tuple[dict[str, LoggedState], list[Change]]:
    """The changes to replay: of this backend's key groups, after the materialization of their handle, each once,
    in sequence order per handle (key groups of different handles are disjoint)."""
    states: dict[str, LoggedState] = {}
    ordered: list[Change] = []
    for handle in handles:
        by_sequence: dict[int, Change] = {}
        for segment in handle.changelog:
            described, changes = applied_changes(
                handle, segment, params.max_parallelism, params.key_group_range, params.key_serializer
            )
            for change in changes:
                by_sequence.setdefault(change.sequence, change)
            for state_name, logged in described.items():
                if states.setdefault(state_name, logged).meta.kind is not logged.meta.kind:
                    raise CheckpointFormatError(
                        describe(segment.delegate), f"state {state_name!r} is logged with two kinds"
                    )
        ordered.extend(by_sequence[s] for s in sorted(by_sequence))
    return states, ordered


def takes_over(materialized: StateMetaInfo, logged: StateMetaInfo) -> str | None:
    """Why the replay of a state the log describes as `logged` cannot register it over its `materialized`
    description (None: it can), as `_register` decides: alike, or of the same kind and TTL flag with serializers
    that read the materialized state as it is or after migration (SER-5), a namespace serializer taken as it is
    (SER-6), each snapshot one its restored serializer writes again. `inspect --verify` asks it of each segment."""
    if logged == materialized:
        return None
    if logged.kind is not materialized.kind or logged.ttl != materialized.ttl:
        return f"state {logged.name!r} is logged as another kind or TTL than it is materialized"
    if set(logged.serializers) != set(materialized.serializers):
        return f"state {logged.name!r} is logged with other serializer roles than it is materialized"
    pairs = [("namespace", logged.namespace_serializer, materialized.namespace_serializer)]
    pairs += [(role, snapshot, materialized.serializers[role]) for role, snapshot in logged.serializers.items()]
    for role, new, old in pairs:
        serializer = restore_serializer(new)
        compatibility = serializer.resolve_compatibility(old).kind
        if (
            serializer.snapshot_configuration() != new
            or compatibility is Compatibility.INCOMPATIBLE
            or (role == "namespace" and compatibility is not Compatibility.COMPATIBLE_AS_IS)
        ):
            return f"state {logged.name!r}: the {role} serializer of the log cannot take over the materialized state"
    return None


def _register(backend: Any, logged: LoggedState) -> Any:
    """The state to replay into, with pass-through serializers; a state the log describes with newer serializers
    than the materialization is first migrated with the serializers the registry restores (SER-5)."""
    raw = {role: RawSerializer(s) for role, s in logged.meta.serializers.items()}
    namespace = RawSerializer(logged.meta.namespace_serializer)
    try:
        return backend.get_or_create_state(_descriptor(logged, raw), namespace)
    except StateMigrationError:
        restored = {role: restore_serializer(s) for role, s in logged.meta.serializers.items()}
        backend.get_or_create_state(_descriptor(logged, restored), restore_serializer(logged.meta.namespace_serializer))
        return backend.get_or_create_state(_descriptor(logged, raw), namespace)


def apply(backend: Any, state: Any, kind: StateKind, change: Change) -> None:
    key, payload = backend.key_serializer.deserialize(change.key), change.payload
    backend.set_current_key(key)
    state.set_current_namespace(change.namespace)
    op = change.op
    if op is Op.CLEAR:
        state.clear()
    elif op is Op.SET and kind is StateKind.VALUE:
        state.update(payload)
    elif op is Op.SET and isinstance(state, InternalAppendingState):
        state.update_internal(payload)
    elif op is Op.SET and kind is StateKind.REDUCING:
        state.clear()
        state.add(payload)
    elif op is Op.ADD and kind is StateKind.LIST:
        state.add(payload)
    elif op is Op.ADD_ALL and kind is StateKind.LIST:
        state.add_all(payload)
    elif op is Op.REPLACE and kind is StateKind.LIST:
        state.update(payload)
    elif op is Op.MERGE and kind is StateKind.LIST:
        state.merge_namespaces(change.namespace, payload)  # the wrapped state moves each element with its TTL
    elif op is Op.PUT and kind is StateKind.MAP:
        state.put(payload[0], payload[1])
    elif op is Op.REMOVE and kind is StateKind.MAP:
        state.remove(payload)
    elif op is Op.TOUCH:
        if kind is StateKind.MAP:  # one entry (get, contains, an entry iterated); None: every entry
            state.get(payload) if payload is not None else list(state.items())
        elif kind is StateKind.VALUE:
            state.value()
        elif kind in (StateKind.LIST, StateKind.REDUCING, StateKind.AGGREGATING):
            state.get()  # refreshes the TTL as the logged read did (TTL-2)
    else:  # applied_changes refused it already
        raise AssertionError(f"a {op.name} change of {kind.value} state")


ChangeReader = Callable[
    [Sequence[ChangelogStateBackendHandle], KeyedBackendParameters[Any]], tuple[dict[str, LoggedState], list[Change]]
]


def restore_keyed_backend(
    delegate_factory: Any,
    params: KeyedBackendParameters[Any],
    handles: Sequence[KeyedStateHandle],
    reader: ChangeReader | None = None,
) -> Any:
    """The wrapped backend holding the restored state: materialized handles plus the replayed changes."""
    changelog = [h for h in handles if isinstance(h, ChangelogStateBackendHandle)]
    for handle in changelog:
        if handle.snapshot_format != CHANGELOG_FORMAT:
            raise UnsupportedSnapshotError(
                f"a changelog state handle in format {handle.snapshot_format!r}: the changelog backend reads "
                f"{CHANGELOG_FORMAT!r} handles (KB-RESTORE-5)"
            )
    materialized = [h for h in handles if not isinstance(h, ChangelogStateBackendHandle)]
    materialized += [m for h in changelog for m in h.materialized]
    states, changes = (reader or read_changes)(changelog, params)
    if not changes:
        return delegate_factory.create_keyed_state_backend(replace(params, restore_state=tuple(materialized)))
    clock = ReplayClock(params.ttl_clock)
    staging = delegate_factory.create_keyed_state_backend(
        replace(params, restore_state=tuple(materialized), ttl_clock=clock)
    )
    root = f"memory://statecert-changelog-replay-{uuid.uuid4().hex}"
    try:
        registered = {
            name: _register(staging, logged) for name, logged in states.items() if any(c.state == name for c in changes)
        }
        for change in changes:
            clock.replaying_at = change.timestamp
            apply(staging, registered[change.state], states[change.state].meta.kind, change)
        clock.replaying_at = None
        location = (
            FileSystemCheckpointStorage(root, savepoint_dir=root)
            .create_checkpoint_storage("replay")
            .initialize_location_for_savepoint(1)
        )
        # A backend without canonical savepoints (SB-3) hands its state over in its own checkpoint format: the fresh
        # backend has the same key-group range, so no rescaling is asked of it either.
        kind = (
            SnapshotType.SAVEPOINT_CANONICAL
            if delegate_factory.capabilities.canonical_savepoints
            else SnapshotType.CHECKPOINT
        )
        handle = staging.snapshot(0, 0, location, CheckpointOptions(kind)).run()
        staging.dispose()
        staging = None
        return delegate_factory.create_keyed_state_backend(
            replace(params, restore_state=(handle,) if handle is not None else ())
        )
    finally:
        if staging is not None:
            staging.dispose()
        fs, path = fsspec.core.url_to_fs(root)
        remove_tree(fs, path)
