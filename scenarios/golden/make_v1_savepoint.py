"""How `v1-savepoint/` was made (kept for provenance; the committed bytes are the test, never regenerated in CI).

A canonical savepoint of operator `counts` at parallelism 2, max parallelism 128: key `w<i>` (i < 26) has value
state `count` = i and list state `seen` = [i, i * 2]; subtask s has split list state `offsets` = [s]. Subtask 0
is stored as a file (relative path), subtask 1 inline; `_metadata` is written in format version 1.
Run: python scenarios/golden/make_v1_savepoint.py scenarios/golden/v1-savepoint
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from statecert.reference.checkpointing import create_subtasks
from statecert.reference.format.metadata_codec import encode_metadata
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.location import CheckpointStorageLocationImpl
from statecert.spec.keyed_backend import CheckpointOptions, SnapshotType
from statecert.spec.keygroups import assign_to_key_group, operator_index_for_key_group
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata, OperatorState
from statecert.spec.state import ListStateDescriptor, ValueStateDescriptor

COUNT = ValueStateDescriptor("count", serializer=LongSerializer())
SEEN = ListStateDescriptor("seen", element_serializer=LongSerializer())
OFFSETS = ListStateDescriptor("offsets", element_serializer=LongSerializer())


def main(target: Path, version: int = 1) -> None:
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    keys = StringSerializer()
    subtasks = create_subtasks(HashMapStateBackend(), keys, 2, 128, job_id="golden", operator_id="counts")
    for i in range(26):
        key = f"w{i}"
        owner = operator_index_for_key_group(128, 2, assign_to_key_group(keys.key_hash(key), 128))
        backend = subtasks[owner].keyed
        backend.set_current_key(key)
        backend.get_or_create_state(COUNT).update(i)
        backend.get_or_create_state(SEEN).add_all([i, i * 2])
    for s in subtasks:
        s.operator.get_list_state(OFFSETS).add(s.index)
    directory = f"file://{target.resolve()}"
    options = CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)
    states = {}
    for s in subtasks:
        location = CheckpointStorageLocationImpl(7, directory, directory, 0 if s.index == 0 else 10**9, None)
        states[s.index] = s.snapshot(7, location, options)
    metadata = CheckpointMetadata(7, (OperatorState("counts", 2, 128, states),), CheckpointKind.SAVEPOINT_CANONICAL)
    (target / "_metadata").write_bytes(encode_metadata(metadata, directory, version=version))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
