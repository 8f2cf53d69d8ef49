"""Parsing configuration values as Flink does (`ConfigurationUtils`, `TimeUtils`, `MemorySize`): booleans, numbers,
durations with Flink's unit spellings, memory sizes with Flink's unit spellings, and enumerations matched without
regard to case. Every failure is an IllegalConfigurationError naming the key (LD-6)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from statecert.spec.errors import IllegalConfigurationError

# Java's String.trim: every character up to U+0020 (control characters included, Unicode blanks not)
_JAVA_TRIMMED = "".join(map(chr, range(0x21)))
_JAVA_LONG_MAX = 2**63 - 1

# Flink's TimeUtils: a plain number is milliseconds; each label's length in nanoseconds
_TIME_UNITS_NS: dict[str, int] = {
    **dict.fromkeys(("ns", "nano", "nanos", "nanosecond", "nanoseconds"), 1),
    **dict.fromkeys(("µs", "micro", "micros", "microsecond", "microseconds"), 10**3),
    **dict.fromkeys(("", "ms", "milli", "millis", "millisecond", "milliseconds"), 10**6),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 10**9),
    **dict.fromkeys(("min", "m", "minute", "minutes"), 60 * 10**9),
    **dict.fromkeys(("h", "hour", "hours"), 3600 * 10**9),
    **dict.fromkeys(("d", "day", "days"), 86400 * 10**9),
}
# java.time.Duration.parse's ISO-8601 form (PnDTnHnMn.nS), which Flink 2.x reads when the text starts with no digit
_ISO_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE | re.ASCII,  # Java's CASE_INSENSITIVE folds ASCII letters only
)


def _number_and_unit(text: str) -> tuple[str, str]:
    """Flink's split of a duration or memory size: the leading ASCII digits and the rest, Java-trimmed and in lower
    case (`TimeUtils.parseDuration`, `MemorySize.parse`)."""
    trimmed = text.strip(_JAVA_TRIMMED)
    digits = len(trimmed) - len(trimmed.lstrip("0123456789"))
    return trimmed[:digits], trimmed[digits:].strip(_JAVA_TRIMMED).lower()


def _iso_duration_ns(text: str) -> int | None:
    """`java.time.Duration.parse(text)` in nanoseconds, or None where Java refuses the text (no section, a lone
    `T`, a number beyond a Java long, seconds beyond a Java long)."""
    match = _ISO_DURATION.fullmatch(text)
    if match is None or match.group(3) == "T" or not any(match.group(i) for i in (2, 4, 5, 6)):
        return None
    seconds = 0
    for group, length in ((2, 86400), (4, 3600), (5, 60), (6, 1)):
        number = int(match.group(group) or 0)
        if not -(2**63) <= number <= _JAVA_LONG_MAX or not -(2**63) <= number * length <= _JAVA_LONG_MAX:
            return None
        seconds += number * length
    if not -(2**63) <= seconds <= _JAVA_LONG_MAX:
        return None
    fraction = int((match.group(7) or "").ljust(9, "0"))
    nanos = seconds * 10**9 + (-fraction if (match.group(6) or "").startswith("-") else fraction)
    return -nanos if match.group(1) == "-" else nanos


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
    """The value as text, as it was given (a number given as a number is its text): each reader trims, or not, as
    Flink's does."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise IllegalConfigurationError(f"{key}: expected {what}, got {value!r}")
    return str(value)


def parse_string(key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise IllegalConfigurationError(f"{key}: expected a non-empty string, got {value!r}")
    return value.strip()


def parse_bool(key: str, value: object) -> bool:
    """`true` or `false` in any case, as Flink's Configuration reads a boolean (no blanks around it)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise IllegalConfigurationError(f"{key}: expected true or false, got {value!r}")


# Java's Integer.parseInt / Long.parseLong: a sign, then decimal digits (of any script, as Character.digit takes)
_JAVA_INTEGER = re.compile(r"[+-]?\d+")
# Java's Double.parseDouble (ASCII digits; hexadecimal floats left out): NaN, Infinity, decimal with exponent and
# a float/double suffix
_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")


def int_parser(minimum: int | None = None, maximum: int | None = None, bits: int = 32) -> Callable[[str, object], int]:
    """A Java `int` (`bits` 32) or `long` (64) as Flink's Configuration reads it (no blanks, no underscores), then
    within [minimum, maximum]."""

    def parse(key: str, value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = _text(key, value, "an integer")
            if not _JAVA_INTEGER.fullmatch(text):
                raise IllegalConfigurationError(f"{key}: expected an integer, got {value!r}")
            number = int(text)
        if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
            raise IllegalConfigurationError(f"{key}: expected a {bits}-bit integer, got {value!r}")
        if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
            bounds = f"{minimum if minimum is not None else '-inf'}..{maximum if maximum is not None else 'inf'}"
            raise IllegalConfigurationError(f"{key}: expected an integer in {bounds}, got {number}")
        return number

    return parse


def float_parser(minimum: float | None = None, maximum: float | None = None) -> Callable[[str, object], float]:
    """A Java `double` as Flink's Configuration reads it (`Double.parseDouble`: Java-trimmed, `NaN`, `Infinity`, an
    exponent, an `f`/`d` suffix), then within [minimum, maximum]."""

    def parse(key: str, value: object) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        else:
            text = _text(key, value, "a number").strip(_JAVA_TRIMMED)
            if not _JAVA_DOUBLE.fullmatch(text):
                raise IllegalConfigurationError(f"{key}: expected a number, got {value!r}")
            number = float(text.rstrip("fFdD"))
        if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
            raise IllegalConfigurationError(f"{key}: expected a number in [{minimum}, {maximum}], got {number}")
        return number

    return parse


def parse_duration_ms(key: str, value: object) -> int:
    """Flink 2.x's duration syntax (`TimeUtils.parseDuration`): a number with an optional unit, `10 min`, `500ms`,
    `1 h` (a plain number is milliseconds), or ISO-8601 (`PT10M`); negative durations are refused. Returns the whole
    milliseconds Java's `Duration.toMillis` gives (sub-millisecond parts truncated); a duration that is not a Java
    long of milliseconds is refused, as Flink fails on it."""
    what = "a duration such as '10 min', '500 ms' or 'PT10M'"
    text = _text(key, value, what)
    number, unit = _number_and_unit(text)
    if number:
        nanos = int(number) * _TIME_UNITS_NS[unit] if unit in _TIME_UNITS_NS else None
    else:
        nanos = _iso_duration_ns(text.strip(_JAVA_TRIMMED))
    if nanos is None or nanos < 0:
        raise IllegalConfigurationError(f"{key}: expected {what} (units ns, µs, ms, s, min, h, d), got {value!r}")
    millis = nanos // 10**6
    if millis > _JAVA_LONG_MAX:  # Duration.toMillis overflows (its seconds then overflow too)
        raise IllegalConfigurationError(f"{key}: a duration of at most {_JAVA_LONG_MAX} ms, got {value!r}")
    return millis


def parse_memory_size(key: str, value: object) -> int:
    """Flink's MemorySize syntax: a number with an optional unit (b/bytes, k/kb/kibibytes, m/mb/mebibytes,
    g/gb/gibibytes, t/tb/tebibytes), case-insensitive; a plain number is bytes. Bytes beyond a Java long are
    refused, as Flink refuses them."""
    text = _text(key, value, "a memory size such as '20kb'")
    number, unit = _number_and_unit(text)
    if not number or unit not in _MEMORY_UNITS:
        raise IllegalConfigurationError(
            f"{key}: expected a memory size such as '20kb' (units b, kb, mb, gb, tb and Flink's other spellings), "
            f"got {value!r}"
        )
    size = int(number) * _MEMORY_UNITS[unit]
    if int(number) > _JAVA_LONG_MAX or size > _JAVA_LONG_MAX:
        raise IllegalConfigurationError(f"{key}: a memory size of at most {_JAVA_LONG_MAX} bytes, got {value!r}")
    return size


def enum_parser(values: Iterable[str], aliases: dict[str, str] | None = None) -> Callable[[str, object], str]:
    """One of `values` (canonical spelling returned) or an alias of one, matched as Flink matches an enum's name:
    in upper case, with no blanks around it."""
    canonical = {v.upper(): v for v in values}
    canonical.update({alias.upper(): target for alias, target in (aliases or {}).items()})

    def parse(key: str, value: object) -> str:
        text = _text(key, value, f"one of {sorted(set(canonical.values()))}")
        if text.upper() not in canonical:
            raise IllegalConfigurationError(f"{key}: expected one of {sorted(set(canonical.values()))}, got {value!r}")
        return canonical[text.upper()]

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
