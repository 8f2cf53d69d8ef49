"""The page of differences from Flink: what the differential tests (`tox -e flink`, and in CI the golden files
Flink wrote) compare, and every difference statecert keeps on purpose, from `tests/flink/differences.toml`."""

from __future__ import annotations

import json
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
DIFFERENCES = ROOT / "tests" / "flink" / "differences.toml"
GOLDEN = ROOT / "tests" / "flink" / "golden"


def flink_differences() -> str:
    options = json.loads((GOLDEN / "config_options.json").read_text(encoding="utf-8"))
    values = json.loads((GOLDEN / "config_values.json").read_text(encoding="utf-8"))
    counts = {kind: len(pairs) for kind, pairs in values["values"].items()}
    lines = [
        "# Differences from Flink",
        "",
        f"statecert's answers are compared with Apache Flink {options['flink']}'s own classes, run in a JVM by "
        "`tox -e flink` (it installs `apache-flink-libraries`; a Java 17 JDK must be on the machine):",
        "",
        "- key groups (`KeyGroupRangeAssignment.assignToKeyGroup`) of generated keys of every type statecert hashes "
        "like Java (`String`, `Long`, `Integer`, `Short`, `Byte`, `Double`, `Boolean`) at generated max "
        "parallelisms; each operator's key-group range and each key group's owner; the default max parallelism and "
        "the parallelisms it refuses (KG-1, KG-2, KG-5 to KG-7);",
        "- every key of the configuration catalog against Flink's `ConfigOption` of that key "
        f"({len(options['options'])} keys): the key, its fallback keys in Flink's order, its default (LD-6);",
        "- durations (`TimeUtils.parseDuration`, ISO-8601 included) and memory sizes (`MemorySize.parse`) over "
        "generated values, and integers, longs, doubles, booleans and enum names read through typed "
        "`ConfigOption`s (LD-6);",
        "- the loaders' outcome on generated job configurations (`StateBackendLoader`, `CheckpointStorageLoader`): "
        "the backend, whether the changelog backend wraps it, incremental checkpoints, the timer service, the "
        "checkpoint storage with its directories and inline threshold, or the error (LD-1, LD-3, LD-6 to LD-9);",
        "- which checkpoint failure reasons count toward the tolerable failed checkpoints "
        "(`CheckpointFailureManager.checkFailureCounter`, COORD-6).",
        "",
        "CI runs no JVM: it checks the catalog against Flink's options, the parsers against Flink's readings of a "
        f"seeded sample ({sum(counts.values())} values of {len(counts)} kinds) "
        "and the coordinator against Flink's counted failure reasons, all recorded by `python -m tests.flink.golden` "
        "in `tests/flink/golden/`; `tox -e flink` fails when the "
        "recordings are not the live Flink's.",
        "",
        "## Differences kept on purpose",
        "",
        "A difference a test finds fails it unless it is listed here with its reason; a listed difference no test "
        "finds any more fails too.",
        "",
        "| difference | statecert | Flink | why |",
        "| --- | --- | --- | --- |",
    ]
    entries = tomllib.loads(DIFFERENCES.read_text(encoding="utf-8")).get("difference", [])
    lines += [f"| {e['id']} | `{e['statecert']}` | `{e['flink']}` | {e['reason']} |" for e in entries]
    return "\n".join([*lines, ""])
