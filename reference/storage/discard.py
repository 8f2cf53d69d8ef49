"""Deleting a checkpoint so that it is complete or visibly incomplete at every instant (FMT-13): `_metadata` goes
first, because a directory without it is an incomplete checkpoint that recovery ignores and deletes (FMT-5,
COORD-8); only then its state files and directory. Deleting in listing order instead can leave a `_metadata`
whose state files are gone: a checkpoint that looks complete and does not restore."""

from __future__ import annotations

import fsspec

from statecert.reference.storage.literal_paths import remove_tree
from statecert.spec.storage import METADATA_FILE_NAME


def remove_file(url: str) -> None:
    """Delete the file at `url`, if there is one."""
    fs, path = fsspec.core.url_to_fs(url)
    if fs.exists(path):
        fs.rm_file(path)


def retract_metadata(directory_url: str) -> None:
    """Delete the `_metadata` of a checkpoint directory, if any: from now on it is incomplete."""
    fs, directory = fsspec.core.url_to_fs(directory_url)
    metadata = f"{directory.rstrip('/')}/{METADATA_FILE_NAME}"
    if fs.exists(metadata):
        fs.rm_file(metadata)


def remove_directory(directory_url: str) -> None:
    """Delete what is left of a checkpoint directory whose `_metadata` is already gone."""
    fs, directory = fsspec.core.url_to_fs(directory_url)
    remove_tree(fs, directory)


def discard_checkpoint_directory(directory_url: str) -> None:
    """`_metadata` first, then everything else in the directory."""
    retract_metadata(directory_url)
    remove_directory(directory_url)
