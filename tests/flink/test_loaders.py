"""LD-1, LD-3, LD-6 to LD-9 asked of Flink 2.3's own loaders in a JVM
(`StateBackendLoader.fromApplicationOrConfigOrDefault`, `CheckpointStorageLoader.load`) over generated job
configurations: which backend (wrapped in the changelog backend or not, incremental or not, its timer service), which
checkpoint storage with which directories and inline threshold, or which error. A difference fails unless
`tests/flink/differences.toml` lists it with its reason."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecert.reference.config.values import parse_memory_size
from statecert.spec.errors import IllegalConfigurationError
from tests.flink.differences import documented_differences
from tests.flink.referee import Referee, hex_text, text_of
from tests.test_flink_config_table import outcome

pytestmark = pytest.mark.flink

BACKENDS = {"HashMapStateBackend": "hashmap", "EmbeddedRocksDBStateBackend": "rocksdb", "ForStStateBackend": "forst"}
STORAGES = {"JobManagerCheckpointStorage": "jobmanager", "FileSystemCheckpointStorage": "filesystem"}
# statecert's documented error for each of Flink's
ERRORS = {
    "org.apache.flink.configuration.IllegalConfigurationException": "IllegalConfigurationError",
    "org.apache.flink.util.DynamicCodeLoadingException": "DynamicCodeLoadingError",
    "java.lang.IllegalArgumentException": "IllegalConfigurationError",
}
DIRS = ("s3://bucket/checkpoints", "hdfs://namenode:8020/flink/checkpoints", "s3://bucket/other", "file:///tmp/ckp")


def _key(*names: str) -> st.SearchStrategy[str]:
    return st.sampled_from(names)


configurations = st.fixed_dictionaries(
    {},
    optional={
        "backend": st.tuples(
            _key("state.backend.type", "state.backend"),
            st.sampled_from(
                ["hashmap", "rocksdb", "HashMap", "ROCKSDB", "jobmanager", "filesystem", "no.such.Factory"]
            ),
        ),
        "storage": st.tuples(
            _key("execution.checkpointing.storage", "state.checkpoint-storage"),
            st.sampled_from(["jobmanager", "filesystem", "FileSystem", "nowhere"]),
        ),
        "dir": st.tuples(
            _key("execution.checkpointing.dir", "state.checkpoints.dir", "state.backend.fs.checkpointdir"),
            st.sampled_from(DIRS),
        ),
        "savepoints": st.tuples(
            _key("execution.checkpointing.savepoint-dir", "state.savepoints.dir"), st.sampled_from(DIRS)
        ),
        "incremental": st.tuples(
            _key("execution.checkpointing.incremental", "state.backend.incremental"),
            st.sampled_from(["true", "false", "TRUE", "yes"]),
        ),
        "changelog": st.tuples(
            _key("state.changelog.enabled", "state.backend.changelog.enabled"), st.sampled_from(["true", "false"])
        ),
        "threshold": st.tuples(
            _key("execution.checkpointing.data-inline-threshold", "state.storage.fs.memory-threshold"),
            st.sampled_from(["0", "20kb", "1mb", "1025kb", "-1", "4096"]),
        ),
        "timers": st.tuples(
            _key("state.backend.rocksdb.timer-service.factory"), st.sampled_from(["HEAP", "ROCKSDB", "heap", "jvm"])
        ),
    },
).map(lambda chosen: dict(chosen.values()))


def flinks_outcome(flink: Referee, config: dict[str, str]) -> dict[str, Any]:
    answer = flink.ask("load", hex_text("\n".join(f"{k}={v}" for k, v in config.items())))
    if answer[0] == "error":
        return {"error": ERRORS.get(answer[1], answer[1])}
    backend, changelog, incremental, storage, directory, savepoints, threshold, timers = answer
    return {
        "backend": BACKENDS.get(backend, backend),
        "changelog": changelog == "true",
        "incremental": incremental == "true",
        "storage": STORAGES.get(storage, storage),
        "dir": None if directory == "-" else text_of(directory),
        "savepoint_dir": None if savepoints == "-" else text_of(savepoints),
        "threshold": None if threshold == "-" else int(threshold),
        "timers": None if timers == "-" else timers,
    }


def _comparable(result: dict[str, Any]) -> dict[str, Any]:
    """Paths as Flink's `Path` prints them (no trailing slash, `file:` URIs with one slash)."""
    out = dict(result)
    for key in ("dir", "savepoint_dir"):
        if isinstance(out.get(key), str):
            out[key] = out[key].rstrip("/").replace("file:///", "file:/")
    if out.get("error") == "UnknownStateBackendError":
        out["error"] = "DynamicCodeLoadingError"  # statecert's subclass for a name nothing registers
    return out


def differences(flink: Referee, config: dict[str, str]) -> dict[str, tuple[Any, Any]]:
    """What statecert's loaders and Flink's make differently of `config`: field -> (statecert's, Flink's)."""
    ours, theirs = _comparable(outcome(config)), _comparable(flinks_outcome(flink, config))
    if "error" not in ours and "error" not in theirs:
        ours = {k: v for k, v in ours.items() if k in theirs}
    return {k: (ours.get(k), theirs.get(k)) for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k)}


def documented_as(config: dict[str, str], differing: dict[str, tuple[Any, Any]]) -> str | None:
    """The documented difference (`differences.toml`) that explains `differing`, if one does."""
    backend = config.get("state.backend.type", config.get("state.backend", ""))
    if backend.lower() == "forst" and differing.get("error", (None,))[0] == "DynamicCodeLoadingError":
        return "loader: the forst state backend"
    threshold = next((v for k, v in config.items() if k.endswith(("inline-threshold", "memory-threshold"))), None)
    if threshold is not None and differing.get("error", (None,))[0] == "IllegalConfigurationError":
        try:
            above = parse_memory_size("threshold", threshold) > 1024 * 1024
        except IllegalConfigurationError:
            above = False
        if above:
            return "loader: an inline threshold above 1 MiB"
    return None


@pytest.mark.requirement("LD-1", "LD-3", "LD-6", "LD-7", "LD-8", "LD-9")
@settings(max_examples=400, deadline=None)
@given(config=configurations)
def test_the_loaders_make_of_a_configuration_what_flinks_make_of_it(flink: Referee, config: dict[str, str]) -> None:
    differing = differences(flink, config)
    explained = documented_as(config, differing) if differing else None
    assert not differing or explained in {d["id"] for d in documented_differences()}, (
        f"LD-1: load_state_backend/load_checkpoint_storage(job_config={config}) vs Flink's StateBackendLoader and "
        f"CheckpointStorageLoader: expected Flink's outcome, got these differing (statecert, Flink): {differing}"
    )


@pytest.mark.requirement("LD-6")
@pytest.mark.parametrize("entry", [d for d in documented_differences() if "example" in d], ids=lambda d: str(d["id"]))
def test_each_documented_loader_difference_still_differs(flink: Referee, entry: dict[str, Any]) -> None:
    config = {str(k): str(v) for k, v in entry["example"].items()}
    differing = differences(flink, config)
    assert differing and documented_as(config, differing) == entry["id"], (
        f"LD-6: tests/flink/differences.toml, {entry['id']!r}: expected its example {config} to differ from Flink as "
        f"documented, got {differing or 'no difference'}: remove the entry"
    )
