"""Small builders the conformance tests share (and statecert's own tests reuse)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from statecert.reference.checkpointing import create_subtasks, take_snapshot
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.spec.handles import KeyedStateHandle
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.keygroups import KeyGroupRange, key_group_range_for_operator
from statecert.spec.metadata import CheckpointKind, OperatorState
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import VOID_NAMESPACE, Clock, SystemClock, ValueStateDescriptor

KEYS = StringSerializer()
COUNT = ValueStateDescriptor("count", serializer=LongSerializer())


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
        "job", "op", key_serializer, max_parallelism, rng, tuple(restore), clock or SystemClock()
    )
    return state_backend.create_keyed_state_backend(params)


def snapshot_now(backend: Any, location: Any, checkpoint_id: int = 1) -> Any:
    """Synchronous and asynchronous part back to back."""
    return backend.snapshot(checkpoint_id, 0, location).run()


def location_for(storage: Any, checkpoint_id: int = 1, job_id: str = "job") -> Any:
    return storage.create_checkpoint_storage(job_id).initialize_location_for_checkpoint(checkpoint_id)


def savepoint(storage: Any, state_backend: Any, parallelism: int = 4, keys: int = 300) -> tuple[str, dict[str, int]]:
    """A canonical savepoint of value state `count` = i for keys k0..k<keys>; returns pointer and the state."""
    subtasks = create_subtasks(state_backend, KEYS, parallelism, 128)
    expected = {}
    for i in range(keys):
        for s in subtasks:
            if s.keyed.key_group_of(f"k{i}") in s.keyed.key_group_range:
                s.keyed.set_current_key(f"k{i}")
                s.keyed.get_or_create_state(COUNT).update(i)
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
