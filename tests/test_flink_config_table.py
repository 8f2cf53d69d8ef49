"""Configurations run through statecert's loader with Flink 2.x's outcome as the expected value (LD-3, LD-6..LD-9).
The outcomes are Flink facts, read from `StateBackendLoader`, `CheckpointStorageLoader`,
`FileSystemCheckpointStorage.createFromConfig` and the option classes of Flink 2.x. Where statecert deliberately
differs, the row says so and why, and the test holds statecert to its documented outcome."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from statecert.reference.changelog.backend import ChangelogStateBackend
from statecert.reference.loader import load_checkpoint_storage, load_state_backend
from statecert.spec.errors import StateCertError

D, D2, S = "memory://flink/checkpoints", "memory://flink/old-checkpoints", "memory://flink/savepoints"


def outcome(config: dict[str, str]) -> dict[str, Any]:
    """What the loaders make of `config`: backend, wrapping, incremental, storage, its directories and threshold;
    or the documented error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            backend: Any = load_state_backend(job_config=config)
            storage: Any = load_checkpoint_storage(job_config=config)
        except StateCertError as exc:
            return {"error": type(exc).__name__}
    inner = backend.delegate if isinstance(backend, ChangelogStateBackend) else backend
    return {
        "backend": inner.name,
        "changelog": isinstance(backend, ChangelogStateBackend),
        "incremental": bool(getattr(inner, "incremental", False)),
        "storage": storage.name,
        "dir": storage.checkpoint_dir,
        "savepoint_dir": storage.savepoint_dir,
        "threshold": getattr(storage, "file_state_size_threshold", None),
        "timers": getattr(getattr(inner, "settings", None), "timer_service_factory", None),
    }


# (configuration, Flink 2.x's outcome, statecert's outcome where it deliberately differs, why)
ROWS: list[tuple[dict[str, str], dict[str, Any], dict[str, Any] | None, str]] = [
    ({}, {"backend": "hashmap", "storage": "jobmanager", "dir": None}, None, ""),
    ({"execution.checkpointing.dir": D}, {"storage": "filesystem", "dir": D}, None, ""),
    ({"state.checkpoints.dir": D}, {"storage": "filesystem", "dir": D}, None, ""),
    ({"state.backend.fs.checkpointdir": D}, {"storage": "filesystem", "dir": D}, None, ""),
    ({"execution.checkpointing.dir": D, "state.checkpoints.dir": D2}, {"dir": D}, None, ""),
    ({"execution.checkpointing.storage": "filesystem"}, {"error": "IllegalConfigurationError"}, None, ""),
    ({"execution.checkpointing.storage": "jobmanager"}, {"storage": "jobmanager", "dir": None}, None, ""),
    (
        {"execution.checkpointing.storage": "jobmanager", "execution.checkpointing.dir": D},
        {"storage": "jobmanager", "dir": D},
        None,
        "",
    ),
    (
        {"execution.checkpointing.storage": "jobmanager", "state.checkpoints.dir": D},
        {"storage": "jobmanager", "dir": D},
        None,
        "",
    ),
    (
        {"state.checkpoint-storage": "filesystem", "state.checkpoints.dir": D},
        {"storage": "filesystem", "dir": D},
        None,
        "",
    ),
    (
        {"execution.checkpointing.storage": "FileSystem", "execution.checkpointing.dir": D},
        {"storage": "filesystem"},
        None,
        "",
    ),
    (
        {
            "execution.checkpointing.storage": "jobmanager",
            "state.checkpoint-storage": "filesystem",
            "execution.checkpointing.dir": D,
        },
        {"storage": "jobmanager"},
        None,
        "",
    ),
    (
        {"execution.checkpointing.storage": "com.example.NoSuchStorageFactory"},
        {"error": "DynamicCodeLoadingException"},
        {"error": "UnknownStateBackendError"},
        "statecert names storages by entry point or module:attr, not Java class; an unknown one is LD-4's error",
    ),
    ({"state.backend.type": "rocksdb"}, {"backend": "rocksdb"}, None, ""),
    ({"state.backend.type": "ROCKSDB"}, {"backend": "rocksdb"}, None, ""),
    ({"state.backend.type": "HashMap"}, {"backend": "hashmap"}, None, ""),
    ({"state.backend": "rocksdb"}, {"backend": "rocksdb"}, None, ""),
    ({"state.backend.type": "hashmap", "state.backend": "rocksdb"}, {"backend": "hashmap"}, None, ""),
    (
        {"state.backend.type": "jobmanager"},
        {"error": "DynamicCodeLoadingException"},
        {"error": "UnknownStateBackendError"},
        "removed in Flink 2.0, Flink looks for a class named 'jobmanager'; statecert names the replacement (LD-8)",
    ),
    (
        {"state.backend.type": "filesystem"},
        {"error": "DynamicCodeLoadingException"},
        {"error": "UnknownStateBackendError"},
        "as above",
    ),
    ({"state.backend.type": "rocksdb", "execution.checkpointing.incremental": "true"}, {"incremental": True}, None, ""),
    ({"state.backend.type": "rocksdb", "state.backend.incremental": "true"}, {"incremental": True}, None, ""),
    (
        {
            "state.backend.type": "rocksdb",
            "execution.checkpointing.incremental": "false",
            "state.backend.incremental": "true",
        },
        {"incremental": False},
        None,
        "",
    ),
    (
        {"execution.checkpointing.dir": D, "execution.checkpointing.data-inline-threshold": "1kb"},
        {"threshold": 1024},
        None,
        "",
    ),
    (
        {"execution.checkpointing.dir": D, "state.storage.fs.memory-threshold": "100 bytes"},
        {"threshold": 100},
        None,
        "",
    ),
    ({"execution.checkpointing.dir": D, "state.backend.fs.memory-threshold": "2kb"}, {"threshold": 2048}, None, ""),
    ({"execution.checkpointing.dir": D}, {"threshold": 20 * 1024}, None, ""),
    (
        {"execution.checkpointing.dir": D, "execution.checkpointing.data-inline-threshold": "2mb"},
        {"threshold": 20 * 1024},
        {"error": "IllegalConfigurationError"},
        "Flink logs a warning and uses the default; statecert refuses a value it would not use (LD-6)",
    ),
    (
        {"execution.checkpointing.dir": D, "execution.checkpointing.savepoint-dir": S},
        {"savepoint_dir": S},
        None,
        "",
    ),
    ({"execution.checkpointing.dir": D, "state.savepoints.dir": S}, {"savepoint_dir": S}, None, ""),
    ({"state.changelog.enabled": "true"}, {"changelog": True, "backend": "hashmap"}, None, ""),
    ({"state.backend.changelog.enabled": "true"}, {"changelog": True}, None, ""),
    ({"state.changelog.enabled": "false", "state.backend.changelog.enabled": "true"}, {"changelog": False}, None, ""),
    (
        {"state.backend.type": "rocksdb", "state.backend.rocksdb.timer-service.factory": "heap"},
        {"timers": "HEAP"},
        None,
        "",
    ),
]


@pytest.mark.requirement("LD-3", "LD-6", "LD-7", "LD-8", "LD-9")
@pytest.mark.parametrize(("config", "flink", "ours", "why"), ROWS, ids=[str(i) for i in range(len(ROWS))])
def test_statecert_loads_as_flink_2_does(
    config: dict[str, str], flink: dict[str, Any], ours: dict[str, Any] | None, why: str
) -> None:
    expected = ours if ours is not None else flink
    got = outcome(config)
    shown = {key: got.get(key) for key in expected}
    assert shown == expected, f"{config}: Flink 2.x gives {flink}; expected {expected} ({why or 'as Flink'}), got {got}"


def test_the_table_holds_34_configurations() -> None:
    assert len(ROWS) == 34, len(ROWS)
