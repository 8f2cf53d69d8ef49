"""Job-manager checkpoint storage: all state inlined into `_metadata`, bounded by a maximum state size (CS-JM-1..3).

Without a checkpoint directory, metadata lives in this process's fsspec `memory://` file system: it survives a
restore within the process but not a process restart, like Flink's non-durable job-manager storage.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace

from statecert.reference import config as cfg
from statecert.reference.config import catalog
from statecert.reference.format.paths import join_url, normalize_url
from statecert.reference.storage.location import (
    CheckpointStorageAccessImpl,
    load_checkpoint_metadata,
    resolve_checkpoint_pointer,
)
from statecert.spec.errors import IllegalConfigurationError
from statecert.spec.metadata import CheckpointMetadata
from statecert.spec.storage import CompletedCheckpointLocation

DEFAULT_MAX_STATE_SIZE = 5 * 1024 * 1024
"""Flink's JobManagerCheckpointStorage default: 5 MiB of state per subtask."""


@dataclass(frozen=True)
class JobManagerCheckpointStorage:
    max_state_size: int = DEFAULT_MAX_STATE_SIZE
    checkpoint_dir: str | None = None
    savepoint_dir: str | None = None

    name = "jobmanager"

    def __post_init__(self) -> None:
        if self.max_state_size < 1:
            raise IllegalConfigurationError(f"max state size must be positive, got {self.max_state_size}")
        if self.checkpoint_dir is not None:
            object.__setattr__(self, "checkpoint_dir", normalize_url(self.checkpoint_dir))
        if self.savepoint_dir is not None:
            object.__setattr__(self, "savepoint_dir", normalize_url(self.savepoint_dir))

    @property
    def is_durable(self) -> bool:
        return self.checkpoint_dir is not None

    def configure(self, config: Mapping[str, object]) -> JobManagerCheckpointStorage:
        """Unset directories come from configuration; explicit ones win (LD-2)."""
        return replace(
            self,
            checkpoint_dir=self.checkpoint_dir or cfg.read(config, catalog.CHECKPOINTS_DIRECTORY),
            savepoint_dir=self.savepoint_dir or cfg.read(config, catalog.SAVEPOINT_DIRECTORY),
        )

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> JobManagerCheckpointStorage:
        return cls().configure(config)

    def create_checkpoint_storage(self, job_id: str) -> CheckpointStorageAccessImpl:
        base = self.checkpoint_dir or f"memory://statecert-jobmanager/{uuid.uuid4().hex}"
        # Highly available only with a checkpoint directory, as Flink's (CS-14): memory:// ends with the process.
        return CheckpointStorageAccessImpl(
            job_id, join_url(base, job_id), self.savepoint_dir, math.inf, self.max_state_size, self.is_durable
        )

    def resolve_checkpoint(self, pointer: str) -> CompletedCheckpointLocation:
        return resolve_checkpoint_pointer(pointer)

    def load_checkpoint(self, pointer: str) -> CheckpointMetadata:
        return load_checkpoint_metadata(pointer)
