"""Configuration values asked of Flink 2.3 in a JVM: the `ConfigOption`s statecert's catalog follows (the golden
file CI reads must be the live Flink's), and Flink's duration (`TimeUtils.parseDuration`) and memory size
(`MemorySize.parse`) syntax over generated values, which statecert reads with `parse_duration_ms` and
`parse_memory_size` (CFG, LD-6)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecert.reference.config import OPTIONS
from statecert.reference.config.values import parse_duration_ms, parse_memory_size
from statecert.spec.errors import IllegalConfigurationError
from tests.flink.golden import BLANKS, OPTIONS_FILE, TYPED_WORDS, VALUES_FILE, flink_options, flink_values, read_values
from tests.flink.referee import Referee, hex_text, text_of

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


def _ours(parse: object, text: str) -> list[str]:
    try:
        return [str(parse("key", text))]  # type: ignore[operator]
    except IllegalConfigurationError:
        return ["error"]


@pytest.mark.requirement("LD-6")
def test_the_golden_configuration_options_are_the_live_flinks(flink: Referee) -> None:
    live = flink_options(flink, [o.key for o in OPTIONS])
    recorded = json.loads(OPTIONS_FILE.read_text(encoding="utf-8"))
    assert (recorded["flink"], recorded["options"]) == (flink.version, json.loads(json.dumps(live))), (
        f"LD-6: {OPTIONS_FILE}: expected Flink {flink.version}'s options for the catalog's keys, got a recording of "
        f"Flink {recorded['flink']} that differs: run python -m tests.flink.golden"
    )


@pytest.mark.requirement("LD-6")
def test_the_golden_duration_and_memory_readings_are_the_live_flinks(flink: Referee) -> None:
    live = flink_values(flink)
    assert read_values() == live, (
        f"LD-6: {VALUES_FILE}: expected Flink {flink.version}'s readings of the sampled values, got a recording that "
        "differs: run python -m tests.flink.golden"
    )


def _difference(kind: str, text: str, ours: list[str], theirs: list[str]) -> str | None:
    """None when statecert and Flink agree on `text` (both refuse it, or both read the same number)."""
    if (ours == ["error"]) == (theirs[0] == "error") and (ours == ["error"] or ours == theirs):
        return None
    return f"{kind} {text!r}: statecert {ours}, Flink {theirs}"


@pytest.mark.requirement("LD-6")
@settings(max_examples=1000, deadline=None)
@given(text=_values(DURATION_UNITS) | ISO_DURATIONS)
def test_a_duration_reads_as_flink_reads_it(flink: Referee, text: str) -> None:
    found = _difference("duration", text, _ours(parse_duration_ms, text), flink.ask("duration", hex_text(text)))
    assert found is None, (
        f"LD-6: parse_duration_ms('key', {text!r}) vs Flink's TimeUtils.parseDuration(...).toMillis(): expected the "
        f"same milliseconds or both refusing, got {found}"
    )


@pytest.mark.requirement("LD-6")
@settings(max_examples=1000, deadline=None)
@given(text=_values(MEMORY_UNITS))
def test_a_memory_size_reads_as_flink_reads_it(flink: Referee, text: str) -> None:
    found = _difference("memory size", text, _ours(parse_memory_size, text), flink.ask("memory", hex_text(text)))
    assert found is None, (
        f"LD-6: parse_memory_size('key', {text!r}) vs Flink's MemorySize.parse(...).getBytes(): expected the same "
        f"bytes or both refusing, got {found}"
    )


@pytest.mark.requirement("LD-6")
@pytest.mark.parametrize("kind", ["int", "long", "double", "boolean", "enum"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_typed_value_reads_as_flink_reads_it(flink: Referee, kind: str, data: st.DataObject) -> None:
    from tests.test_flink_options import PARSERS, _as_text, _same

    word = st.sampled_from(TYPED_WORDS) | st.text(alphabet="0123456789+-.eE_xXfdFD aAnNiIfFtTrRuUsS\t\x01٣", max_size=8)
    text = data.draw(st.tuples(st.sampled_from(BLANKS), word, st.sampled_from(BLANKS)).map("".join))
    try:
        ours = _as_text(PARSERS[kind]("key", text))
    except IllegalConfigurationError:
        ours = "error"
    answer = flink.ask("typed", kind, hex_text(text))
    theirs = "error" if answer[0] == "error" else text_of(answer[0])
    assert _same(kind, ours, theirs), (
        f"LD-6: reading the {kind} value {text!r}: expected Flink's Configuration reading {theirs!r}, got {ours!r}"
    )
