"""The authoring kit's hooks and helpers keep their names from before the kit was public for a deprecation period:
a backend written on them still loads, snapshots and restores, and is told, by a DeprecationWarning naming the
replacement, what to rename (CHANGELOG.md; removed no earlier than 0.4.0)."""

from __future__ import annotations

from typing import Any

import pytest

from statecert.reference.authoring import KeyedStateBackendBase
from statecert.reference.heap.keyed_backend import HeapKeyedStateBackend
from statecert.reference.keyed_backend_base import RENAMED_HELPERS, RENAMED_HOOKS
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.state import ValueStateDescriptor

COUNT = ValueStateDescriptor("count", serializer=LongSerializer())


def parameters(restore: tuple[Any, ...] = ()) -> KeyedBackendParameters[Any]:
    return KeyedBackendParameters("job", "op", StringSerializer(), 8, KeyGroupRange(0, 7), restore_state=restore)


def old_style_backend() -> type[HeapKeyedStateBackend]:
    """A backend as adapters were written before the kit was public: it overrides `_create_store` and
    `_release`, and calls `_check_open` and `_track`."""
    with pytest.warns(DeprecationWarning) as caught:

        class OldStyle(HeapKeyedStateBackend):
            created: list[str] = []
            released = False

            def _create_store(self, meta: Any) -> Any:
                OldStyle.created.append(meta.name)
                return HeapKeyedStateBackend.create_store(self, meta)

            def _release(self) -> None:
                OldStyle.released = True

            def snapshot(self, *args: Any, **kwargs: Any) -> Any:
                self._check_open()
                return self._track(super().snapshot(*args, **kwargs))

    said = sorted(str(w.message) for w in caught)
    assert any("_create_store is deprecated: rename it to create_store" in s for s in said), said
    assert any("_release is deprecated: rename it to release_resources" in s for s in said), said
    return OldStyle


def test_a_backend_on_the_old_hook_names_still_snapshots_and_restores(tmp_path: Any) -> None:
    backend_class = old_style_backend()
    location = FileSystemCheckpointStorage(str(tmp_path)).create_checkpoint_storage("job")
    backend = backend_class(parameters())
    backend.set_current_key("k")
    backend.get_or_create_state(COUNT).update(7)
    with pytest.warns(DeprecationWarning) as caught:
        handle = backend.snapshot(1, 0, location.initialize_location_for_checkpoint(1)).run()
    said = sorted(str(w.message) for w in caught)
    for old, new in (("_check_open", "check_open"), ("_track", "track_snapshot")):
        assert any(f"{old} is deprecated: call {new}" in s for s in said), f"snapshot(): expected a warning, got {said}"
    backend.dispose()
    assert backend_class.released, "dispose(): expected the old `_release` hook called as release_resources"
    restored = backend_class(parameters())
    with pytest.warns(DeprecationWarning, match="_restore is deprecated: call restore_handles"):
        restored._restore((handle,))
    restored.set_current_key("k")
    got = restored.get_or_create_state(COUNT).value()
    assert got == 7, f"_restore((handle,)) then value() of key k: expected 7, got {got}"
    assert "count" in backend_class.created, (
        f"expected the old `_create_store` hook called, got {backend_class.created}"
    )
    restored.dispose()


def test_every_renamed_name_is_still_on_the_base_class() -> None:
    for new in {**RENAMED_HOOKS, **RENAMED_HELPERS}.values():
        assert hasattr(KeyedStateBackendBase, new), f"KeyedStateBackendBase.{new}: expected the current name"
    missing = [old for old in RENAMED_HELPERS if not hasattr(KeyedStateBackendBase, old)]
    assert not missing, f"KeyedStateBackendBase: expected the deprecated helpers {missing} until 0.4.0"
