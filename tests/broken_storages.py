"""Deliberately broken checkpoint storages, one bug each, for checking that `statecert certify
--storage-under-test` catches them. Each is a factory usable as `tests.broken_storages:<name>`; `CAUGHT_BY` names
the requirement whose test must fail."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import fsspec

from statecert.reference.format import metadata_codec, paths
from statecert.reference.format.metadata_codec import encode_metadata
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.jobmanager import JobManagerCheckpointStorage
from statecert.reference.storage.location import CheckpointStorageLocationImpl, load_checkpoint_metadata


# 1. `_metadata` written in place: a write that fails half way leaves a torn file that looks complete.
class _InPlaceLocation(CheckpointStorageLocationImpl):
    def write_metadata(self, metadata: Any) -> str:
        fs, directory = fsspec.core.url_to_fs(self.directory)
        fs.makedirs(directory, exist_ok=True)
        with fs.open(f"{directory.rstrip('/')}/_metadata", "wb") as out:
            out.write(encode_metadata(metadata, self.directory))
        return self.pointer


class _InPlaceStorage(FileSystemCheckpointStorage):
    def create_checkpoint_storage(self, job_id: str) -> Any:
        access = super().create_checkpoint_storage(job_id)
        original = access.initialize_location_for_checkpoint

        def initialize(checkpoint_id: int) -> Any:
            location = original(checkpoint_id)
            location.__class__ = _InPlaceLocation
            return location

        access.initialize_location_for_checkpoint = initialize  # type: ignore[method-assign]
        return access


# 2. Job-manager storage that declares a maximum state size and never enforces it.
class _UnboundedJobManager(JobManagerCheckpointStorage):
    def create_checkpoint_storage(self, job_id: str) -> Any:
        access = super().create_checkpoint_storage(job_id)
        access._max_state_size = None
        return access


# 3. A `_metadata` reader that resolves handle paths without confining them to the checkpoint directory.
class _FollowsAnyPath(FileSystemCheckpointStorage):
    def load_checkpoint(self, pointer: str) -> Any:
        original = metadata_codec.resolve_relative
        metadata_codec.resolve_relative = lambda rel, directory, root, path: paths.join_url(directory, rel)
        try:
            return load_checkpoint_metadata(pointer)
        finally:
            metadata_codec.resolve_relative = original


def metadata_in_place(config: Mapping[str, object]) -> Any:
    return _InPlaceStorage.from_config(config)


def ignores_max_state_size(config: Mapping[str, object]) -> Any:
    return _UnboundedJobManager.from_config(config)


def follows_paths_outside(config: Mapping[str, object]) -> Any:
    return _FollowsAnyPath.from_config(config)


CAUGHT_BY = {
    "metadata_in_place": "FMT-7",
    "ignores_max_state_size": "CS-7",
    "follows_paths_outside": "FMT-10",
}
