"""Fixtures of statecert's own tests: checkpoint directories on the file systems we test, storage, a fault
injector. (The backend contract tests live in the shipped conformance suite, `conformance/suite/`.)"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from hypothesis import HealthCheck, settings

from statecert.reference.storage.filesystem import FileSystemCheckpointStorage

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


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
def faulty_fs() -> Iterator[Any]:
    fs = fsspec.filesystem("faulty")
    fs.clear_faults()
    yield fs
    fs.clear_faults()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for the whole test session (local[2] with task retries, UI off)."""
    from statecert.scenarios.spark.session import spark_session

    session = spark_session()
    yield session
    session.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write the reader fuzz tallies where `STATECERT_FUZZ_REPORT` says (tox -e fuzz)."""
    from tests.fuzz_support import write_report

    write_report()
