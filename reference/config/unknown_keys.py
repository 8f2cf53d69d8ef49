"""Keys in the families statecert reads (`state.*`, `execution.checkpointing.*`, `execution.state-recovery.*`,
`restart-strategy.*`) that no option declares: most likely a typo, so each gets a warning naming the closest known
key, as a user who mistypes a Flink key would want (Flink itself ignores them silently)."""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Mapping

from statecert.reference.config.catalog import KEY_PREFIXES, OPTIONS, UNSUPPORTED
from statecert.reference.config.option import outside_statecert

FAMILIES = ("state.", "execution.checkpointing.", "execution.state-recovery.", "restart-strategy")


class UnknownConfigurationKeyWarning(UserWarning):
    """A configuration key in a family statecert reads that no option declares."""


def known_keys() -> list[str]:
    return sorted({key for option in OPTIONS for key in option.all_keys})


def unknown_keys(config: Mapping[str, object]) -> dict[str, str | None]:
    """Unknown keys of the families statecert reads, each with the closest known key (None when nothing is close).
    Keys statecert knows but does not implement are not unknown: `config --list` names them."""
    known = known_keys()
    found: dict[str, str | None] = {}
    for key in config:
        if not isinstance(key, str) or not key.startswith(FAMILIES) or key in known or key in UNSUPPORTED:
            continue
        if key.startswith(KEY_PREFIXES):
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        found[key] = close[0] if close else None
    return found


def warn_unknown_keys(config: Mapping[str, object]) -> None:
    for key, closest in unknown_keys(config).items():
        hint = f"; did you mean {closest}?" if closest else ""
        warnings.warn(
            f"{key}: not a configuration key statecert knows{hint} (statecert config --list)",
            UnknownConfigurationKeyWarning,
            stacklevel=outside_statecert(),
        )
