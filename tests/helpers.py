"""Small builders shared by the tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from statecert.reference.serializers import StringSerializer
from statecert.spec.handles import KeyedStateHandle
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.keygroups import KeyGroupRange, key_group_range_for_operator
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import Clock, SystemClock

KEYS = StringSerializer()


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
