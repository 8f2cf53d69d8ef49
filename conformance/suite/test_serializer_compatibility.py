"""Serializer compatibility on restore for every serializer role (chapter SER): a state's value, a list's
element, a map's user key and user value, an aggregate's accumulator, and the key serializer, also when the
restore rescales."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from statecert.conformance.helpers import (
    create_subtasks,
    keyed_backend,
    location_for,
    operator_backend,
    owner_of,
    snapshot_now,
)
from statecert.reference.checkpointing import take_snapshot
from statecert.reference.serializers import BaseSerializer, DoubleSerializer, LongSerializer, StringSerializer
from statecert.spec.errors import StateMigrationError
from statecert.spec.serializers import SchemaCompatibility, SerializerSnapshot
from statecert.spec.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)

L, S, D = LongSerializer(), StringSerializer(), DoubleSerializer()


class Count:
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, acc: int) -> int:
        return acc + 1

    def get_result(self, acc: int) -> int:
        return acc

    def merge(self, a: int, b: int) -> int:
        return a + b


# role -> (descriptor with the original serializers, descriptor with that role's serializer incompatible, write)
ROLES: dict[str, tuple[Any, Any, Any]] = {
    "value": (
        ValueStateDescriptor("state_under_test", serializer=L),
        ValueStateDescriptor("state_under_test", serializer=S),
        lambda s: s.update(1),
    ),
    "reducing-value": (
        ReducingStateDescriptor("state_under_test", reduce_function=lambda a, b: a + b, serializer=L),
        ReducingStateDescriptor("state_under_test", reduce_function=lambda a, b: a + b, serializer=S),
        lambda s: s.add(1),
    ),
    "aggregating-accumulator": (
        AggregatingStateDescriptor("state_under_test", aggregate_function=Count(), accumulator_serializer=L),
        AggregatingStateDescriptor("state_under_test", aggregate_function=Count(), accumulator_serializer=S),
        lambda s: s.add("x"),
    ),
    "list-element": (
        ListStateDescriptor("state_under_test", element_serializer=L),
        ListStateDescriptor("state_under_test", element_serializer=S),
        lambda s: s.add(1),
    ),
    "map-user-key": (
        MapStateDescriptor("state_under_test", user_key_serializer=S, user_value_serializer=L),
        MapStateDescriptor("state_under_test", user_key_serializer=D, user_value_serializer=L),
        lambda s: s.put("a", 1),
    ),
    "map-user-value": (
        MapStateDescriptor("state_under_test", user_key_serializer=S, user_value_serializer=L),
        MapStateDescriptor("state_under_test", user_key_serializer=S, user_value_serializer=S),
        lambda s: s.put("a", 1),
    ),
}


@pytest.mark.requirement("SER-7")
@pytest.mark.parametrize("role", sorted(ROLES))
def test_incompatible_serializer_in_any_role_fails_registration(state_backend: Any, storage: Any, role: str) -> None:
    original, incompatible, write = ROLES[role]
    with keyed_backend(state_backend) as backend:
        backend.set_current_key("k")
        write(backend.get_or_create_state(original))
        handle = snapshot_now(backend, location_for(storage))
    with keyed_backend(state_backend, restore=[handle]) as restored:
        with pytest.raises(StateMigrationError) as raised:
            restored.get_or_create_state(incompatible)
        assert "state_under_test" in str(raised.value), f"SER-7: the error must name the state: {raised.value}"


@pytest.mark.requirement("SER-7", "KS-2")
@pytest.mark.parametrize("role", sorted(ROLES))
def test_the_same_serializers_register_again(state_backend: Any, storage: Any, role: str) -> None:
    original, _, write = ROLES[role]
    with keyed_backend(state_backend) as backend:
        backend.set_current_key("k")
        write(backend.get_or_create_state(original))
        handle = snapshot_now(backend, location_for(storage))
    with keyed_backend(state_backend, restore=[handle]) as restored:
        restored.set_current_key("k")
        state = restored.get_or_create_state(original)
        assert restored.num_state_entries("state_under_test") == 1, f"SER-7: {role} state lost its entry"
        state.clear()


@pytest.mark.requirement("SER-6", "KB-RESTORE-2")
@pytest.mark.capability("rescaling")
@pytest.mark.parametrize(("old", "new"), [(1, 2), (2, 1), (2, 3)])
def test_changed_key_serializer_fails_a_rescaling_restore(state_backend: Any, storage: Any, old: int, new: int) -> None:
    subtasks = create_subtasks(state_backend, S, old, 128)
    for i in range(60):
        owner_of(subtasks, f"k{i}").get_or_create_state(ValueStateDescriptor("v", serializer=L)).update(i)
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    operator = storage.load_checkpoint(take_snapshot(subtasks, location, 1, 128)).operator("op")
    for s in subtasks:
        s.dispose()
    with pytest.raises(StateMigrationError):
        for s in create_subtasks(state_backend, L, new, 128, restore_from=operator):
            s.keyed.get_or_create_state(ValueStateDescriptor("v", serializer=L))
            s.dispose()


class VersionedCount(BaseSerializer):
    """Integers as decimal text in version 1 and as 8 big-endian bytes in version 2: bytes of one version do not
    read under the other, so only a real migration (SER-5) keeps the values."""

    serializer_id = "statecert-suite-versioned-count"

    def __init__(self, version: int = 2) -> None:
        self.format_version = version

    def serialize(self, value: int) -> bytes:
        return str(value).encode() if self.format_version == 1 else struct.pack(">q", value)

    def deserialize(self, data: bytes) -> int:
        if self.format_version == 1:
            return int(bytes(data).decode("ascii"))
        if len(data) != 8:
            raise ValueError(f"VersionedCount v2: expected 8 bytes, got {len(data)}")
        return int(struct.unpack(">q", data)[0])

    def snapshot_configuration(self) -> SerializerSnapshot:
        return SerializerSnapshot(self.serializer_id, self.format_version, {})

    @classmethod
    def from_snapshot(cls, snapshot: SerializerSnapshot) -> VersionedCount:
        return cls(snapshot.version)

    def resolve_compatibility(self, old: SerializerSnapshot) -> SchemaCompatibility[Any]:
        if old.serializer_id != self.serializer_id:
            return SchemaCompatibility.incompatible(f"written by {old.serializer_id}")
        if old.version != self.format_version:
            return SchemaCompatibility.after_migration(f"v{old.version} -> v{self.format_version}")
        return SchemaCompatibility.as_is()


LARGE_CONFIGURATION: dict[str, Any] = {
    "schema": '{"type": "record", "doc": "' + "ü" * 40_000 + '"}',
    "fields": ["a", "ü", "計数", ""],
    "limits": {"small": 1, "wide": 2**40, "negative": -(2**62)},
    "flags": [True, False, None],
}
"""A serializer configuration as an Avro serializer's schema makes one: a text of more than 64 KiB in UTF-8 (Flink's
`writeUTF` refused such schemas), non-ASCII text, 64-bit numbers, nesting."""


class LargelyConfiguredLong(BaseSerializer):
    """The `long` serializer's bytes under LARGE_CONFIGURATION; compatible as is only with a snapshot of that very
    configuration, so a configuration that does not come back unchanged (SER-2) makes it incompatible."""

    serializer_id = "statecert-suite-largely-configured-long"

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.configuration = LARGE_CONFIGURATION if config is None else config

    def serialize(self, value: int) -> bytes:
        return struct.pack(">q", value)

    def deserialize(self, data: bytes) -> int:
        return int(struct.unpack(">q", data)[0])

    def snapshot_configuration(self) -> SerializerSnapshot:
        return SerializerSnapshot(self.serializer_id, 1, self.configuration)

    @classmethod
    def from_snapshot(cls, snapshot: SerializerSnapshot) -> LargelyConfiguredLong:
        return cls(dict(snapshot.config))

    def resolve_compatibility(self, old: SerializerSnapshot) -> SchemaCompatibility[Any]:
        if (old.serializer_id, old.version) != (self.serializer_id, 1):
            return SchemaCompatibility.incompatible(f"written by {old.serializer_id} v{old.version}")
        mine = self.configuration
        if dict(old.config) != mine:
            changed = sorted(k for k in {*old.config, *mine} if old.config.get(k) != mine.get(k))
            return SchemaCompatibility.incompatible(f"SER-2: the configuration came back changed in {changed}")
        return SchemaCompatibility.as_is()


@pytest.mark.requirement("SER-2")
def test_a_large_serializer_configuration_comes_back_unchanged(state_backend: Any, storage: Any) -> None:
    """Every serializer role (key, namespace, value, list element, map user key and value) under a configuration of
    more than 64 KiB: restored and registered again with the same serializers, each is compatible as is, which it
    is only with its configuration back unchanged."""
    ser = LargelyConfiguredLong()
    descriptors = [
        ValueStateDescriptor("v", serializer=ser),
        ListStateDescriptor("l", element_serializer=ser),
        MapStateDescriptor("m", user_key_serializer=ser, user_value_serializer=ser),
    ]
    with keyed_backend(state_backend, key_serializer=ser) as backend:
        backend.set_current_key(7)
        value, elements, entries = (backend.get_or_create_state(d, ser) for d in descriptors)
        for state in (value, elements, entries):
            state.set_current_namespace(3)
        value.update(1)
        elements.add_all([2, 3])
        entries.put(4, 5)
        handle = snapshot_now(backend, location_for(storage))
    try:
        with keyed_backend(state_backend, restore=[handle], key_serializer=LargelyConfiguredLong()) as restored:
            restored.set_current_key(7)
            value, elements, entries = (restored.get_or_create_state(d, LargelyConfiguredLong()) for d in descriptors)
            for state in (value, elements, entries):
                state.set_current_namespace(3)
            got = (value.value(), elements.get(), dict(entries.items()))
    except StateMigrationError as exc:
        pytest.fail(f"SER-2: restoring and registering again with the serializers that wrote the state: {exc}")
    assert got == (1, [2, 3], {4: 5}), (
        f"SER-2: (value, list, map) after the restore: expected (1, [2, 3], {{4: 5}}), got {got}"
    )


@pytest.mark.requirement("SER-2")
@pytest.mark.capability("operator_state")
def test_a_large_operator_serializer_configuration_comes_back_unchanged(state_backend: Any, storage: Any) -> None:
    """Operator state too: a split list's element serializer and a broadcast state's key and value serializers under
    a configuration of more than 64 KiB are compatible as is after a restore, so they came back unchanged."""
    split = ListStateDescriptor("split", element_serializer=LargelyConfiguredLong())
    broadcast = MapStateDescriptor(
        "broadcast", user_key_serializer=LargelyConfiguredLong(), user_value_serializer=LargelyConfiguredLong()
    )
    with operator_backend(state_backend) as backend:
        backend.get_list_state(split).add_all([1, 2])
        backend.get_broadcast_state(broadcast).put(3, 4)
        handle = backend.snapshot(1, 0, location_for(storage)).run()
    try:
        with operator_backend(state_backend, restore=(handle,)) as restored:
            got = (list(restored.get_list_state(split).get()), dict(restored.get_broadcast_state(broadcast).items()))
    except StateMigrationError as exc:
        pytest.fail(f"SER-2: restoring operator state and registering it again with the same serializers: {exc}")
    expected = ([1, 2], {3: 4})
    assert got == expected, f"SER-2: (split list, broadcast items) after the restore: expected {expected}, got {got}"


@pytest.mark.requirement("SER-6", "SER-7")
@pytest.mark.parametrize("change", ["incompatible", "after migration"])
def test_a_restored_states_namespace_serializer_is_never_migrated(
    state_backend: Any, storage: Any, change: str
) -> None:
    """Restored state registered under a namespace serializer that is incompatible or needs migration is refused
    with `StateMigrationError` naming the state, as Flink's heap and RocksDB backends refuse it ("the new namespace
    serializer must be compatible"); registered again under the old one it holds what it held. A backend that
    takes the new namespace serializer unchecked reads every restored namespace with it."""
    descriptor = ValueStateDescriptor("state_under_test", serializer=L)
    new, namespace = (S, "7") if change == "incompatible" else (VersionedCount(2), 7)
    with keyed_backend(state_backend) as backend:
        backend.set_current_key("k")
        backend.get_partitioned_state(7, descriptor, VersionedCount(1)).update(1)
        handle = snapshot_now(backend, location_for(storage))
    call = f"get_partitioned_state({namespace!r}, ..., {type(new).__name__}) for a namespace serializer {change}"
    with keyed_backend(state_backend, restore=[handle]) as restored:
        with pytest.raises(StateMigrationError) as raised:
            restored.get_partitioned_state(namespace, descriptor, new)
            pytest.fail(f"SER-6: {call}: expected StateMigrationError, got none")
        assert "state_under_test" in str(raised.value), f"SER-6: {call}: the error must name the state: {raised.value}"
        restored.set_current_key("k")
        got = restored.get_partitioned_state(7, descriptor, VersionedCount(1)).value()
        assert got == 1, f"SER-7: after the refused {call}, the old namespace serializer reads: expected 1, got {got!r}"


def _versioned(version: int) -> list[Any]:
    count = VersionedCount(version)
    return [
        ValueStateDescriptor("mv", serializer=count),
        ListStateDescriptor("ml", element_serializer=count),
        MapStateDescriptor("mm", user_key_serializer=count, user_value_serializer=count),
        MapStateDescriptor("mu", user_key_serializer=S, user_value_serializer=count),  # one role migrates
        ReducingStateDescriptor("mr", reduce_function=lambda a, b: 3 * a - b, serializer=count),
        AggregatingStateDescriptor("ma", aggregate_function=Count(), accumulator_serializer=count),
    ]


def _read_all(states: list[Any]) -> tuple[Any, ...]:
    """What the states of `_versioned` (map user keys' state "mm" None when refused) hold for the current key."""
    value, lst, mapping, by_name, reducing, aggregating = states
    return (
        value.value(),
        lst.get(),
        mapping and sorted(mapping.items()),
        sorted(by_name.items()),
        reducing.get(),
        aggregating.get(),
    )


def _expected(i: int, mapping: Any) -> tuple[Any, ...]:
    """What `_read_all` reads for the i-th key the migration test wrote."""
    return (i, [i, -i], mapping and [(i, 10 * i)], [(f"u{i}", i)], 3 * i - 1, i % 3 + 1)


@pytest.mark.requirement("SER-5", "SER-2")
@pytest.mark.capability("schema_evolution")
def test_every_value_survives_a_real_migration(state_backend: Any, storage: Any) -> None:
    """Value, list elements, map user values ("mu"), map user keys and values ("mm"), a reduced value and an
    accumulator written under v1 read back under v2, and again after the migrated state's snapshot is restored.
    Migrating map user keys is the backend's choice (SER-5): refused, it must be `StateMigrationError` naming "mm",
    and the other states still migrate."""
    keys = [f"key-{i}" for i in range(40)]
    with keyed_backend(state_backend) as backend:
        value, lst, mapping, by_name, reducing, aggregating = (backend.get_or_create_state(d) for d in _versioned(1))
        for i, key in enumerate(keys):
            backend.set_current_key(key)
            value.update(i)
            lst.add_all([i, -i])
            mapping.put(i, 10 * i)
            by_name.put(f"u{i}", i)
            reducing.add(i)
            reducing.add(1)
            for _ in range(i % 3 + 1):
                aggregating.add("x")
        handle = snapshot_now(backend, location_for(storage, 1))
    with keyed_backend(state_backend, restore=[handle]) as restored:
        v2 = _versioned(2)
        states = [restored.get_or_create_state(d) if d.name != "mm" else None for d in v2]
        try:
            states[2] = restored.get_or_create_state(v2[2])
        except StateMigrationError as exc:
            assert "mm" in str(exc), f"SER-5: refusing to migrate map user keys, the error must name the state: {exc}"
        mapping = states[2]
        for i, key in enumerate(keys):
            restored.set_current_key(key)
            got, expected = _read_all(states), _expected(i, mapping)
            assert got == expected, f"SER-5: key {key} after migrating v1 -> v2 reads {got}, expected {expected}"
        counts = [restored.num_state_entries(d.name) for d in v2 if mapping or d.name != "mm"]
        assert counts == [40] * len(counts), f"SER-5: entry counts after migration {counts}, expected 40 each"
        again = snapshot_now(restored, location_for(storage, 2))
    with keyed_backend(state_backend, restore=[again]) as final:
        states = [final.get_or_create_state(d) if mapping or d.name != "mm" else None for d in _versioned(2)]
        final.set_current_key(keys[7])
        got, expected = _read_all(states), _expected(7, mapping)
        assert got == expected, (
            f"SER-2: the migrated state's snapshot reads {got} under v2 for key-7, expected {expected}"
        )


@pytest.mark.requirement("SER-6")
def test_key_serializer_that_needs_migration_fails_restore(state_backend: Any, storage: Any) -> None:
    """Same serializer id, a new version whose bytes differ: compatible after migration, which keys cannot be (their
    bytes place them in key groups), so restore fails instead of reading the old bytes or rehashing them."""
    with keyed_backend(state_backend, key_serializer=VersionedCount(1)) as backend:
        state = backend.get_or_create_state(ValueStateDescriptor("v", serializer=L))
        for key in range(20):
            backend.set_current_key(key)
            state.update(key)
        handle = snapshot_now(backend, location_for(storage))
    try:
        restored = keyed_backend(state_backend, restore=[handle], key_serializer=VersionedCount(2))
    except StateMigrationError:
        return
    restored.dispose()
    pytest.fail("SER-6: restore with a key serializer needing migration (v1 -> v2) did not raise StateMigrationError")


class LastName:
    """An aggregate whose accumulator is the last name added: the accumulator role under an enum serializer."""

    def create_accumulator(self) -> str:
        return "a"

    def add(self, value: str, acc: str) -> str:
        return value

    def get_result(self, acc: str) -> str:
        return acc

    def merge(self, a: str, b: str) -> str:
        return b


# role -> (descriptor for an enum serializer, write one name, read the state back as plain data)
ENUM_ROLES: dict[str, tuple[Any, Any, Any]] = {
    "value": (lambda e: ValueStateDescriptor("e", serializer=e), lambda s, v: s.update(v), lambda s: s.value()),
    "reducing-value": (
        lambda e: ReducingStateDescriptor("e", reduce_function=lambda a, b: b, serializer=e),
        lambda s, v: s.add(v),
        lambda s: s.get(),
    ),
    "aggregating-accumulator": (
        lambda e: AggregatingStateDescriptor("e", aggregate_function=LastName(), accumulator_serializer=e),
        lambda s, v: s.add(v),
        lambda s: s.get(),
    ),
    "list-element": (
        lambda e: ListStateDescriptor("e", element_serializer=e),
        lambda s, v: s.add(v),
        lambda s: s.get(),
    ),
    "map-user-key": (
        lambda e: MapStateDescriptor("e", user_key_serializer=e, user_value_serializer=L),
        lambda s, v: s.put(v, ord(v)),
        lambda s: sorted(s.items()),
    ),
    "map-user-value": (
        lambda e: MapStateDescriptor("e", user_key_serializer=S, user_value_serializer=e),
        lambda s, v: s.put(f"at-{v}", v),
        lambda s: sorted(s.items()),
    ),
}


@pytest.mark.requirement("SER-3")
@pytest.mark.capability("schema_evolution")
@pytest.mark.parametrize("role", sorted(ENUM_ROLES))
def test_a_reconfigured_serializer_in_any_role_is_used_through_two_restores(
    state_backend: Any, storage: Any, role: str
) -> None:
    """Names written as ordinals of ["a", "b"], restored under ["z", "a", "b"]: compatible once reconfigured to the
    old ordinals (SER-3). The backend reads the old name, writes a new one, and its next snapshot restores under
    the same new serializer; a backend that used the new serializer as given would read "b" as "a"."""
    from statecert.reference.serializers import EnumSerializer

    describe, write, read = ENUM_ROLES[role]
    old, new = EnumSerializer(["a", "b"]), EnumSerializer(["z", "a", "b"])
    with keyed_backend(state_backend) as backend:
        backend.set_current_key("k")
        write(backend.get_or_create_state(describe(old)), "b")
        expected = read(backend.get_or_create_state(describe(old)))
        handle = snapshot_now(backend, location_for(storage, 1))
    with keyed_backend(state_backend, restore=[handle]) as restored:
        restored.set_current_key("k")
        state = restored.get_or_create_state(describe(new))
        got = read(state)
        assert got == expected, f"SER-3 ({role}): restored under {new.values}, read {got!r}, expected {expected!r}"
        write(state, "z")
        expected = read(state)
        handle = snapshot_now(restored, location_for(storage, 2))
    with keyed_backend(state_backend, restore=[handle]) as again:
        again.set_current_key("k")
        got = read(again.get_or_create_state(describe(new)))
        assert got == expected, (
            f"SER-3 ({role}): written after the reconfiguration and restored under {new.values} again, read "
            f"{got!r}, expected {expected!r}"
        )
