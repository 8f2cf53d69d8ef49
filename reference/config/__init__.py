"""The settings layer (issue: configuration that matches Flink 2.x): every key declared once in `catalog`, parsed
as Flink parses it (`values`), read with its deprecated fallbacks (`option.read`), unknown keys warned about
(`unknown_keys`)."""

from statecert.reference.config.catalog import OPTIONS, UNSUPPORTED
from statecert.reference.config.option import Config, ConfigOption, is_set, lookup, merge, overlay, read
from statecert.reference.config.unknown_keys import UnknownConfigurationKeyWarning, unknown_keys, warn_unknown_keys

__all__ = [
    "OPTIONS",
    "UNSUPPORTED",
    "Config",
    "ConfigOption",
    "UnknownConfigurationKeyWarning",
    "is_set",
    "lookup",
    "merge",
    "overlay",
    "read",
    "unknown_keys",
    "warn_unknown_keys",
]
