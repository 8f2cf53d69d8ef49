"""Recovering the completed checkpoint store from checkpoint storage alone (COORD-8): a restarted coordinator
finds every `chk-N` with a complete `_metadata`, ignores (and deletes) incomplete ones, and continues numbering."""

from __future__ import annotations

import re
from dataclasses import dataclass

import fsspec

from statecert.reference.completed_checkpoint_store import CompletedCheckpointStore
from statecert.reference.format.paths import join_url
from statecert.reference.storage.discard import remove_directory
from statecert.reference.storage.location import load_checkpoint_metadata, resolve_checkpoint_pointer
from statecert.spec.errors import CheckpointNotFoundError, IncompleteCheckpointError, StateCertError
from statecert.spec.storage import CHECKPOINT_DIR_PREFIX, METADATA_FILE_NAME

_CHECKPOINT_DIR = re.compile(rf"^{CHECKPOINT_DIR_PREFIX}(\d+)$")


@dataclass
class RecoveredState:
    store: CompletedCheckpointStore
    next_checkpoint_id: int
    ignored_incomplete: list[str]


def recover_from_storage(job_dir: str, retained: int, unclaimed: str | None = None) -> RecoveredState:
    """The completed checkpoints in `job_dir`. `unclaimed` is the pointer of the snapshot the job started from
    without claiming it (NO_CLAIM), if any: should it lie in `job_dir` (a job restarted under its own job id from its
    own retained checkpoint), it is the user's, and is neither recovered nor deleted (COORD-8)."""
    fs, root = fsspec.core.url_to_fs(job_dir)
    users = _directory_path(unclaimed) if unclaimed is not None else None  # None: not there (any more)
    store = CompletedCheckpointStore(retained)
    highest = 0
    complete: list[tuple[int, str]] = []
    incomplete: list[str] = []
    if fs.exists(root):
        for entry in fs.ls(root, detail=False):
            name = entry.rstrip("/").rsplit("/", 1)[-1]
            match = _CHECKPOINT_DIR.match(name)
            if match is None or entry.rstrip("/") == users:
                continue
            checkpoint_id = int(match.group(1))
            highest = max(highest, checkpoint_id)
            pointer = join_url(job_dir, name)
            if fs.exists(f"{entry.rstrip('/')}/{METADATA_FILE_NAME}"):
                complete.append((checkpoint_id, pointer))
            else:
                incomplete.append(pointer)
                remove_directory(pointer)
    for _, pointer in sorted(complete):
        try:
            store.add(pointer, load_checkpoint_metadata(pointer))
        except StateCertError:
            incomplete.append(pointer)
    return RecoveredState(store, highest + 1, incomplete)


def _directory_path(pointer: str) -> str | None:
    """The file-system path of the directory a complete checkpoint's pointer names; None when there is none."""
    try:
        directory = resolve_checkpoint_pointer(pointer).directory
    except (CheckpointNotFoundError, IncompleteCheckpointError):
        return None
    path: str = fsspec.core.url_to_fs(directory)[1]
    return path.rstrip("/")
