"""File-system checkpoint storage on any fsspec URL (CS-FS-1..CS-FS-4)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from statecert.reference import config as cfg
from statecert.reference.config import catalog
from statecert.reference.format.paths import join_url, normalize_url, split_url
from statecert.reference.storage.location import (
    CheckpointStorageAccessImpl,
    load_checkpoint_metadata,
    resolve_checkpoint_pointer,
)
from statecert.spec.errors import IllegalConfigurationError
from statecert.spec.metadata import CheckpointMetadata
from statecert.spec.storage import CompletedCheckpointLocation


@dataclass(frozen=True)
class FileSystemCheckpointStorage:
    """State files and `_metadata` under `checkpoint_dir`; state below `file_state_size_threshold` bytes is
    inlined into `_metadata` (CS-5). Settings left None are taken from configuration by `configure` (LD-2)."""

    checkpoint_dir: str | None = None
    savepoint_dir: str | None = None
    file_state_size_threshold: int | None = None

    name = "filesystem"

    def __post_init__(self) -> None:
        if self.checkpoint_dir is not None:
            object.__setattr__(self, "checkpoint_dir", normalize_url(self.checkpoint_dir))
        if self.savepoint_dir is not None:
            object.__setattr__(self, "savepoint_dir", normalize_url(self.savepoint_dir))
        threshold = self.file_state_size_threshold
        if threshold is not None and not 0 <= threshold <= catalog.MAX_INLINE_THRESHOLD:
            raise IllegalConfigurationError(
                f"{catalog.DATA_INLINE_THRESHOLD.key}: {threshold} bytes is outside 0..{catalog.MAX_INLINE_THRESHOLD} "
                "(Flink warns and uses the default; statecert refuses a value it would not use)"
            )

    def configure(self, config: Mapping[str, object]) -> FileSystemCheckpointStorage:
        """Fill the settings this instance leaves unset from `config`; explicit settings win (LD-2)."""
        return replace(
            self,
            checkpoint_dir=self.checkpoint_dir or cfg.read(config, catalog.CHECKPOINTS_DIRECTORY),
            savepoint_dir=self.savepoint_dir or cfg.read(config, catalog.SAVEPOINT_DIRECTORY),
            file_state_size_threshold=self.file_state_size_threshold
            if self.file_state_size_threshold is not None
            else cfg.read(config, catalog.DATA_INLINE_THRESHOLD),
        )

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> FileSystemCheckpointStorage:
        storage = cls().configure(config)
        if storage.checkpoint_dir is None:
            raise IllegalConfigurationError(
                f"{catalog.CHECKPOINTS_DIRECTORY.key}: file system checkpoint storage needs a checkpoint directory "
                f"(1.x: {catalog.CHECKPOINTS_DIRECTORY.deprecated_keys[0]})"
            )
        return storage

    def create_checkpoint_storage(self, job_id: str) -> CheckpointStorageAccessImpl:
        if self.checkpoint_dir is None:
            raise IllegalConfigurationError(f"{catalog.CHECKPOINTS_DIRECTORY.key}: no checkpoint directory configured")
        threshold = self.file_state_size_threshold
        return CheckpointStorageAccessImpl(
            job_id,
            join_url(self.checkpoint_dir, job_id),
            self.savepoint_dir,
            catalog.DATA_INLINE_THRESHOLD.default if threshold is None else threshold,
            None,
            # Flink's file-system storage is always highly available; fsspec's memory:// ends with the process (CS-14)
            split_url(self.checkpoint_dir)[0] != "memory",
        )

    def resolve_checkpoint(self, pointer: str) -> CompletedCheckpointLocation:
        return resolve_checkpoint_pointer(pointer)

    def load_checkpoint(self, pointer: str) -> CheckpointMetadata:
        return load_checkpoint_metadata(pointer)
