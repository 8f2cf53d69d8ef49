"""The retained completed checkpoints (CKP-1): the newest N are kept; an older one is subsumed, which deletes its
exclusive directory, `_metadata` first (FMT-13), and each addition deletes the shared files no checkpoint since the
oldest retained one used (CKP-2). Savepoints never enter the store (CKP-3)."""

from __future__ import annotations

from dataclasses import dataclass, field

from statecert.reference.shared_state_registry import SharedStateRegistry, shared_files
from statecert.reference.storage.discard import remove_directory, retract_metadata
from statecert.spec.metadata import CheckpointMetadata


@dataclass(frozen=True)
class CompletedCheckpoint:
    pointer: str
    metadata: CheckpointMetadata


@dataclass
class CompletedCheckpointStore:
    max_retained: int = 1
    registry: SharedStateRegistry = field(default_factory=SharedStateRegistry)
    _retained: list[CompletedCheckpoint] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.max_retained < 1:
            raise ValueError(f"execution.checkpointing.num-retained must be at least 1, got {self.max_retained}")

    def add(self, pointer: str, metadata: CheckpointMetadata) -> list[CompletedCheckpoint]:
        """Retain a completed checkpoint; returns the checkpoints it subsumed."""
        if metadata.kind.is_savepoint:
            raise ValueError("savepoints are never retained or subsumed with checkpoints (CKP-3)")
        self.registry.register(metadata)
        self._retained.append(CompletedCheckpoint(pointer, metadata))
        return self._subsume()

    def _subsume(self) -> list[CompletedCheckpoint]:
        """Discard the oldest checkpoints beyond the retained count; returns them."""
        subsumed = []
        while len(self._retained) > self.max_retained:
            subsumed.append(self._retained.pop(0))
        self._discard(subsumed)
        return subsumed

    def add_claimed(self, pointer: str, metadata: CheckpointMetadata) -> list[CompletedCheckpoint]:
        """A snapshot the job started from in CLAIM mode (COORD-13): the job owns it, so it is subsumed and
        discarded like the job's own checkpoints (a claimed savepoint too). It is older than every checkpoint of the
        job (their ids go on from its id), so it is retained as the oldest, or discarded at once when a coordinator
        recovered with checkpoints of its own (COORD-8) has no room left for it; one the store retains already (a
        checkpoint of the job's own directory, which recovery found) is not retained twice. Returns what it
        subsumed."""
        if any(c.metadata.checkpoint_id == metadata.checkpoint_id for c in self._retained):
            return []
        self.registry.register(metadata)
        self._retained.insert(0, CompletedCheckpoint(pointer, metadata))
        return self._subsume()

    def discard_all(self) -> list[CompletedCheckpoint]:
        """Discard every retained checkpoint: a run ended whose retention keeps none (COORD-11)."""
        discarded, self._retained = self._retained, []
        self._discard(discarded)
        return discarded

    def _discard(self, checkpoints: list[CompletedCheckpoint]) -> None:
        """Delete `checkpoints`, no longer retained, and the shared files nothing since the oldest retained
        checkpoint used: `_metadata` first, so that a crash at any later point leaves incomplete checkpoints, never a
        complete-looking one whose shared files are gone (FMT-13)."""
        for checkpoint in checkpoints:
            retract_metadata(checkpoint.pointer)
        self.registry.unregister_unused(self._retained[0].metadata.checkpoint_id if self._retained else None)
        for checkpoint in checkpoints:
            remove_directory(checkpoint.pointer)

    @property
    def retained(self) -> list[CompletedCheckpoint]:
        return list(self._retained)

    def shared_files(self) -> set[str]:
        """URLs of the shared-scope files the retained checkpoints reference."""
        return set().union(*(shared_files(c.metadata) for c in self._retained))

    @property
    def latest(self) -> CompletedCheckpoint | None:
        return self._retained[-1] if self._retained else None
