"""The savepoints the hostile corpus damages, and a reader of their whole state: what a correct restore gives.

`build(target, backend)` writes a savepoint of operator `op` at parallelism 2, max parallelism 128: keys `w0`..`w39`
(strings) with value state `count` = i (long), list state `seen` = [i, 2i] and map state `tags` = {"a": i}; each
subtask has split list state `offsets` = [its index]. Every stream is a file (no inline state), so every file can
be damaged. `hashmap` writes a canonical savepoint, `rocksdb` a native one.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from statecert.reference.checkpointing import create_subtasks, take_snapshot
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.rocksdb.backend import EmbeddedRocksDBStateBackend
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.location import CheckpointStorageLocationImpl, load_checkpoint_metadata
from statecert.spec.keygroups import assign_to_key_group, operator_index_for_key_group
from statecert.spec.metadata import CheckpointKind, OperatorState
from statecert.spec.state import VOID_NAMESPACE, ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

KEYS = StringSerializer()
MAX_PARALLELISM = 128
COUNT = ValueStateDescriptor("count", serializer=LongSerializer())
SEEN = ListStateDescriptor("seen", element_serializer=LongSerializer())
TAGS = MapStateDescriptor("tags", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())
OFFSETS = ListStateDescriptor("offsets", element_serializer=LongSerializer())
KIND = {"hashmap": CheckpointKind.SAVEPOINT_CANONICAL, "rocksdb": CheckpointKind.SAVEPOINT_NATIVE}

State = dict[str, Any]


SPEC_ONLY_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spec-only-backend"


def backend(name: str) -> Any:
    """`hashmap`, `rocksdb`, or `spec-only`: the example backend written from the spec alone (a decoder of the
    canonical format that imports nothing from the reference), imported from `examples/spec-only-backend`."""
    if name == "spec-only":
        if str(SPEC_ONLY_EXAMPLE) not in sys.path:
            sys.path.insert(0, str(SPEC_ONLY_EXAMPLE))
        return importlib.import_module("spec_only_backend").SpecOnlyStateBackend()
    return HashMapStateBackend() if name == "hashmap" else EmbeddedRocksDBStateBackend()


def expected_state() -> State:
    """What `build` writes, as `read_state` returns it."""
    return {
        "count": {f"w{i}": i for i in range(40)},
        "seen": {f"w{i}": [i, 2 * i] for i in range(40)},
        "tags": {f"w{i}": {"a": i} for i in range(40)},
        "offsets": [0, 1],
    }


def build(target: Path, backend_name: str) -> str:
    """Write the savepoint into `target` (a fresh directory); returns its pointer."""
    target.mkdir(parents=True)
    subtasks = create_subtasks(backend(backend_name), KEYS, 2, MAX_PARALLELISM, operator_id="op")
    try:
        for i in range(40):
            key = f"w{i}"
            owner = operator_index_for_key_group(MAX_PARALLELISM, 2, assign_to_key_group(KEYS.key_hash(key), 128))
            keyed = subtasks[owner].keyed
            keyed.set_current_key(key)
            keyed.get_or_create_state(COUNT).update(i)
            keyed.get_or_create_state(SEEN).add_all([i, 2 * i])
            keyed.get_or_create_state(TAGS).put("a", i)
        for s in subtasks:
            s.operator.get_list_state(OFFSETS).add(s.index)
        directory = f"file://{target.resolve()}"
        location = CheckpointStorageLocationImpl(7, directory, directory, 0, None)
        return take_snapshot(subtasks, location, 7, MAX_PARALLELISM, operator_id="op", kind=KIND[backend_name])
    finally:
        for s in subtasks:
            s.dispose()


def read_state(pointer: str, backend_name: str, parallelism: int, local_dir: str | None = None) -> State:
    """Every state of operator `op`, restored by `backend_name` at `parallelism` (with `local_dir` as the keyed
    backends' working directory when given) and read back in full."""
    return read_operator(load_checkpoint_metadata(pointer).operator("op"), backend_name, parallelism, local_dir)


def read_operator(
    operator: OperatorState, backend_name: str = "hashmap", parallelism: int = 1, local_dir: str | None = None
) -> State:
    """Every state `build` writes, of `operator`, restored and read back in full (as `read_state`)."""
    subtasks = create_subtasks(
        backend(backend_name),
        KEYS,
        min(parallelism, operator.max_parallelism),
        operator.max_parallelism,
        operator_id="op",
        restore_from=operator,
        local_dir=local_dir,
    )
    state: State = {"count": {}, "seen": {}, "tags": {}, "offsets": []}
    try:
        for s in subtasks:
            count, seen, tags = (s.keyed.get_or_create_state(d) for d in (COUNT, SEEN, TAGS))
            for name, handle, read in (
                ("count", count, lambda h: h.value()),
                ("seen", seen, lambda h: list(h.get())),
                ("tags", tags, lambda h: dict(h.items())),
            ):
                for key in list(s.keyed.get_keys(name, VOID_NAMESPACE)):
                    s.keyed.set_current_key(key)
                    state[name][key] = read(handle)
            state["offsets"].extend(s.operator.get_list_state(OFFSETS).get())
    finally:
        for s in subtasks:
            s.dispose()
    state["offsets"].sort()
    return state
