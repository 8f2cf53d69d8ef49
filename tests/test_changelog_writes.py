"""The changelog backend's writes over a backend that serializes only in its snapshot (`tests/object_backends.py`):
what the log needs is serialized before the wrapped state changes, so a write whose serializer refuses its value
raises and changes nothing, and the log never lacks a write the wrapped state took (KS-LIST-3, OS-5, SER-10)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from statecert.conformance.helpers import keyed_backend
from statecert.reference.changelog.backend import ChangelogStateBackend, changelog_settings
from statecert.spec.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from tests.object_backends import keeping_objects

REFUSED = (1, "a")  # a tuple: the msgpack default refuses it (SER-10)

WRITES: dict[str, tuple[Any, Callable[[Any], None], Callable[[Any], None], Callable[[Any], Any]]] = {
    "value update": (
        ValueStateDescriptor("v"),
        lambda s: s.update("keep"),
        lambda s: s.update(REFUSED),
        lambda s: s.value(),
    ),
    "list add": (ListStateDescriptor("l"), lambda s: s.update(["keep"]), lambda s: s.add(REFUSED), lambda s: s.get()),
    "list add_all": (
        ListStateDescriptor("l"),
        lambda s: s.update(["keep"]),
        lambda s: s.add_all(["x", REFUSED]),
        lambda s: s.get(),
    ),
    "list update": (
        ListStateDescriptor("l"),
        lambda s: s.update(["keep"]),
        lambda s: s.update(["x", REFUSED]),
        lambda s: s.get(),
    ),
    "map put": (
        MapStateDescriptor("m"),
        lambda s: s.put("k", "keep"),
        lambda s: s.put("u", REFUSED),
        lambda s: sorted(s.items()),
    ),
    "map put_all": (
        MapStateDescriptor("m"),
        lambda s: s.put("k", "keep"),
        lambda s: s.put_all({"a": "x", "u": REFUSED}),
        lambda s: sorted(s.items()),
    ),
}


@pytest.mark.requirement("KS-LIST-3", "SER-10")
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_whose_log_entry_is_refused_leaves_the_wrapped_state_unchanged(write: str) -> None:
    descriptor, before, refused, read = WRITES[write]
    backend = ChangelogStateBackend(keeping_objects({}), changelog_settings({}))
    with keyed_backend(backend) as keyed:
        keyed.set_current_key("k")
        state = keyed.get_or_create_state(descriptor)
        before(state)
        kept = read(state)
        with pytest.raises(TypeError, match="not plain data"):
            refused(state)
        got = read(state)
        assert got == kept, f"{write} of a value the serializer refuses changed the wrapped state: {kept!r} -> {got!r}"


@pytest.mark.requirement("CL-3")
def test_the_bytes_uploaded_are_the_sizes_of_the_segments_written(tmp_path: Any) -> None:
    """The writer counts what it uploads: after three checkpoints, the sizes of every segment they reference."""
    from statecert.conformance.helpers import location_for
    from statecert.reference.heap.backend import HashMapStateBackend
    from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
    from statecert.spec.keyed_backend import CheckpointOptions, SnapshotType

    storage = FileSystemCheckpointStorage(tmp_path.as_uri())
    backend = ChangelogStateBackend(HashMapStateBackend(), changelog_settings({}))
    segments: dict[tuple[int, int], int] = {}
    with keyed_backend(backend) as keyed:
        state = keyed.get_or_create_state(ValueStateDescriptor("v"))
        for checkpoint_id in (1, 2, 3):
            for key in range(20):
                keyed.set_current_key(f"k{key}")
                state.update("x" * (key + checkpoint_id))
            options = CheckpointOptions(SnapshotType.CHECKPOINT)
            handle = keyed.snapshot(checkpoint_id, 0, location_for(storage, checkpoint_id), options).run()
            keyed.notify_checkpoint_complete(checkpoint_id)
            segments |= {(s.from_sequence, s.to_sequence): s.delegate.size for s in handle.changelog}
        uploaded = keyed.changelog_bytes_uploaded
    assert segments and uploaded == sum(segments.values()), (
        f"CL-3: changelog_bytes_uploaded after 3 checkpoints: expected {sum(segments.values())} (segments {segments}), "
        f"got {uploaded}"
    )
