"""The changelog state backend against incremental RocksDB on the same simulated job, measured in one run (issue:
changelog, timers, RocksDB tuning). Prints figures and ratios; nothing is asserted.

The shape Flink published (2022 blog: checkpoint duration p50 down by an order of magnitude, bytes per checkpoint
by two, full checkpoint size up, recovery slower) is what the ratios are compared with:
1. Checkpoint duration p50 and bytes uploaded per checkpoint (simulated: upload time from bytes and bandwidth),
   full checkpoint size (what a restore reads), and recovery: wall-clock seconds to restore every subtask from the
   last completed checkpoint with the real backends (a changelog restore replays the log).
2. The trade-off over the materialization interval: shorter intervals shrink the log a restore replays and the
   full size, at the cost of more materialization uploads.

Usage: python benchmarks/bench_changelog.py  (from the repository root; `tox -e bench` runs it)
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from figures import add_json_argument, record

from statecert.reference.checkpointing import create_subtasks
from statecert.reference.coordinator.settings import CheckpointingSettings
from statecert.reference.loader import load_state_backend
from statecert.reference.serializers import StringSerializer
from statecert.reference.simulator.job_spec import JobSpec
from statecert.reference.simulator.runtime import Simulation
from statecert.reference.storage.location import load_checkpoint_metadata

sys.path.insert(0, str(Path(__file__).resolve().parent))  # compaction_heavy_options, next to this script

JOB = JobSpec(
    sources=2,
    parallelism=2,
    backend="rocksdb",
    incremental=True,
    keys_per_source=50_000,
    records_per_source=40_000,
    record_interval_ms=0.1,
    processing_ms=0.01,
    buffer_records=64,
    file_state_size_threshold=1024,
    bandwidth_bytes_per_ms=2_000.0,
    rocksdb_options_factory="compaction_heavy_options:CompactionHeavy",
    checkpointing=CheckpointingSettings(interval_ms=20, retained=1),
)
"""Flink's benchmark regime scaled down: 100,000 keys updated uniformly, a checkpoint every 20 ms, and RocksDB
compacting every flushed file at once (`compaction_heavy_options.py`), as level compaction of terabyte-scale
state with uniform updates rewrites files at every checkpoint."""


def restore_seconds(pointer: str, spec: JobSpec, local: Path) -> float:
    """Wall-clock seconds to restore every keyed subtask of the counter from `pointer` with the real backends."""
    config = {
        "state.backend.type": spec.backend,
        "execution.checkpointing.incremental": str(spec.incremental).lower(),
        "state.backend.rocksdb.localdir": str(local),
        "state.changelog.enabled": str(spec.changelog).lower(),
    }
    backend = load_state_backend(job_config=config)
    operator = load_checkpoint_metadata(pointer).operator("counter")
    start = time.perf_counter()
    subtasks = create_subtasks(
        backend, StringSerializer(), spec.parallelism, spec.max_parallelism, restore_from=operator, local_dir=str(local)
    )
    seconds = time.perf_counter() - start
    for s in subtasks:
        s.dispose()
    return seconds


def measure(spec: JobSpec) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as workdir:
        simulation = Simulation(spec, 1, Path(workdir))
        report = simulation.run()
        latest = simulation.coordinator.latest_completed()
        assert latest is not None and report["checks"]["exactly_once"], (
            "the job must complete checkpoints, exactly once"
        )
        metrics = report["metrics"]
        return {
            "duration_p50_ms": metrics["checkpoint_duration_ms"]["p50"],
            "uploaded_p50_bytes": statistics.median(metrics["uploaded_bytes"][2:]),
            "full_bytes": metrics["checkpointed_bytes"][-1],
            "materialized_bytes": metrics.get("materialized_bytes", 0),
            "checkpoints": len(report["completed_checkpoints"]),
            "restore_s": restore_seconds(latest.pointer, spec, Path(workdir) / "restore"),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_json_argument(parser)
    args = parser.parse_args()
    incremental = measure(JOB)
    changelog = measure(dataclasses.replace(JOB, changelog=True, materialize_interval_ms=1000))
    print(
        f"job: {JOB.sources} sources x {JOB.records_per_source} records, {JOB.sources * JOB.keys_per_source} keys, "
        f"RocksDB at parallelism {JOB.parallelism}, checkpoint every {JOB.checkpointing.interval_ms} simulated ms; "
        f"changelog materializes every 1000 ms"
    )
    print(f"{'':32}{'incremental':>14}{'changelog':>14}{'ratio':>10}   Flink 2022")
    rows = (
        ("checkpoint duration p50 (ms)", "duration_p50_ms", "5 s -> 0.31 s (0.06x)"),
        ("bytes per checkpoint, p50", "uploaded_p50_bytes", "3.05 GB -> 14.8 MB (0.005x)"),
        ("full checkpoint size (bytes)", "full_bytes", "+30% (1.3x)"),
        ("recovery, restore wall s", "restore_s", "20 s -> 35-65 s (1.7-3.2x)"),
    )
    figures: dict[str, Any] = {"incremental": incremental, "changelog": changelog, "by_interval": {}}
    for label, key, flink in rows:
        a, b = incremental[key], changelog[key]
        print(f"{label:32}{a:>14,.3f}{b:>14,.3f}{b / a if a else float('nan'):>9.3f}x   {flink}")
        figures[f"ratio_{key}"] = round(b / a, 4) if a else None
    print(f"checkpoints completed: incremental {incremental['checkpoints']}, changelog {changelog['checkpoints']}")

    print("\ntrade-off over the materialization interval (changelog on RocksDB)")
    print(f"{'interval ms':>12}{'p50 ms':>10}{'bytes/ckpt':>12}{'full bytes':>12}{'materialized':>14}{'restore s':>11}")
    for interval in (100, 250, 1000, 4000):
        m = measure(dataclasses.replace(JOB, changelog=True, materialize_interval_ms=interval))
        print(
            f"{interval:>12}{m['duration_p50_ms']:>10.2f}{m['uploaded_p50_bytes']:>12,.0f}{m['full_bytes']:>12,}"
            f"{m['materialized_bytes']:>14,}{m['restore_s']:>11.3f}"
        )
        figures["by_interval"][str(interval)] = m
    record(args.json, "changelog", figures)


if __name__ == "__main__":
    main()
