"""A configuration option declared once (Flink's `ConfigOption`): its key, how its value is parsed, its default,
the deprecated keys it falls back to and what it configures. `read` resolves an option against a configuration:
the current key wins; a deprecated key is read with a DeprecationWarning naming the current one."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

Config = Mapping[str, object]


@dataclass(frozen=True)
class ConfigOption(Generic[T]):
    key: str
    parse: Callable[[str, object], T]
    default: T
    description: str
    component: str
    """What reads it: loader, storage, rocksdb, changelog, checkpointing, restart, recovery."""
    type_name: str = "string"
    deprecated_keys: tuple[str, ...] = ()
    default_text: str | None = None
    """How the default reads in the table, when the value itself does not say it (e.g. 'none: ...')."""

    @property
    def all_keys(self) -> tuple[str, ...]:
        return (self.key, *self.deprecated_keys)


def outside_statecert() -> int:
    """The `stacklevel`, for a `warnings.warn` in the function calling this one, of the first frame outside
    statecert's modules: a warning about a configuration names the line of the user's code that passed it, however
    deep in statecert the key is read."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("statecert."):
        frame, level = frame.f_back, level + 1
    return level


def lookup(config: Config, option: ConfigOption[T]) -> tuple[str, object] | None:
    """The key the value comes from and the raw value, or None when no key of the option is set."""
    value = config.get(option.key)
    if value is not None:
        return option.key, value
    for old in option.deprecated_keys:
        value = config.get(old)
        if value is not None:
            warnings.warn(f"{old} is deprecated; use {option.key}", DeprecationWarning, stacklevel=outside_statecert())
            return old, value
    return None


def read(config: Config, option: ConfigOption[T]) -> T:
    """The option's value: from its key, else from the first deprecated key set, else its default."""
    found = lookup(config, option)
    return option.default if found is None else option.parse(*found)


def is_set(config: Config, option: ConfigOption[T]) -> bool:
    return any(config.get(key) is not None for key in option.all_keys)


def merge(job_config: Config | None, cluster_config: Config | None) -> dict[str, object]:
    """Job configuration overrides cluster configuration key by key (LD-1)."""
    return {**(cluster_config or {}), **(job_config or {})}


def overlay(base: Config, override: Config, options: tuple[ConfigOption[Any], ...] | None = None) -> dict[str, object]:
    """`override` over `base`, option by option: an option set in `override` under any of its keys (current or
    deprecated) drops every key of it from `base`, so a 1.x key in `override` is not masked by `base`'s current key."""
    from statecert.reference.config.catalog import OPTIONS

    merged = dict(base)
    for option in options if options is not None else OPTIONS:
        if is_set(override, option):
            for key in option.all_keys:
                merged.pop(key, None)
    merged.update(override)
    return merged
