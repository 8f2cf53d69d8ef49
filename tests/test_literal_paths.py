"""`literal_paths` removes and moves exactly the paths it is given, on the local and the in-memory file system (bare
and under the fault-injecting wrapper), where fsspec's own `rm` and `mv` expand `*`, `?` and `[...]` (CS-1)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from statecert.reference.storage.literal_paths import move_file, move_tree, remove_tree

NAMES = {"a*b": "aXb", "ck[1]": "ck1", "a?b": "aXb", "a b": "a%20b"}  # a name, and a sibling a pattern would match


@pytest.fixture(params=["file", "memory", "faulty+memory", "faulty+file"])
def root(request: Any, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    """A file system and a fresh directory on it: the local one, the in-memory one, and both under the
    fault-injecting wrapper (a `DirFileSystem`, as `faulty+s3://` is; over the local disk, a file system fsspec's
    generic calls expand patterns on that, like HDFS or SFTP, needs a directory before a file in it)."""
    fs = fsspec.filesystem(request.param)
    base = str(tmp_path) if request.param.endswith("file") else f"/literal-{uuid.uuid4().hex}"
    yield fs, base
    if not request.param.endswith("file") and fs.exists(base):
        remove_tree(fs, base)


def tree(fs: Any, base: str) -> list[str]:
    return sorted(p[len(base) :] for p in fs.find(base))


def make(fs: Any, base: str, name: str) -> None:
    fs.makedirs(f"{base}/{name}/sub", exist_ok=True)
    fs.makedirs(f"{base}/{name}/empty", exist_ok=True)
    fs.pipe_file(f"{base}/{name}/f", name.encode())
    fs.pipe_file(f"{base}/{name}/sub/g", name.encode())


@pytest.mark.parametrize("name", sorted(NAMES))
def test_remove_tree_removes_that_directory_only(root: tuple[Any, str], name: str) -> None:
    fs, base = root
    make(fs, base, name)
    make(fs, base, NAMES[name])
    remove_tree(fs, f"{base}/{name}")
    remove_tree(fs, f"{base}/{name}")  # absent: nothing
    sibling = NAMES[name]
    assert tree(fs, base) == [f"/{sibling}/f", f"/{sibling}/sub/g"], f"remove_tree({name!r}) left {tree(fs, base)}"
    assert not fs.exists(f"{base}/{name}"), f"remove_tree({name!r}) left the directory"


@pytest.mark.parametrize("name", sorted(NAMES))
def test_moves_take_the_paths_as_named(
    root: tuple[Any, str], name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs, base = root
    elsewhere = tmp_path / "working-directory"  # nothing may be written outside the paths given
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    make(fs, base, name)
    make(fs, base, NAMES[name])
    move_file(fs, f"{base}/{name}/f", f"{base}/{name}/moved")
    move_tree(fs, f"{base}/{name}", f"{base}/to {name}")
    sibling = NAMES[name]
    expected = sorted([f"/{sibling}/f", f"/{sibling}/sub/g", f"/to {name}/moved", f"/to {name}/sub/g"])
    assert tree(fs, base) == expected, f"moving {name!r}: expected {expected}, got {tree(fs, base)}"
    with fs.open(f"{base}/to {name}/moved", "rb") as f:
        assert f.read() == name.encode(), f"the file moved out of {name!r} holds another's bytes"
    assert fs.isdir(f"{base}/to {name}/empty"), f"moving {name!r} lost its empty directory"
    assert list(elsewhere.iterdir()) == [], f"moving {name!r} wrote {list(elsewhere.iterdir())} outside its paths"


@pytest.mark.parametrize("name", sorted(NAMES))
def test_remove_tree_removes_a_file_it_is_given(root: tuple[Any, str], name: str) -> None:
    fs, base = root
    make(fs, base, name)
    remove_tree(fs, f"{base}/{name}/f")
    assert tree(fs, base) == [f"/{name}/sub/g"], f"remove_tree({name!r}/f) left {tree(fs, base)}"
