"""The checkpointing job the crash test kills: two keyed subtasks (value, list and map state) take checkpoints 1..5
into `killfs://` file-system storage with two retained (so subsumption and shared-file release run too), and
append each checkpoint id to an acknowledgement log once it is complete and retained: what a user was told is
durable. `expected(n)` is the state after checkpoint n, from a plain-Python model of the same updates.

Run as a child: python -m tests.crash.workload BACKEND WORKDIR  (prints the number of file operations it made)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import fsspec

from statecert.reference.checkpointing import create_subtasks
from statecert.reference.completed_checkpoint_store import CompletedCheckpointStore
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.rocksdb.backend import EmbeddedRocksDBStateBackend
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.keyed_backend import CheckpointOptions, SnapshotType
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata, OperatorState
from tests.crash.killing_fs import COUNTER, KillingFileSystem
from tests.hostile.savepoints import COUNT, KEYS, SEEN, TAGS

CHECKPOINTS = 5
RETAINED = 2
PARALLELISM = 2
MAX_PARALLELISM = 128
BACKENDS = ("hashmap", "rocksdb-incremental")

State = dict[str, dict[str, Any]]


def make_backend(name: str, local_dir: str) -> Any:
    if name == "hashmap":
        return HashMapStateBackend()
    return EmbeddedRocksDBStateBackend(incremental=True, local_dir=local_dir)


def updates(epoch: int) -> list[tuple[str, int]]:
    """(key, number) pairs of one epoch: some keys every epoch, some only now and then (so SST files differ)."""
    return [(f"k{(epoch * 7 + i) % (10 + 5 * epoch)}", epoch * 100 + i) for i in range(40)]


def apply(state: State, key: str, number: int) -> None:
    state["count"][key] = state["count"].get(key, 0) + number
    state["seen"].setdefault(key, []).append(number)
    state["tags"].setdefault(key, {})[f"t{number % 3}"] = number


def expected(checkpoint_id: int) -> State:
    state: State = {"count": {}, "seen": {}, "tags": {}}
    for epoch in range(1, checkpoint_id + 1):
        for key, number in updates(epoch):
            apply(state, key, number)
    return state


def run(backend_name: str, workdir: Path) -> None:
    fsspec.register_implementation("killfs", KillingFileSystem, clobber=True)
    storage = FileSystemCheckpointStorage(f"killfs://{workdir}/checkpoints", file_state_size_threshold=0)
    access = storage.create_checkpoint_storage("job")
    store = CompletedCheckpointStore(RETAINED)
    local = workdir / "local"
    local.mkdir(exist_ok=True)
    subtasks = create_subtasks(make_backend(backend_name, str(local)), KEYS, PARALLELISM, MAX_PARALLELISM)
    acks = open(workdir / "acks", "a", encoding="utf-8")  # noqa: SIM115 - kept open for the whole run
    for checkpoint_id in range(1, CHECKPOINTS + 1):
        for key, number in updates(checkpoint_id):
            backend = next(s.keyed for s in subtasks if key_group(key) in s.keyed.key_group_range)
            backend.set_current_key(key)
            count = backend.get_or_create_state(COUNT)
            count.update((count.value() or 0) + number)
            backend.get_or_create_state(SEEN).add(number)
            backend.get_or_create_state(TAGS).put(f"t{number % 3}", number)
        location = access.initialize_location_for_checkpoint(checkpoint_id)
        options = CheckpointOptions(SnapshotType.CHECKPOINT)
        states = {s.index: s.snapshot(checkpoint_id, location, options) for s in subtasks}
        metadata = CheckpointMetadata(
            checkpoint_id, (OperatorState("op", PARALLELISM, MAX_PARALLELISM, states),), CheckpointKind.CHECKPOINT
        )
        pointer = location.write_metadata(metadata)
        store.add(pointer, metadata)
        for s in subtasks:
            s.keyed.notify_checkpoint_complete(checkpoint_id)
        acks.write(f"{checkpoint_id}\n")
        acks.flush()
        os.fsync(acks.fileno())
    print(COUNTER.count)


def key_group(key: str) -> int:
    from statecert.spec.keygroups import assign_to_key_group

    return assign_to_key_group(KEYS.key_hash(key), MAX_PARALLELISM)


if __name__ == "__main__":
    run(sys.argv[1], Path(sys.argv[2]))
