"""Snapshots written by Flink itself, for the Flink reader: `FlinkSavepoints.java` runs a small keyed job on Flink's
local mini-cluster and takes one snapshot per variant below. `python -m tests.flink.savepoints` writes them as the
golden files CI reads without Java (tests/flink/golden/savepoints/<variant>); `tox -e flink` writes them afresh
and reads those too. `expected_state` is the job's state computed from its records, independently of Flink."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.flink.referee import compiled

SOURCE = Path(__file__).with_name("FlinkSavepoints.java")
GOLDEN = Path(__file__).with_name("golden") / "savepoints"
# variant: backend, snapshot kind, compression, flags (see FlinkSavepoints.java)
VARIANTS = {
    "hashmap-canonical-savepoint": ("hashmap", "canonical", "plain", ()),
    "rocksdb-canonical-savepoint-compressed": ("rocksdb", "canonical", "compressed", ("files",)),
    "hashmap-retained-checkpoint": ("hashmap", "checkpoint", "plain", ("files", "decodable-only")),
    "rocksdb-native-savepoint": ("rocksdb", "native", "plain", ("files",)),
}
WORDS = ("apple", "berry", "cherry", "date", "elder", "fig", "grape")
RECORDS = 60
POINT = "FlinkSavepoints$Point"


def write_snapshots(out: Path, variants: list[str] | None = None) -> dict[str, Path]:
    """Run the job once per variant; each snapshot's directory is copied to `out/<variant>`."""
    written = {}
    with tempfile.TemporaryDirectory(prefix="statecert-flink-savepoints-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        java, classpath = compiled(SOURCE, classes)
        for variant in variants or list(VARIANTS):
            backend, kind, compression, flags = VARIANTS[variant]
            work = Path(tmp) / variant
            command = [java, "-cp", classpath, "FlinkSavepoints", str(work), backend, kind, compression]
            run = subprocess.run(
                [*command, *flags],
                check=True,
                capture_output=True,
                text=True,
            )
            pointer = next(line for line in run.stdout.splitlines() if line.startswith("pointer "))
            snapshot = Path(pointer.removeprefix("pointer ").removeprefix("file:"))
            target = out / variant
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(snapshot, target)
            written[variant] = target
    return written


def expected_state() -> dict[str, dict[tuple[Any, str], Any]]:
    """Per operator uid, per (key, state name): the value the job leaves (map state: the dict of its entries)."""
    words: dict[tuple[Any, str], Any] = {}
    buckets: dict[tuple[Any, str], Any] = {}
    for i in range(RECORDS):
        word = WORDS[(i * 5) % len(WORDS)]
        count = words.get((word, "count"), 0)
        words[(word, "count")] = count + 1
        n, total = words.get((word, "pair"), (0, 0.0))
        words[(word, "pair")] = (n + 1, total + i / 2.0)
        words[(word, "row")] = (word, i, i % 2 == 0)
        words.setdefault((word, "seen"), []).append(i)
        words.setdefault((word, "parity"), {})[i % 3] = i % 2 == 0
        words[(word, "opaque")] = "<undecodable: java.util.UUID>"
        words[(word, "point")] = f"<undecodable: {POINT}>"
        words.setdefault((word, "history"), []).append((word, i))
        totals = words.setdefault((word, "totals"), {})
        count, total = totals.get("even" if i % 2 == 0 else "odd", (0, 0.0))
        totals["even" if i % 2 == 0 else "odd"] = (count + 1, total + i)
        bucket = i % 4
        buckets[(bucket, "sum")] = buckets.get((bucket, "sum"), 0) + i
        previous = buckets.get((bucket, "words"))
        buckets[(bucket, "words")] = word if previous is None else f"{previous},{word}"
    return {"words": words, "buckets": buckets}


if __name__ == "__main__":
    for name, path in write_snapshots(GOLDEN, sys.argv[1:] or None).items():
        print(f"{name}: {path}")
