"""Configuration values asked of Flink 2.3 in a JVM: the `ConfigOption`s statecert's catalog follows (the golden
file CI reads must be the live Flink's), and Flink's reading of generated values: durations
(`TimeUtils.parseDuration`), memory sizes (`MemorySize.parse`) and integers, longs, doubles, booleans and enum names
through typed `ConfigOption`s, against statecert's readers of each (`tests/flink/readings.py`; CFG, LD-6)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecert.reference.config import OPTIONS
from tests.flink.golden import BLANKS, OPTIONS_FILE, TYPED_WORDS, VALUES_FILE, flink_options, flink_values, read_values
from tests.flink.readings import TYPED_KINDS, flink_reads, same, statecert_reads
from tests.flink.referee import Referee

pytestmark = pytest.mark.flink

DURATION_UNITS = (
    "", "ns", "nano", "nanos", "nanosecond", "nanoseconds", "us", "µs", "micro", "micros", "microsecond",
    "microseconds", "ms", "milli", "millis", "millisecond", "milliseconds", "s", "sec", "secs", "second", "seconds",
    "m", "min", "mins", "minute", "minutes", "h", "hour", "hours", "d", "day", "days", "w", "week", "hr", "sek",
)  # fmt: skip
MEMORY_UNITS = (
    "", "b", "bytes", "byte", "k", "kb", "kib", "kibibytes", "kibibyte", "m", "mb", "mib", "mebibytes", "g", "gb",
    "gibibytes", "t", "tb", "tebibytes", "p", "pb",
)  # fmt: skip


def _values(units: tuple[str, ...]) -> st.SearchStrategy[str]:
    """A number, blanks and a unit, each part as a user might write it (any case), or any text at all."""
    number = st.one_of(
        st.integers(0, 10**6).map(str), st.integers(0, 2**70).map(str), st.sampled_from(["-1", "1.5", "+3", "0x10", ""])
    )
    blank = st.sampled_from(["", " ", "  ", "\t"])
    unit = st.sampled_from(units).flatmap(lambda u: st.sampled_from([u, u.upper(), u.title()]))
    written = st.tuples(blank, number, blank, unit, blank).map("".join)
    return st.one_of(written, written, st.text(max_size=12))


# java.time.Duration.parse's ISO-8601 form, with signs, fractions, lower case and numbers beyond a Java long
ISO_DURATIONS = st.from_regex(
    r"\A[ \x01]?[-+]?[Pp]([-+]?[0-9]{1,20}[Dd])?([Tt]([-+]?[0-9]{1,20}[Hh])?([-+]?[0-9]{1,20}[Mm])?"
    r"([-+]?[0-9]{1,20}([.,][0-9]{0,10})?[Ss])?)?[ ]?\Z"
)


@pytest.mark.requirement("LD-6")
def test_the_golden_configuration_options_are_the_live_flinks(flink: Referee) -> None:
    live = flink_options(flink, [o.key for o in OPTIONS])
    recorded = json.loads(OPTIONS_FILE.read_text(encoding="utf-8"))
    assert (recorded["flink"], recorded["options"]) == (flink.version, json.loads(json.dumps(live))), (
        f"LD-6: {OPTIONS_FILE}: expected Flink {flink.version}'s options for the catalog's keys, got a recording of "
        f"Flink {recorded['flink']} that differs: run python -m tests.flink.golden"
    )


@pytest.mark.requirement("LD-6")
def test_the_golden_value_readings_are_the_live_flinks(flink: Referee) -> None:
    live = flink_values(flink)
    assert read_values() == live, (
        f"LD-6: {VALUES_FILE}: expected Flink {flink.version}'s readings of the sampled values, got a recording that "
        "differs: run python -m tests.flink.golden"
    )


# what each kind's generated values look like: a duration or memory size written from its parts (ISO-8601 durations
# too), a typed value from the words of the golden sample or characters numbers and names are made of, blanks around
_WORDS = st.sampled_from(TYPED_WORDS) | st.text(alphabet="0123456789+-.eE_xXfdFD aAnNiIfFtTrRuUsS\t\x01٣", max_size=8)
STRATEGIES: dict[str, st.SearchStrategy[str]] = {
    "duration_ms": _values(DURATION_UNITS) | ISO_DURATIONS,
    "memory_bytes": _values(MEMORY_UNITS),
    **{kind: st.tuples(st.sampled_from(BLANKS), _WORDS, st.sampled_from(BLANKS)).map("".join) for kind in TYPED_KINDS},
}


@pytest.mark.requirement("LD-6")
@pytest.mark.parametrize("kind", sorted(STRATEGIES))
@settings(max_examples=1000, deadline=None)
@given(data=st.data())
def test_a_value_reads_as_flink_reads_it(flink: Referee, kind: str, data: st.DataObject) -> None:
    """Durations (`TimeUtils.parseDuration(...).toMillis()`), memory sizes (`MemorySize.parse(...).getBytes()`) and
    typed values (Flink's `Configuration` through a typed `ConfigOption`)."""
    text = data.draw(STRATEGIES[kind])
    ours, theirs = statecert_reads(kind, text), flink_reads(flink, kind, text)
    assert same(kind, ours, theirs), (
        f"LD-6: statecert reading the {kind} value {text!r}: expected Flink's reading {theirs!r} (or both refusing), "
        f"got {ours!r}"
    )
