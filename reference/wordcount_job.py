"""The main job: a keyed word count that checkpoints, savepoints and restores at another parallelism.

It exercises the whole foundation the way a stream processor would: records are routed to subtasks by key
group, each subtask counts in keyed state and keeps its source offset in operator state, a checkpoint is taken
mid-stream, a canonical savepoint at the end, and the savepoint is restored at another parallelism and checked
key by key against a plain recount of the input.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from statecert.reference.checkpointing import Subtask, create_subtasks, take_snapshot
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.spec.backend import StateBackend
from statecert.spec.keygroups import assign_to_key_group, operator_index_for_key_group
from statecert.spec.metadata import CheckpointKind
from statecert.spec.state import VOID_NAMESPACE, ListStateDescriptor, ValueStateDescriptor

COUNT = ValueStateDescriptor("count", serializer=LongSerializer())
OFFSETS = ListStateDescriptor("source-offset", element_serializer=LongSerializer())
OPERATOR_ID = "word-count"
KEYS = StringSerializer()


def generate_words(records: int, vocabulary: int, seed: int) -> list[str]:
    """A skewed, reproducible stream of words (Zipf-like)."""
    rng = random.Random(seed)
    words = [f"w{i:05d}" for i in range(vocabulary)]
    weights = [1.0 / (i + 1) for i in range(vocabulary)]
    return rng.choices(words, weights, k=records)


@dataclass
class JobReport:
    records: int
    distinct_keys: int
    parallelism: int
    restored_parallelism: int
    checkpoint_pointer: str
    savepoint_pointer: str
    savepoint_bytes: int
    mismatches: dict[str, tuple[int, int | None]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.mismatches


def run_word_count(
    backend: StateBackend,
    storage: Any,
    *,
    savepoint_dir: str,
    records: int = 100_000,
    vocabulary: int = 5_000,
    parallelism: int = 4,
    restored_parallelism: int = 2,
    max_parallelism: int = 128,
    seed: int = 1,
    job_id: str = "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
    advance: Callable[[int], None] = lambda n: None,
) -> JobReport:
    words = generate_words(records, vocabulary, seed)
    access = storage.create_checkpoint_storage(job_id)
    subtasks = create_subtasks(backend, KEYS, parallelism, max_parallelism, job_id=job_id, operator_id=OPERATOR_ID)
    checkpoint_pointer = ""
    for offset, word in enumerate(words):
        key_group = assign_to_key_group(KEYS.key_hash(word), max_parallelism)
        _process(subtasks[operator_index_for_key_group(max_parallelism, parallelism, key_group)], word, offset)
        if offset == records // 2:
            checkpoint_pointer = take_snapshot(
                subtasks,
                access.initialize_location_for_checkpoint(1),
                1,
                max_parallelism,
                operator_id=OPERATOR_ID,
            )
        if offset % 1000 == 999:
            advance(1000)
    advance(records % 1000)
    savepoint_pointer = take_snapshot(
        subtasks,
        access.initialize_location_for_savepoint(2, savepoint_dir),
        2,
        max_parallelism,
        operator_id=OPERATOR_ID,
        kind=CheckpointKind.SAVEPOINT_CANONICAL,
    )
    for s in subtasks:
        s.dispose()

    operator = storage.load_checkpoint(savepoint_pointer).operator(OPERATOR_ID)
    expected = Counter(words)
    restored: dict[str, int] = {}
    for subtask in create_subtasks(
        backend,
        KEYS,
        restored_parallelism,
        max_parallelism,
        job_id=job_id,
        operator_id=OPERATOR_ID,
        restore_from=operator,
    ):
        count = subtask.keyed.get_or_create_state(COUNT)
        for word in list(subtask.keyed.get_keys(COUNT.name, VOID_NAMESPACE)):
            subtask.keyed.set_current_key(word)
            restored[word] = count.value()
        subtask.dispose()
    mismatches = {w: (n, restored.get(w)) for w, n in expected.items() if restored.get(w) != n} | {
        w: (0, n) for w, n in restored.items() if w not in expected
    }
    return JobReport(
        records,
        len(expected),
        parallelism,
        restored_parallelism,
        checkpoint_pointer,
        savepoint_pointer,
        operator.state_size,
        mismatches,
    )


def _process(subtask: Subtask, word: str, offset: int) -> None:
    """Count the word in keyed state and remember the source offset in operator state."""
    subtask.keyed.set_current_key(word)
    count = subtask.keyed.get_or_create_state(COUNT)
    count.update((count.value() or 0) + 1)
    subtask.operator.get_list_state(OFFSETS).update([offset])
