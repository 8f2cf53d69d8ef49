"""Loading backend and storage from configuration (chapter LD)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.loader import load_checkpoint_storage, load_state_backend
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.jobmanager import JobManagerCheckpointStorage
from statecert.spec.errors import DynamicCodeLoadingError, IllegalConfigurationError, UnknownStateBackendError

PLUGIN = """
from statecert.reference.heap.backend import HashMapStateBackend

class NamedBackend(HashMapStateBackend):
    def __init__(self, name, settings=None):
        self.name = name
        self.settings = dict(settings or {})

    def configure(self, config):
        merged = {k: v for k, v in config.items() if k.startswith("custom.")}
        merged.update(self.settings)
        return NamedBackend(self.name, merged)

def factory(config):
    return NamedBackend("from-factory", {k: v for k, v in config.items() if k.startswith("custom.")})

def exploding(config):
    raise RuntimeError("factory failed on purpose")

def not_a_backend(config):
    return 42

NOT_CALLABLE = 7

class TakesNoConfig(HashMapStateBackend):
    pass

def takes_two(config, extra):
    return NamedBackend("two")

class _NoSignature:  # a callable whose signature cannot be introspected (as some C-implemented callables)
    __signature__ = "not a signature"

    def __call__(self, config):
        return NamedBackend("without-signature")

WITHOUT_SIGNATURE = _NoSignature()
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A real third-party distribution on sys.path: a module and a dist-info registering entry points."""
    (tmp_path / "sc_plugin_backend.py").write_text(PLUGIN)
    dist = tmp_path / "sc_plugin_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sc-plugin-backend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent("""
        [statecert.state_backends]
        plugin = sc_plugin_backend:factory
        broken = sc_plugin_backend_missing:factory
        [statecert.checkpoint_storages]
        plugin-storage = statecert.reference.storage.jobmanager:JobManagerCheckpointStorage.from_config
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "sc_plugin_backend"


@pytest.mark.requirement("LD-1")
def test_default_is_hashmap() -> None:
    assert isinstance(load_state_backend(), HashMapStateBackend)


@pytest.mark.requirement("LD-1", "LD-3")
def test_job_config_beats_cluster_config(plugin: str) -> None:
    backend = load_state_backend(
        job_config={"state.backend.type": "plugin"}, cluster_config={"state.backend.type": "hashmap"}
    )
    assert backend.name == "from-factory"
    assert load_state_backend(cluster_config={"state.backend.type": "plugin"}).name == "from-factory"


@pytest.mark.requirement("LD-1", "LD-2")
def test_application_backend_beats_config_and_keeps_its_settings(plugin: str) -> None:
    import sc_plugin_backend  # type: ignore[import-not-found]

    app = sc_plugin_backend.NamedBackend("app", {"custom.a": "app"})
    backend: Any = load_state_backend(
        app, job_config={"state.backend.type": "hashmap", "custom.a": "job", "custom.b": "job"}
    )
    assert backend.name == "app", "the application's backend must win over the configured type"
    assert backend.settings == {"custom.a": "app", "custom.b": "job"}, "explicit settings win, unset ones are filled"
    plain = HashMapStateBackend()
    assert load_state_backend(plain, job_config={"state.backend.type": "plugin"}) is plain


@pytest.mark.requirement("LD-3")
def test_module_attr_factory_path(plugin: str) -> None:
    backend: Any = load_state_backend(job_config={"state.backend.type": f"{plugin}:factory", "custom.x": "1"})
    assert backend.name == "from-factory" and backend.settings == {"custom.x": "1"}


@pytest.mark.requirement("LD-3", "LD-5")
def test_a_factory_whose_signature_cannot_be_read_is_called_with_the_configuration(plugin: str) -> None:
    backend: Any = load_state_backend(job_config={"state.backend.type": f"{plugin}:WITHOUT_SIGNATURE"})
    assert getattr(backend, "name", None) == "without-signature", (
        f"LD-3: load_state_backend(state.backend.type={plugin}:WITHOUT_SIGNATURE), a callable inspect.signature "
        f"cannot read: expected the backend it returns, got {backend!r}"
    )


@pytest.mark.requirement("LD-4")
def test_unknown_name_lists_known_names() -> None:
    with pytest.raises(UnknownStateBackendError, match=r"unknown state backend 'nosuch'.*hashmap"):
        load_state_backend(job_config={"state.backend.type": "nosuch"})


@pytest.mark.requirement("LD-5")
@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module_xyz:factory", "cannot be imported"),
        ("sc_plugin_backend:missing", "has no attribute"),
        ("sc_plugin_backend:NOT_CALLABLE", "not callable"),
        ("sc_plugin_backend:TakesNoConfig", "cannot be called with the configuration as its one argument"),
        ("sc_plugin_backend:takes_two", r"signature \(config, extra\)"),
        ("sc_plugin_backend:not_a_backend", "not a StateBackend"),
        ("broken", "cannot be loaded"),
    ],
)
def test_code_that_cannot_be_loaded(plugin: str, name: str, message: str) -> None:
    with pytest.raises(DynamicCodeLoadingError, match=message):
        load_state_backend(job_config={"state.backend.type": name})


@pytest.mark.requirement("LD-5")
def test_factory_error_propagates(plugin: str) -> None:
    with pytest.raises(RuntimeError, match="factory failed on purpose"):
        load_state_backend(job_config={"state.backend.type": f"{plugin}:exploding"})


@pytest.mark.requirement("LD-6")
@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"state.checkpoint-storage": "filesystem"}, "state.checkpoints.dir"),
        (
            {"state.checkpoints.dir": "/tmp/x", "state.storage.fs.memory-threshold": "lots"},
            "memory-threshold",
        ),
        ({"state.checkpoints.dir": "/tmp/x", "state.storage.fs.memory-threshold": "2gb"}, "memory-threshold"),
        ({"state.backend.type": ""}, "state.backend.type"),
    ],
)
def test_invalid_configuration_names_the_key(config: dict[str, str], key: str) -> None:
    with pytest.raises(IllegalConfigurationError, match=key.replace(".", r"\.")):
        load_state_backend(job_config=config)
        load_checkpoint_storage(job_config=config)


@pytest.mark.requirement("LD-7")
def test_storage_selection(plugin: str, tmp_path: Path) -> None:
    assert isinstance(load_checkpoint_storage(), JobManagerCheckpointStorage)
    fs_storage = load_checkpoint_storage(
        job_config={"state.checkpoints.dir": str(tmp_path), "state.storage.fs.memory-threshold": "1kb"}
    )
    assert isinstance(fs_storage, FileSystemCheckpointStorage) and fs_storage.file_state_size_threshold == 1024
    jm = load_checkpoint_storage(
        job_config={"state.checkpoints.dir": str(tmp_path), "state.checkpoint-storage": "jobmanager"}
    )
    assert isinstance(jm, JobManagerCheckpointStorage) and jm.is_durable
    assert isinstance(
        load_checkpoint_storage(job_config={"state.checkpoint-storage": "plugin-storage"}),
        JobManagerCheckpointStorage,
    )
    app = FileSystemCheckpointStorage(str(tmp_path / "app"))
    chosen = load_checkpoint_storage(
        app, job_config={"state.checkpoints.dir": "/elsewhere", "state.savepoints.dir": str(tmp_path / "sp")}
    )
    assert chosen.checkpoint_dir == app.checkpoint_dir and chosen.savepoint_dir == f"file://{tmp_path}/sp"


@pytest.mark.requirement("LD-8")
@pytest.mark.parametrize("legacy", ["jobmanager", "filesystem", "FileSystem"])
def test_legacy_backend_names_removed_in_flink_2_name_their_replacement(legacy: str, tmp_path: Path) -> None:
    config = {"state.backend.type": legacy, "execution.checkpointing.dir": str(tmp_path)}
    with pytest.raises(UnknownStateBackendError, match=rf"state\.backend\.type: '{legacy}' was removed.*'hashmap'"):
        load_state_backend(job_config=config)
