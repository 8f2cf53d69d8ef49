"""Parsing configuration values as Flink does (`ConfigurationUtils`, `TimeUtils`, `MemorySize`): booleans, numbers,
durations with Flink's unit spellings, memory sizes with Flink's unit spellings, and enumerations matched without
regard to case. Every failure is an IllegalConfigurationError naming the key (LD-6)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from statecert.spec.errors import IllegalConfigurationError

_NUMBER_AND_UNIT = re.compile(r"^\s*(\d+)\s*([^\d\s]*)\s*$")

# Flink's TimeUtils: a plain number is milliseconds
_TIME_UNITS_MS: dict[str, float] = {
    **dict.fromkeys(("ns", "nano", "nanos", "nanosecond", "nanoseconds"), 1e-6),
    **dict.fromkeys(("µs", "micro", "micros", "microsecond", "microseconds"), 1e-3),
    **dict.fromkeys(("", "ms", "milli", "millis", "millisecond", "milliseconds"), 1),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1000),
    **dict.fromkeys(("min", "m", "minute", "minutes"), 60_000),
    **dict.fromkeys(("h", "hour", "hours"), 3_600_000),
    **dict.fromkeys(("d", "day", "days"), 86_400_000),
}

# Flink's MemorySize.MemoryUnit: a plain number is bytes
_MEMORY_UNITS: dict[str, int] = {
    **dict.fromkeys(("", "b", "bytes"), 1),
    **dict.fromkeys(("k", "kb", "kibibytes"), 1024),
    **dict.fromkeys(("m", "mb", "mebibytes"), 1024**2),
    **dict.fromkeys(("g", "gb", "gibibytes"), 1024**3),
    **dict.fromkeys(("t", "tb", "tebibytes"), 1024**4),
}

Parser = Callable[[str, object], object]


def _text(key: str, value: object, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise IllegalConfigurationError(f"{key}: expected {what}, got {value!r}")
    return str(value).strip()


def parse_string(key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise IllegalConfigurationError(f"{key}: expected a non-empty string, got {value!r}")
    return value.strip()


def parse_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise IllegalConfigurationError(f"{key}: expected true or false, got {value!r}")


def int_parser(minimum: int | None = None, maximum: int | None = None) -> Callable[[str, object], int]:
    def parse(key: str, value: object) -> int:
        text = _text(key, value, "an integer")
        try:
            number = int(text)
        except ValueError:
            raise IllegalConfigurationError(f"{key}: expected an integer, got {value!r}") from None
        if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
            bounds = f"{minimum if minimum is not None else '-inf'}..{maximum if maximum is not None else 'inf'}"
            raise IllegalConfigurationError(f"{key}: expected an integer in {bounds}, got {number}")
        return number

    return parse


def float_parser(minimum: float | None = None, maximum: float | None = None) -> Callable[[str, object], float]:
    def parse(key: str, value: object) -> float:
        text = _text(key, value, "a number")
        try:
            number = float(text)
        except ValueError:
            raise IllegalConfigurationError(f"{key}: expected a number, got {value!r}") from None
        if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
            raise IllegalConfigurationError(f"{key}: expected a number in [{minimum}, {maximum}], got {number}")
        return number

    return parse


def parse_duration_ms(key: str, value: object) -> int:
    """Flink's duration syntax (`TimeUtils.parseDuration`): a number with an optional unit, `10 min`, `500ms`,
    `1 h`; a plain number is milliseconds. Returns whole milliseconds."""
    text = _text(key, value, "a duration such as '10 min' or '500 ms'")
    match = _NUMBER_AND_UNIT.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _TIME_UNITS_MS:
        raise IllegalConfigurationError(
            f"{key}: expected a duration such as '10 min' or '500 ms' (units ms, s, min, h, d), got {value!r}"
        )
    return round(int(match.group(1)) * _TIME_UNITS_MS[unit])


def parse_memory_size(key: str, value: object) -> int:
    """Flink's MemorySize syntax: a number with an optional unit (b/bytes, k/kb/kibibytes, m/mb/mebibytes,
    g/gb/gibibytes, t/tb/tebibytes), case-insensitive; a plain number is bytes."""
    text = _text(key, value, "a memory size such as '20kb'")
    match = _NUMBER_AND_UNIT.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _MEMORY_UNITS:
        raise IllegalConfigurationError(
            f"{key}: expected a memory size such as '20kb' (units b, kb, mb, gb, tb and Flink's other spellings), "
            f"got {value!r}"
        )
    return int(match.group(1)) * _MEMORY_UNITS[unit]


def enum_parser(values: Iterable[str], aliases: dict[str, str] | None = None) -> Callable[[str, object], str]:
    """One of `values` (canonical spelling returned), matched without regard to case, or an alias of one."""
    canonical = {v.lower(): v for v in values}
    canonical.update({alias.lower(): target for alias, target in (aliases or {}).items()})

    def parse(key: str, value: object) -> str:
        text = _text(key, value, f"one of {sorted(set(canonical.values()))}")
        if text.lower() not in canonical:
            raise IllegalConfigurationError(f"{key}: expected one of {sorted(set(canonical.values()))}, got {value!r}")
        return canonical[text.lower()]

    return parse


def memory_parser(maximum: int) -> Callable[[str, object], int]:
    """A memory size of at most `maximum` bytes."""

    def parse(key: str, value: object) -> int:
        size = parse_memory_size(key, value)
        if size > maximum:
            raise IllegalConfigurationError(
                f"{key}: {size} bytes is above the maximum of {maximum} (Flink warns and uses the default; "
                "statecert refuses a value it would not use)"
            )
        return size

    return parse
