"""URL arithmetic for checkpoint paths: handles are stored relative to the `_metadata` directory and may never
resolve outside the restore root (FMT-9, FMT-10)."""

from __future__ import annotations

import os
import posixpath
import stat

from statecert.spec.errors import UnsafePathError


def normalize_url(url: str) -> str:
    """`proto://path` with a normalized path; a bare local path becomes `file://` + absolute path."""
    if "://" not in url:
        return "file://" + os.path.abspath(url)
    proto, path = url.split("://", 1)
    norm = posixpath.normpath(path) if path else path
    if path.startswith("//"):
        norm = "/" + norm.lstrip("/")
    return f"{proto}://{norm}"


def split_url(url: str) -> tuple[str, str]:
    proto, path = normalize_url(url).split("://", 1)
    return proto, path


def join_url(base: str, *parts: str) -> str:
    proto, path = split_url(base)
    return normalize_url(f"{proto}://{posixpath.join(path, *parts)}")


def parent_url(url: str) -> str:
    proto, path = split_url(url)
    return f"{proto}://{posixpath.dirname(path.rstrip('/'))}"


def basename_url(url: str) -> str:
    return posixpath.basename(split_url(url)[1].rstrip("/"))


def is_within(url: str, root: str) -> bool:
    proto, path = split_url(url)
    root_proto, root_path = split_url(root)
    return proto == root_proto and (path == root_path or path.startswith(root_path.rstrip("/") + "/"))


def relativize(url: str, directory: str, root: str) -> str:
    """`url` relative to `directory`; raises ValueError when `url` is outside `root` (FMT-9)."""
    if not is_within(url, root):
        raise ValueError(f"state file {url} lies outside {root} and cannot be referenced by this checkpoint")
    return posixpath.relpath(split_url(url)[1], split_url(directory)[1])


def resolve_relative(relative: str, directory: str, root: str, metadata_path: str) -> str:
    """The URL of a relative handle path, refusing anything that escapes `root` (FMT-10): by its string, and on
    the local file system also by its real path, so a symbolic link (in the file's name or any parent directory)
    cannot lead outside, and a special file is refused."""
    if (
        "://" in relative
        or relative.startswith("/")
        or "\\" in relative
        or "\x00" in relative
        or posixpath.normpath(relative) in ("", ".", "..")
        or relative.endswith("/")
    ):
        raise UnsafePathError(metadata_path, f"state handle path {relative!r} is not a relative path to a file")
    url = join_url(directory, relative)
    if not is_within(url, root) or url == normalize_url(root):
        raise UnsafePathError(metadata_path, f"state handle path {relative!r} escapes the checkpoint directory {root}")
    proto, path = split_url(url)
    if proto in ("file", "local"):
        check_local_confinement(path, split_url(root)[1], relative, metadata_path)
    return url


def check_local_confinement(path: str, root: str, relative: str, metadata_path: str) -> None:
    """On a local disk: the real path stays under the real root, and what exists there is a regular file."""
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
        raise UnsafePathError(
            metadata_path, f"state handle path {relative!r} leads outside {root} through a symbolic link"
        )
    if os.path.islink(path):
        raise UnsafePathError(metadata_path, f"state handle path {relative!r} is a symbolic link")
    if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
        raise UnsafePathError(metadata_path, f"state handle path {relative!r} is not a regular file")
