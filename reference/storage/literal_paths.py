"""File system operations that take a path literally. fsspec's generic `rm`, `mv` and `copy` expand glob patterns
(`*`, `?`, `[...]`) in the paths they are given (its local file system aside), so on `memory://`, `s3://` and the
other file systems removing `.../a*b` removes a sibling `aXb` too, and `.../ck[1]` is never found. A checkpoint
directory may be named with those characters (CS-1), so storage code removes and moves only through these: a path
without them goes to fsspec's own call (one bulk delete on an object store), one with them file by file."""

from __future__ import annotations

import contextlib
import re
from typing import Any

from fsspec.implementations.local import LocalFileSystem

_PATTERN = re.compile(r"[*?\[]")  # what fsspec's `has_magic` looks for


def _expanded(fs: Any, *paths: str) -> bool:
    """Whether fsspec's generic calls would take one of `paths` as a pattern."""
    return not isinstance(fs, LocalFileSystem) and any(_PATTERN.search(path) for path in paths)


def remove_tree(fs: Any, path: str) -> None:
    """Delete the file `path`, or the directory `path` with everything under it; nothing when it is absent."""
    if not fs.exists(path):
        return
    if fs.isfile(path):
        fs.rm_file(path)
        return
    if not _expanded(fs, path):
        fs.rm(path, recursive=True)
        return
    entries = fs.find(path, withdirs=True, detail=True)
    for name, info in entries.items():
        if info["type"] != "directory":
            fs.rm_file(name)
    directories = {name for name, info in entries.items() if info["type"] == "directory"} | {path.rstrip("/")}
    for directory in sorted(directories, key=len, reverse=True):  # the deepest first
        with contextlib.suppress(FileNotFoundError):  # an object store's directory goes with its last file
            if fs.exists(directory):
                fs.rmdir(directory)


def move_file(fs: Any, source: str, target: str) -> None:
    """Move one file: fsspec's `mv` (an atomic rename on the local file system), or a copy and a delete where `mv`
    would take a path as a pattern (as `mv` itself copies and deletes off the local disk)."""
    if not _expanded(fs, source, target):
        fs.mv(source, target)
        return
    fs.cp_file(source, target)
    fs.rm_file(source)


def move_tree(fs: Any, source: str, target: str) -> None:
    """Move the directory `source`, with everything under it, to `target`."""
    if not _expanded(fs, source, target):
        fs.mv(source, target, recursive=True)
        return
    source = source.rstrip("/")
    target = target.rstrip("/")
    for name, info in fs.find(source, withdirs=True, detail=True).items():
        moved = target + name.rstrip("/")[len(source) :]
        if info["type"] == "directory":
            fs.makedirs(moved, exist_ok=True)
        else:
            fs.makedirs(moved.rsplit("/", 1)[0], exist_ok=True)
            fs.cp_file(name, moved)
    remove_tree(fs, source)
