"""`ChangelogStateBackend`: wraps any state backend (ours or a third party's) with a changelog (chapter CL), as
Flink's `ChangelogStateBackend` does; configured by Flink's `state.changelog.*` keys."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

from statecert.reference import config as cfg
from statecert.reference.changelog.keyed_backend import ChangelogKeyedStateBackend, ChangelogSettings
from statecert.spec.backend import BackendCapabilities, StateBackend
from statecert.spec.errors import IllegalConfigurationError
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.operator_backend import OperatorBackendParameters, OperatorStateBackend

CHANGELOG_ENABLED = "state.changelog.enabled"
CHANGELOG_ENABLED_DEPRECATED = "state.backend.changelog.enabled"
CHANGELOG_STORAGE = "state.changelog.storage"
MATERIALIZE_INTERVAL = "state.changelog.periodic-materialize.interval"
MAX_FAILURES = "state.changelog.max-failures-allowed"
DSTL_BASE_PATH = "state.changelog.dstl.dfs.base-path"
DSTL_BASE_PATH_DEPRECATED = "dstl.dfs.base-path"


def changelog_enabled(config: Mapping[str, object]) -> bool:
    """`state.changelog.enabled`, or its 1.x name; the current name wins when both are set."""
    if config.get(CHANGELOG_ENABLED) is not None:
        return cfg.get_bool(config, CHANGELOG_ENABLED, False)
    if config.get(CHANGELOG_ENABLED_DEPRECATED) is not None:
        warnings.warn(
            f"{CHANGELOG_ENABLED_DEPRECATED} is deprecated; use {CHANGELOG_ENABLED}", DeprecationWarning, stacklevel=3
        )
    return cfg.get_bool(config, CHANGELOG_ENABLED_DEPRECATED, False)


def parse_duration_ms(config: Mapping[str, object], key: str, default: int) -> int:
    """Flink's Duration syntax: a number with an optional unit (ms, s, min, h; plain numbers are milliseconds)."""
    value = config.get(key)
    if value is None:
        return default
    text = str(value).strip().lower().replace(" ", "")
    units = (("ms", 1), ("min", 60_000), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000))
    for unit, factor in units:
        if text.endswith(unit) and text[: -len(unit)].isdigit():
            return int(text[: -len(unit)]) * factor
    if text.isdigit():
        return int(text)
    raise IllegalConfigurationError(f"{key}: expected a duration such as '10 min' or '500 ms', got {value!r}")


def changelog_settings(config: Mapping[str, object]) -> ChangelogSettings:
    storage = cfg.get_str(config, CHANGELOG_STORAGE) or "filesystem"
    if storage not in ("filesystem", "memory"):
        raise IllegalConfigurationError(f"{CHANGELOG_STORAGE}: expected filesystem or memory, got {storage!r}")
    base = cfg.get_str(config, DSTL_BASE_PATH) or cfg.get_str(config, DSTL_BASE_PATH_DEPRECATED)
    if base is not None:
        raise IllegalConfigurationError(
            f"{DSTL_BASE_PATH}: statecert writes the changelog into the checkpoint directory's shared scope, so "
            "that restores read nothing outside the checkpoint directory (FMT-10); leave the key unset"
        )
    max_failures = config.get(MAX_FAILURES)
    return ChangelogSettings(
        materialize_interval_ms=parse_duration_ms(config, MATERIALIZE_INTERVAL, 600_000),
        max_failures_allowed=3 if max_failures is None else cfg.get_positive_int(config, MAX_FAILURES, 3),
        storage=storage,
    )


@dataclasses.dataclass
class ChangelogStateBackend:
    """The wrapped backend's keyed backends with a changelog; operator state is the wrapped backend's own."""

    delegate: StateBackend
    settings: ChangelogSettings = dataclasses.field(default_factory=ChangelogSettings)

    name: str = dataclasses.field(init=False)
    capabilities: BackendCapabilities = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        """The name says what is wrapped; the capabilities are the wrapped backend's, with incremental checkpoints
        (the log is shared between checkpoints) and timers (kept as logged keyed state)."""
        self.name = f"changelog({self.delegate.name})"
        self.capabilities = dataclasses.replace(self.delegate.capabilities, incremental_checkpoints=True, timers=True)

    def configure(self, config: Mapping[str, object]) -> ChangelogStateBackend:
        delegate = self.delegate
        configure = getattr(delegate, "configure", None)
        if configure is not None:
            delegate = configure(config)
        return ChangelogStateBackend(delegate, changelog_settings(config))

    def create_keyed_state_backend(self, params: KeyedBackendParameters[Any]) -> ChangelogKeyedStateBackend:
        return ChangelogKeyedStateBackend(self.delegate, params, self.settings)

    def create_operator_state_backend(self, params: OperatorBackendParameters) -> OperatorStateBackend:
        return self.delegate.create_operator_state_backend(params)
