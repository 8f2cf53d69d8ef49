"""Loading the state backend and checkpoint storage from configuration, with Flink's precedence (chapter LD).

Application-defined object > job configuration > cluster configuration > default (LD-1). Names are resolved
through the entry-point groups `statecert.state_backends` / `statecert.checkpoint_storages`, or a
`module:attr` factory path (LD-3). Three documented errors: UnknownStateBackendError for an unknown name,
DynamicCodeLoadingError for code that cannot be loaded, IllegalConfigurationError for invalid settings.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from statecert.reference import config as cfg
from statecert.reference.config import catalog
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.jobmanager import JobManagerCheckpointStorage
from statecert.spec.backend import ConfigurableStateBackend, StateBackend
from statecert.spec.errors import DynamicCodeLoadingError, UnknownStateBackendError

STATE_BACKEND_GROUP = "statecert.state_backends"
CHECKPOINT_STORAGE_GROUP = "statecert.checkpoint_storages"
DEFAULT_STATE_BACKEND = "hashmap"
BUILT_IN_BACKENDS = ("hashmap", "rocksdb")
REMOVED_BACKENDS = {"jobmanager": "jobmanager", "filesystem": "filesystem"}
"""Flink 1.x's legacy backend names, removed in Flink 2.0, with the checkpoint storage that replaces each."""


def registered_names(group: str) -> list[str]:
    return sorted({ep.name for ep in _registered(group)})


def _registered(group: str) -> tuple[EntryPoint, ...]:
    """The entry points of `group` installed on the current `sys.path`."""
    return _entry_points(group, tuple(sys.path))


@functools.lru_cache(maxsize=32)
def _entry_points(group: str, path: tuple[str, ...]) -> tuple[EntryPoint, ...]:
    """Scanning every installed distribution's metadata took a sixth of a certification run, which loads a backend
    for each test; the scan is kept per `sys.path`, as Flink scans its plug-ins once at start-up."""
    return tuple(entry_points(group=group))


def load_factory(name: str, group: str, what: str) -> Callable[[Mapping[str, object]], Any]:
    """An entry point of `group` called `name`, or the object a `module:attr` path names (LD-3, LD-4, LD-5)."""
    matches = [ep for ep in _registered(group) if ep.name == name]
    if matches:
        try:
            factory = matches[0].load()
        except Exception as exc:  # a broken plug-in is reported as such, whatever it raised
            raise DynamicCodeLoadingError(
                f"{what} {name!r}: entry point {matches[0].value} cannot be loaded: {exc}"
            ) from exc
    elif ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
        except Exception as exc:
            raise DynamicCodeLoadingError(
                f"{what} factory {name!r}: module {module_name!r} cannot be imported: {exc}"
            ) from exc
        for part in attr.split("."):
            if not hasattr(target, part):
                raise DynamicCodeLoadingError(f"{what} factory {name!r}: {module_name!r} has no attribute {attr!r}")
            target = getattr(target, part)
        factory = target
    else:
        known = ", ".join(registered_names(group))
        raise UnknownStateBackendError(
            f"unknown {what} {name!r}: known names are {known}; anything else must be a 'module:attr' factory path"
        )
    if not callable(factory):
        raise DynamicCodeLoadingError(f"{what} factory {name!r} is not callable (a {type(factory).__name__})")
    return factory  # type: ignore[no-any-return]


def load_configured_factory(name: str, group: str, what: str) -> Callable[[Mapping[str, object]], Any]:
    """`load_factory` for a factory called with the configuration mapping (LD-3): one whose signature cannot take
    it is a DynamicCodeLoadingError naming it (LD-5), not a TypeError from the call."""
    factory = load_factory(name, group, what)
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a callable without an introspectable signature is given the benefit
        return factory
    try:
        signature.bind({})
    except TypeError as exc:
        raise DynamicCodeLoadingError(
            f"{what} factory {name!r} cannot be called with the configuration as its one argument "
            f"(signature {signature}: {exc}); name a factory taking the configuration mapping"
        ) from exc
    return factory


def _configured_backend_name(config: Mapping[str, object]) -> str:
    """`state.backend.type` (or its 1.x name `state.backend`); built-in names match without regard to case, as in
    Flink's StateBackendLoader."""
    name = cfg.read(config, catalog.STATE_BACKEND)
    if name.lower() in REMOVED_BACKENDS:
        raise UnknownStateBackendError(
            f"{catalog.STATE_BACKEND.key}: {name!r} was removed in Flink 2.0; use 'hashmap' with "
            f"{catalog.CHECKPOINT_STORAGE.key}: {REMOVED_BACKENDS[name.lower()]!r}"
        )
    return name.lower() if name.lower() in BUILT_IN_BACKENDS else name


def load_state_backend(
    app_backend: StateBackend | None = None,
    job_config: Mapping[str, object] | None = None,
    cluster_config: Mapping[str, object] | None = None,
) -> StateBackend:
    """The state backend to use (LD-1): the application's (configured when configurable, LD-2), else
    `state.backend.type` from the job then the cluster configuration, else `hashmap`."""
    config = cfg.merge(job_config, cluster_config)
    cfg.warn_unknown_keys(config)
    return _with_changelog(_load_state_backend(app_backend, config), config)


def _with_changelog(backend: StateBackend, config: Mapping[str, object]) -> StateBackend:
    """Wrapped in the changelog backend when `state.changelog.enabled` (or its 1.x name) is true (CL-1)."""
    from statecert.reference.changelog.backend import ChangelogStateBackend, changelog_settings

    if not cfg.read(config, catalog.CHANGELOG_ENABLED) or isinstance(backend, ChangelogStateBackend):
        return backend
    return ChangelogStateBackend(backend, changelog_settings(config))


def _load_state_backend(app_backend: StateBackend | None, config: Mapping[str, object]) -> StateBackend:
    if app_backend is not None:
        if isinstance(app_backend, ConfigurableStateBackend):
            return app_backend.configure(config)
        return app_backend
    name = _configured_backend_name(config)
    backend = load_configured_factory(name, STATE_BACKEND_GROUP, "state backend")(config)
    if not isinstance(backend, StateBackend):
        raise DynamicCodeLoadingError(
            f"state backend factory {name!r} returned {type(backend).__name__}, not a StateBackend"
        )
    return backend


def load_checkpoint_storage(
    app_storage: Any | None = None,
    job_config: Mapping[str, object] | None = None,
    cluster_config: Mapping[str, object] | None = None,
) -> Any:
    """The checkpoint storage to use (LD-1, LD-7): the application's (configured when it has `configure`), else
    `execution.checkpointing.storage` (1.x: `state.checkpoint-storage`; built-in names in any case), else file
    system storage when a checkpoint directory is set, else job-manager storage, as Flink's CheckpointStorageLoader.
    `filesystem` without a checkpoint directory is an IllegalConfigurationError."""
    config = cfg.merge(job_config, cluster_config)
    cfg.warn_unknown_keys(config)
    if app_storage is not None:
        configure = getattr(app_storage, "configure", None)
        return configure(config) if callable(configure) else app_storage
    name = cfg.read(config, catalog.CHECKPOINT_STORAGE)
    if name is None:
        name = "filesystem" if cfg.read(config, catalog.CHECKPOINTS_DIRECTORY) else "jobmanager"
    if name.lower() == "filesystem":
        return FileSystemCheckpointStorage.from_config(config)
    if name.lower() == "jobmanager":
        return JobManagerCheckpointStorage.from_config(config)
    storage = load_configured_factory(name, CHECKPOINT_STORAGE_GROUP, "checkpoint storage")(config)
    if not callable(getattr(storage, "create_checkpoint_storage", None)):
        raise DynamicCodeLoadingError(f"checkpoint storage factory {name!r} returned {type(storage).__name__}")
    return storage
