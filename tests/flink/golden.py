"""Flink's answers kept as files, so that CI checks statecert against them without Java: the `ConfigOption` of every
key statecert's catalog reads (key, value class, default, fallback keys, where declared), Flink's reading of a
seeded sample of duration and memory-size values, and which checkpoint failure reasons count toward the tolerable
failure number. `tox -e flink` checks the
files against the live Flink and `python -m tests.flink.golden` writes them again from it."""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from pathlib import Path
from typing import Any

from tests.flink.readings import TYPED_KINDS, flink_reads
from tests.flink.referee import FlinkOption, Referee

GOLDEN = Path(__file__).with_name("golden")
OPTIONS_FILE = GOLDEN / "config_options.json"
VALUES_FILE = GOLDEN / "config_values.json"
FAILURES_FILE = GOLDEN / "failure_reasons.json"
# Flink's classes declaring the options statecert reads
OPTION_CLASSES = (
    "org.apache.flink.configuration.StateBackendOptions",
    "org.apache.flink.configuration.CheckpointingOptions",
    "org.apache.flink.configuration.StateRecoveryOptions",
    "org.apache.flink.configuration.RestartStrategyOptions",
    "org.apache.flink.configuration.StateChangelogOptions",
    "org.apache.flink.configuration.ExecutionOptions",
    "org.apache.flink.state.rocksdb.RocksDBOptions",
    "org.apache.flink.state.rocksdb.RocksDBConfigurableOptions",
    "org.apache.flink.changelog.fs.FsStateChangelogOptions",
    "org.apache.flink.table.api.config.ExecutionConfigOptions",
)


def flink_options(referee: Referee, keys: list[str]) -> dict[str, Any]:
    """Flink's option for each of `keys` (None where Flink declares no option with that key)."""
    declared = referee.options(*OPTION_CLASSES)
    return {key: dataclasses.asdict(declared[key]) if key in declared else None for key in sorted(keys)}


# the parts values are written from: a number (any size, or not quite a number), blanks Java's trim takes or not,
# a unit (Flink's spellings, near misses) in any case; and ISO-8601 durations with signs and fractions
NUMBERS = ("0", "1", "7", "999999", "1000001", "9223372036854775", "9223372036854775807", "9223372036854775808",
           "99999999999999999999999", "-1", "+3", "1.5", "0x10", "٣", "")  # fmt: skip
BLANKS = ("", " ", "\t", "\x01", "\x1f", "\u00a0", "\n", "!")
DURATION_UNITS = ("", "ns", "nanos", "µs", "us", "micro", "microseconds", "ms", "millis", "s", "sec", "seconds",
                  "m", "min", "mins", "minute", "h", "hours", "d", "day", "days", "w", "hr")  # fmt: skip
MEMORY_UNITS = ("", "b", "bytes", "byte", "k", "kb", "kib", "kibibytes", "m", "mb", "mebibytes", "g", "gb",
                "gibibytes", "t", "tb", "tebibytes", "p", "pb")  # fmt: skip
ISO_PARTS = ("P1D", "PT10M", "pt1h30m", "PT-1S", "-PT5S", "PT1.5S", "PT0,0001S", "PT-0.5S", "P-1DT24H", "PT", "P",
             "PT1H-61M", "P106751991167300DT", "PT9223372036854775807S", "PT9223372036854775.807S", "P1W",
             "PT1s", "P1DT", "PT5H", "PT2M", "PT3S", "PT9223372036854775808S", "PT-9223372036854775809S",
             "P-106751991167300DT9223372036854775807S", "PT1H153722867280912930M-9223372036854775808S",
             "P-106751991167301DT9223372036854775807S", "PT1H153722867280912930M-9223372036854775809S",
             "PT1H-153722867280912931M9223372036854775807S")  # fmt: skip


def sample_values(seed: int, units: tuple[str, ...], iso: bool, count: int) -> list[str]:
    """`count` values written from the parts above, drawn with a seeded generator (the same on every machine)."""
    rng = random.Random(seed)
    values = []
    for _ in range(count):
        if iso and rng.random() < 0.25:
            values.append(rng.choice(BLANKS) + rng.choice(ISO_PARTS) + rng.choice(BLANKS))
            continue
        unit = rng.choice(units)
        unit = rng.choice([unit, unit.upper(), unit.title()])
        parts = (rng.choice(BLANKS), rng.choice(NUMBERS), rng.choice(BLANKS[:3]), unit, rng.choice(BLANKS))
        values.append("".join(parts))
    return values


# typed values: what a number, a boolean or an enum's name may look like, right or wrong
TYPED_WORDS = ("0", "5", "+5", "-7", "2147483647", "2147483648", "-2147483648", "-2147483649", "9223372036854775807",
               "9223372036854775808", "1.5", "1e3", ".5", "1.", "1.5f", "2d", "NaN", "Infinity", "-Infinity", "inf",
               "nan", "5_0", "٣", "0x10", "true", "TRUE", "False", "yes", "1", "exactly_once", "AT_LEAST_ONCE",
               "Exactly_Once", "at-least-once", "")  # fmt: skip


def sample_typed(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(BLANKS) + rng.choice(TYPED_WORDS) + rng.choice(BLANKS) for _ in range(count)]


def flink_values(referee: Referee) -> dict[str, list[tuple[str, str]]]:
    """Flink's reading of the sampled values: milliseconds or bytes, a typed value as Java prints it, or `error`."""
    samples = {
        "duration_ms": sample_values(0, DURATION_UNITS, True, 600),
        "memory_bytes": sample_values(0, MEMORY_UNITS, False, 600),
        **{kind: sample_typed(i, 300) for i, kind in enumerate(TYPED_KINDS)},
    }
    return {
        kind: [(text, flink_reads(referee, kind, text)) for text in sorted(set(texts))]
        for kind, texts in samples.items()
    }


def flink_failure_reasons(referee: Referee) -> dict[str, bool]:
    """Every `CheckpointFailureReason` of Flink's, and whether one failed checkpoint of it counts toward the tolerable
    failure number."""
    return {entry.split(":")[0]: entry.endswith(":1") for entry in referee.ask("counted")}


def read_failure_reasons() -> dict[str, bool]:
    counted: dict[str, bool] = json.loads(FAILURES_FILE.read_text(encoding="utf-8"))["counted"]
    return counted


def read_values() -> dict[str, list[tuple[str, str]]]:
    data = json.loads(VALUES_FILE.read_text(encoding="utf-8"))
    return {kind: [(t, a) for t, a in pairs] for kind, pairs in data["values"].items()}


def read_options() -> dict[str, FlinkOption | None]:
    data = json.loads(OPTIONS_FILE.read_text(encoding="utf-8"))
    return {
        key: None
        if o is None
        else FlinkOption(
            **{**o, "fallback_keys": tuple(o["fallback_keys"]), "deprecated_keys": tuple(o["deprecated_keys"])}
        )
        for key, o in data["options"].items()
    }


def main() -> int:
    from statecert.reference.config import OPTIONS

    referee = Referee()
    try:
        options = flink_options(referee, [o.key for o in OPTIONS])
        values = flink_values(referee)
        reasons = flink_failure_reasons(referee)
    finally:
        referee.close()  # the version stays readable
    GOLDEN.mkdir(exist_ok=True)
    data = {"flink": referee.version, "classes": list(OPTION_CLASSES), "options": options}
    OPTIONS_FILE.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{OPTIONS_FILE}: {len(options)} options of Flink {referee.version}")
    data = {"flink": referee.version, "values": values}
    VALUES_FILE.write_text(json.dumps(data, indent=0, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{VALUES_FILE}: {sum(map(len, values.values()))} values read by Flink {referee.version}")
    data = {"flink": referee.version, "counted": reasons}
    FAILURES_FILE.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"{FAILURES_FILE}: {len(reasons)} checkpoint failure reasons of Flink {referee.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
