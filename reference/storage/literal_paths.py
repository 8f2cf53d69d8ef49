"""File system operations that take a path literally. fsspec's generic `rm`, `mv` and `copy` expand glob patterns
(`*`, `?`, `[...]`) in the paths they are given (its local file system aside), so on `memory://`, `s3://` and the
other file systems removing `.../a*b` removes a sibling `aXb` too, and `.../ck[1]` is never found. A checkpoint
directory may be named with those characters (CS-1), so storage code removes and moves only through these."""

from __future__ import annotations

from typing import Any

from fsspec.implementations.local import LocalFileSystem


def remove_tree(fs: Any, path: str) -> None:
    """Delete the file `path`, or the directory `path` with everything under it; nothing when it is absent."""
    if not fs.exists(path):
        return
    if fs.isfile(path):
        fs.rm_file(path)
        return
    if isinstance(fs, LocalFileSystem):  # its rm is literal: one rmtree
        fs.rm(path, recursive=True)
        return
    entries = fs.find(path, withdirs=True, detail=True)
    for name, info in entries.items():
        if info["type"] != "directory":
            fs.rm_file(name)
    directories = {name for name, info in entries.items() if info["type"] == "directory"} | {path.rstrip("/")}
    for directory in sorted(directories, key=len, reverse=True):  # the deepest first
        if fs.exists(directory):
            fs.rmdir(directory)


def move_file(fs: Any, source: str, target: str) -> None:
    """Move one file: an atomic rename on the local file system, a copy and a delete elsewhere (as fsspec's own
    `mv` does there)."""
    if isinstance(fs, LocalFileSystem):
        fs.mv(source, target)
        return
    fs.cp_file(source, target)
    fs.rm_file(source)


def move_tree(fs: Any, source: str, target: str) -> None:
    """Move the directory `source`, with everything under it, to `target`."""
    if isinstance(fs, LocalFileSystem):
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
