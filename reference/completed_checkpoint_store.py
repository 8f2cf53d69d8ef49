"""The retained completed checkpoints (CKP-1): the newest N are kept; an older one is subsumed, which deletes its
exclusive directory and releases its shared state, `_metadata` first (FMT-13). Savepoints never enter the store
(CKP-3)."""

from __future__ import annotations

from dataclasses import dataclass, field

from statecert.reference.shared_state_registry import SharedStateRegistry
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
        subsumed = []
        while len(self._retained) > self.max_retained:
            oldest = self._retained.pop(0)
            self._discard(oldest)
            subsumed.append(oldest)
        return subsumed

    def add_claimed(self, pointer: str, metadata: CheckpointMetadata) -> None:
        """A snapshot the job started from in CLAIM mode (COORD-13): the job owns it, so it is subsumed and
        discarded like the job's own checkpoints (a claimed savepoint too)."""
        self.registry.register(metadata)
        self._retained.append(CompletedCheckpoint(pointer, metadata))

    def discard_all(self) -> list[CompletedCheckpoint]:
        """Discard every retained checkpoint: a run ended whose retention keeps none (COORD-11)."""
        discarded, self._retained = self._retained, []
        for checkpoint in discarded:
            self._discard(checkpoint)
        return discarded

    def _discard(self, checkpoint: CompletedCheckpoint) -> None:
        # `_metadata` first: a crash at any later point leaves an incomplete checkpoint, never a complete-looking
        # one whose shared files are gone (FMT-13).
        retract_metadata(checkpoint.pointer)
        self.registry.release(checkpoint.metadata)
        remove_directory(checkpoint.pointer)

    @property
    def retained(self) -> list[CompletedCheckpoint]:
        return list(self._retained)

    @property
    def latest(self) -> CompletedCheckpoint | None:
        return self._retained[-1] if self._retained else None
