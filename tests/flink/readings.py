"""How statecert and Flink each read a configuration value of one kind (a duration, a memory size, a typed value),
as text that compares: the value, or `error`. The golden recordings, the CI comparison against them and the live
differential test all read values through these."""

from __future__ import annotations

import math
from collections.abc import Callable

from statecert.reference.config import catalog
from statecert.reference.config.values import (
    float_parser,
    int_parser,
    parse_bool,
    parse_duration_ms,
    parse_memory_size,
)
from statecert.spec.errors import IllegalConfigurationError
from tests.flink.referee import Referee, hex_text, text_of

TYPED_KINDS = ("int", "long", "double", "boolean", "enum")  # read by Flink through a typed ConfigOption
# statecert's reader of each kind, and the referee's request for Flink's reading of it
PARSERS: dict[str, Callable[[str, object], object]] = {
    "duration_ms": parse_duration_ms,
    "memory_bytes": parse_memory_size,
    "int": int_parser(),
    "long": int_parser(bits=64),
    "double": float_parser(),
    "boolean": parse_bool,
    "enum": catalog.CHECKPOINTING_MODE.parse,
}
REQUESTS: dict[str, tuple[str, ...]] = {
    "duration_ms": ("duration",),
    "memory_bytes": ("memory",),
    **{kind: ("typed", kind) for kind in TYPED_KINDS},
}


def statecert_reads(kind: str, text: str) -> str:
    try:
        value = PARSERS[kind]("key", text)
    except IllegalConfigurationError:
        return "error"
    return str(value).lower() if isinstance(value, bool) else str(value)


def flink_reads(referee: Referee, kind: str, text: str) -> str:
    answer = referee.ask(*REQUESTS[kind], hex_text(text))
    if answer[0] == "error":
        return "error"
    return text_of(answer[0]) if REQUESTS[kind][0] == "typed" else answer[0]


def same(kind: str, ours: str, flink: str) -> bool:
    """Both refuse, or both read the same value (a double by value, NaN equal to NaN)."""
    if kind == "double" and "error" not in (ours, flink):
        a, b = float(ours), float(flink)
        return a == b or (math.isnan(a) and math.isnan(b))
    return ours == flink
