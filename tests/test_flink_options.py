"""Every configuration key statecert reads (CFG, LD), held to Flink 2.3's own `ConfigOption` of that key as
`tox -e flink` recorded it (`tests/flink/golden/config_options.json`): the key exists in Flink, its fallback keys are
Flink's in Flink's order, its default is Flink's; and durations and memory sizes read as Flink read a seeded sample of
them (`config_values.json`). A difference fails unless `tests/flink/differences.toml` lists it
with its reason; an entry there that no longer differs fails too."""

from __future__ import annotations

from typing import Any

import pytest

from statecert.reference.config import OPTIONS
from tests.flink.differences import documented_differences
from tests.flink.golden import read_options, read_values
from tests.flink.readings import PARSERS, same, statecert_reads

OPTION_DIFFERENCES = ("no Flink option ", "fallback keys of ", "default of ")  # the ids this module reports


def option_differences() -> dict[str, tuple[str, str]]:
    """Each difference between the catalog and Flink's options, by id: (statecert's answer, Flink's)."""
    flink = read_options()
    found: dict[str, tuple[str, str]] = {}
    for option in OPTIONS:
        theirs = flink.get(option.key)
        if theirs is None:
            found[f"no Flink option {option.key}"] = (option.key, "none")
            continue
        if tuple(option.deprecated_keys) != theirs.fallback_keys:
            found[f"fallback keys of {option.key}"] = (str(option.deprecated_keys), str(theirs.fallback_keys))
        default: Any = None
        if theirs.default is not None:
            try:
                default = option.parse(option.key, theirs.default)
            except Exception as exc:
                default = f"unreadable: {exc}"
        if default != option.default:
            found[f"default of {option.key}"] = (repr(option.default), repr(theirs.default))
    return found


@pytest.mark.requirement("LD-6")
def test_every_configuration_key_has_flinks_fallback_keys_and_default_or_a_documented_reason() -> None:
    found = option_differences()
    documented = {d["id"] for d in documented_differences() if d["id"].startswith(OPTION_DIFFERENCES)}
    unexplained = {k: v for k, v in found.items() if k not in documented}
    assert not unexplained, (
        "LD-6: statecert's configuration catalog vs Flink 2.3's ConfigOptions: expected Flink's keys, fallback keys "
        f"and defaults, got (statecert, Flink) {unexplained}; fix the catalog or list the difference with its reason "
        "in tests/flink/differences.toml"
    )
    stale = sorted(documented - set(found))
    assert not stale, (
        "LD-6: tests/flink/differences.toml: expected each listed difference of the catalog to be found, got these "
        f"no longer differing: {stale}"
    )


@pytest.mark.requirement("LD-6")
@pytest.mark.parametrize("kind", sorted(PARSERS))
def test_a_value_reads_as_flink_read_it(kind: str) -> None:
    differing = []
    for text, flink in read_values()[kind]:
        ours = statecert_reads(kind, text)
        if not same(kind, ours, flink):
            differing.append((text, ours, flink))
    assert not differing, (
        f"LD-6: reading a {kind} value ({getattr(PARSERS[kind], '__name__', kind)}) over Flink's recorded readings "
        f"(tests/flink/golden): expected Flink's value or a refusal where Flink refused, got (text, statecert, Flink) "
        f"{differing[:6]}"
    )
