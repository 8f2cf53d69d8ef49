"""What a backend declares unsupported fails with the documented error (SB-3), SQLAlchemy-style: each test runs
only when the capability is declared False."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from statecert.conformance.helpers import key_group_of, keyed_backend, location_for, operator_backend, snapshot_now
from statecert.reference.serializers import LongSerializer, RecordSerializer, StringSerializer
from statecert.spec.errors import StateMigrationError, UnsupportedFeatureError
from statecert.spec.keyed_backend import CheckpointOptions, SnapshotType
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.state import TtlConfig, ValueStateDescriptor

VALUE = ValueStateDescriptor("v", serializer=LongSerializer())


def filled(state_backend: Any, **kwargs: Any) -> Any:
    backend = keyed_backend(state_backend, **kwargs)
    state = backend.get_or_create_state(VALUE)
    for i in range(40):
        key = f"k{i}"
        if key_group_of(key) in backend.key_group_range:
            backend.set_current_key(key)
            state.update(i)
    return backend


@pytest.mark.requirement("SB-3")
@pytest.mark.capability("ttl", supported=False)
def test_ttl_unsupported_is_the_documented_error(state_backend: Any) -> None:
    with keyed_backend(state_backend) as backend, pytest.raises(UnsupportedFeatureError):
        backend.get_or_create_state(ValueStateDescriptor("t", ttl=TtlConfig(10), serializer=LongSerializer()))


@pytest.mark.requirement("SB-3")
@pytest.mark.capability("operator_state", supported=False)
def test_operator_state_unsupported_is_the_documented_error(state_backend: Any) -> None:
    with pytest.raises(UnsupportedFeatureError):
        operator_backend(state_backend)


@pytest.mark.requirement("SB-3")
@pytest.mark.capability("canonical_savepoints", supported=False)
def test_canonical_savepoints_unsupported_is_the_documented_error(state_backend: Any, storage: Any) -> None:
    with filled(state_backend) as backend, pytest.raises(UnsupportedFeatureError):
        backend.snapshot(1, 0, location_for(storage), CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)).run()


@pytest.mark.requirement("SB-3")
@pytest.mark.capability("rescaling", supported=False)
def test_rescaling_unsupported_is_the_documented_error(state_backend: Any, storage: Any) -> None:
    with filled(state_backend) as backend:
        handle = snapshot_now(backend, location_for(storage))
    with pytest.raises(UnsupportedFeatureError):
        keyed_backend(state_backend, key_group_range=KeyGroupRange(0, 63), restore=[handle])


@pytest.mark.requirement("SB-3")
@pytest.mark.capability("schema_evolution", supported=False)
def test_schema_evolution_unsupported_is_a_migration_error(state_backend: Any, storage: Any) -> None:
    v1 = RecordSerializer([("name", StringSerializer(), "")])
    v2 = RecordSerializer([("name", StringSerializer(), ""), ("n", LongSerializer(), 0)])
    with keyed_backend(state_backend) as backend:
        backend.set_current_key("k")
        backend.get_or_create_state(ValueStateDescriptor("p", serializer=v1)).update({"name": "x"})
        handle = snapshot_now(backend, location_for(storage))
    with keyed_backend(state_backend, restore=[handle]) as restored, pytest.raises(StateMigrationError):
        restored.get_or_create_state(ValueStateDescriptor("p", serializer=v2))


@pytest.mark.requirement("SB-3")
@pytest.mark.capability("incremental_checkpoints", supported=False)
def test_without_incremental_checkpoints_nothing_is_shared(state_backend: Any, tmp_path: Any) -> None:
    """A backend without incremental checkpoints writes a self-contained snapshot each time: nothing in the shared
    scope, which an incremental backend would use (no inlining, so every stream is a file)."""
    import fsspec

    from statecert.reference.storage.filesystem import FileSystemCheckpointStorage

    storage = FileSystemCheckpointStorage(str(tmp_path / "c"), file_state_size_threshold=0)
    with filled(state_backend) as backend:
        snapshot_now(backend, location_for(storage, 1))
        second = snapshot_now(backend, location_for(storage, 2))
    fs, shared = fsspec.core.url_to_fs(storage.create_checkpoint_storage("job").shared_dir)
    assert not fs.exists(shared) or fs.find(shared) == [], (
        "SB-3: expected not fs.exists(shared) or fs.find(shared) == []"
    )
    assert dataclasses.is_dataclass(second), "SB-3: expected dataclasses.is_dataclass(second)"


@pytest.mark.requirement("SB-2")
def test_capability_manifest_is_typed(state_backend: Any) -> None:
    from statecert.conformance.capabilities import KNOWN, declared

    manifest = declared(state_backend)
    assert {f.name for f in dataclasses.fields(manifest)} == KNOWN, (
        "SB-2: {f.name for f in dataclasses.fields(manifest)}: expected KNOWN"
    )
    assert manifest.native_savepoint_format is None or isinstance(manifest.native_savepoint_format, str), (
        "SB-2: expected manifest.native_savepoint_format is None or isinstance(manifest.native_savepoint_format, str)"
    )
