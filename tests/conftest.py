"""Fixtures: the backends under test, checkpoint directories on every fsspec file system we test, a manual clock."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from hypothesis import HealthCheck, settings

from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.rocksdb.backend import EmbeddedRocksDBStateBackend
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.state import ManualClock

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")

BACKENDS: dict[str, Any] = {
    "hashmap": lambda local_dir: HashMapStateBackend(),
    "rocksdb": lambda local_dir: EmbeddedRocksDBStateBackend(local_dir=local_dir),
    "rocksdb-incremental": lambda local_dir: EmbeddedRocksDBStateBackend(incremental=True, local_dir=local_dir),
}
"""Backend name -> builder taking a local working directory (used by RocksDB)."""


@pytest.fixture(params=sorted(BACKENDS))
def state_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Every reference backend; behaviour tests run once per backend."""
    return BACKENDS[request.param](str(tmp_path / "local"))


@pytest.fixture(params=["file", "memory"])
def checkpoint_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh checkpoint directory URL on a real local directory and on fsspec's in-memory file system."""
    if request.param == "file":
        yield f"file://{tmp_path}/checkpoints"
    else:
        root = f"/statecert-test-{uuid.uuid4().hex}"
        yield f"memory://{root}"
        fs = fsspec.filesystem("memory")
        if fs.exists(root):
            fs.rm(root, recursive=True)


@pytest.fixture
def storage(checkpoint_dir: str) -> FileSystemCheckpointStorage:
    return FileSystemCheckpointStorage(checkpoint_dir, savepoint_dir=f"{checkpoint_dir}-savepoints")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000)


@pytest.fixture
def faulty_fs() -> Iterator[Any]:
    fs = fsspec.filesystem("faulty")
    fs.clear_faults()
    yield fs
    fs.clear_faults()
