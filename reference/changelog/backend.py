"""`ChangelogStateBackend`: wraps any state backend (ours or a third party's) with a changelog (chapter CL), as
Flink's `ChangelogStateBackend` does; configured by Flink's `state.changelog.*` keys."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from statecert.reference import config as cfg
from statecert.reference.changelog.keyed_backend import ChangelogKeyedStateBackend, ChangelogSettings
from statecert.reference.config import catalog
from statecert.spec.backend import BackendCapabilities, StateBackend
from statecert.spec.errors import IllegalConfigurationError
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.operator_backend import OperatorBackendParameters, OperatorStateBackend


def changelog_settings(config: Mapping[str, object]) -> ChangelogSettings:
    base = cfg.lookup(config, catalog.CHANGELOG_DSTL_BASE_PATH)
    if base is not None:
        raise IllegalConfigurationError(
            f"{base[0]}: statecert writes the changelog into the checkpoint directory's shared scope, so that "
            "restores read nothing outside the checkpoint directory (FMT-10); leave the key unset"
        )
    return ChangelogSettings(
        materialize_interval_ms=cfg.read(config, catalog.CHANGELOG_MATERIALIZE_INTERVAL),
        max_failures_allowed=cfg.read(config, catalog.CHANGELOG_MAX_FAILURES),
        storage=cfg.read(config, catalog.CHANGELOG_STORAGE),
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
        """A copy of this backend (of its class) with the wrapped backend configured too (LD-2): a setting given
        another value than its default when this backend was made wins; the others come from `config`."""
        delegate = self.delegate
        configure = getattr(delegate, "configure", None)
        if configure is not None:
            delegate = configure(config)
        defaults, from_config = ChangelogSettings(), changelog_settings(config)
        explicit = {
            f.name: getattr(self.settings, f.name)
            for f in dataclasses.fields(ChangelogSettings)
            if getattr(self.settings, f.name) != getattr(defaults, f.name)
        }
        return dataclasses.replace(self, delegate=delegate, settings=dataclasses.replace(from_config, **explicit))

    def create_keyed_state_backend(self, params: KeyedBackendParameters[Any]) -> ChangelogKeyedStateBackend:
        return ChangelogKeyedStateBackend(self.delegate, params, self.settings)

    def create_operator_state_backend(self, params: OperatorBackendParameters) -> OperatorStateBackend:
        return self.delegate.create_operator_state_backend(params)
