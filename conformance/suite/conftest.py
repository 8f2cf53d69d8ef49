"""Fixtures of the conformance suite: the backend under test, the reference backend, storage and a clock."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from statecert.conformance.helpers import LOCAL_DIR
from statecert.conformance.plugin import CertificationSession
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.jobmanager import JobManagerCheckpointStorage
from statecert.spec.state import ManualClock


@pytest.fixture
def certification(statecert_certification: CertificationSession) -> CertificationSession:
    return statecert_certification


@pytest.fixture(autouse=True)
def local_dir(tmp_path: Path) -> Iterator[Path]:
    """Every backend the test creates gets this directory as `KeyedBackendParameters.local_dir` (KB-LOCAL-1)."""
    directory = tmp_path / "local"
    directory.mkdir(exist_ok=True)
    token = LOCAL_DIR.set(str(directory))
    yield directory
    LOCAL_DIR.reset(token)


@pytest.fixture
def state_backend(certification: CertificationSession, tmp_path: Path) -> Any:
    """A fresh instance of the backend under test, working in this test's temporary directory."""
    return certification.new_backend(tmp_path / "local")


@pytest.fixture
def reference_backend() -> Any:
    """statecert's heap backend, the other side of cross-backend tests."""
    return HashMapStateBackend()


@pytest.fixture
def checkpoint_dir(certification: CertificationSession, tmp_path: Path) -> Iterator[str]:
    """A fresh checkpoint directory: local for `filesystem`/`jobmanager`, else under the given fsspec URL."""
    storage = certification.settings.storage
    if storage in ("filesystem", "jobmanager"):
        yield f"file://{tmp_path}/checkpoints"
        return
    url = f"{storage.rstrip('/')}/statecert-{uuid.uuid4().hex}"
    yield url
    fs, path = fsspec.core.url_to_fs(url)
    for leftover in fs.glob(f"{path}*"):  # the directory and its siblings (`-savepoints`, `-explicit`, ...)
        fs.rm(leftover, recursive=True)


@pytest.fixture
def storage_factory(certification: CertificationSession) -> Callable[..., Any]:
    """Makes the run's checkpoint storage for a checkpoint directory URL, with a default savepoint directory beside
    it unless `with_savepoint_dir=False`: the storage under test when one is certified, else the reference storage
    the run was asked to use (file system storage unless told otherwise)."""

    def make(checkpoint_dir: str, *, with_savepoint_dir: bool = True) -> Any:
        if certification.settings.storage_under_test is not None:
            return certification.new_storage(checkpoint_dir, with_savepoint_dir=with_savepoint_dir)
        savepoint_dir = f"{checkpoint_dir}-savepoints" if with_savepoint_dir else None
        if certification.settings.storage == "jobmanager":
            return JobManagerCheckpointStorage(checkpoint_dir=checkpoint_dir, savepoint_dir=savepoint_dir)
        return FileSystemCheckpointStorage(checkpoint_dir, savepoint_dir=savepoint_dir)

    return make


@pytest.fixture
def storage(storage_factory: Callable[[str], Any], checkpoint_dir: str) -> Any:
    """The checkpoint storage of this test (see `storage_factory`)."""
    return storage_factory(checkpoint_dir)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000)
