"""The performance targets (issue 14) beside the figures one `tox -e bench` run measured, as a table and as a PNG
next to the JSON file. A target whose figure the run did not measure says so; nothing is asserted.

    python benchmarks/summary.py [benchmarks/results/figures.json]
"""

from __future__ import annotations

import argparse
import json
import operator
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from figures import DEFAULT


@dataclass(frozen=True)
class Target:
    """`benchmark.figure` compared with `threshold` by `relation` (">=" or "<"); `why`, formatted with the same
    benchmark's figures, says where the time goes when the target is not met."""

    title: str
    benchmark: str
    figure: str
    relation: str
    threshold: float
    why: str = ""

    def measured(self, data: dict[str, Any]) -> float | None:
        value = data.get(self.benchmark, {}).get(self.figure)
        return None if value is None else float(value)

    def met(self, value: float) -> bool:
        compare: Callable[[float, float], bool] = operator.ge if self.relation == ">=" else operator.lt
        return compare(value, self.threshold)

    def explanation(self, data: dict[str, Any]) -> str:
        """`why` with this run's figures, or nothing when the run did not measure them."""
        try:
            return self.why.format_map(data.get(self.benchmark, {}))
        except (KeyError, ValueError, TypeError):
            return ""

    def progress(self, value: float) -> float:
        """How far the figure is toward the target: 1.0 is exactly on it."""
        return value / self.threshold if self.relation == ">=" else self.threshold / value


TARGETS = (
    Target("simulator: records per wall second, 1 keyed stage, 512-record buffers", "simulator", "records_per_s",
           ">=", 1_000_000,
           "profiled, {backend_share_profiled:.0%} of this job's time is the state backend's own code "
           "({current_keys_set:,} state accesses, one per key per buffer)"),
    Target("simulator: the same with mini-batch per checkpoint interval (SIM-15)", "simulator",
           "records_per_s_mini_batch", ">=", 1_000_000),
    Target("simulator: 3 stages, parallelism 256, 10M records, 50 checkpoints (wall s)", "simulator",
           "large_job_wall_s", "<", 60),
    Target("Spark runner (heap, per record) / native streaming aggregation, RocksDB provider", "spark_runner",
           "ratio_heap_vs_streaming_rocksdb", ">=", 0.5),
    Target("Spark runner (heap, mini-batch) / native streaming aggregation, RocksDB provider", "spark_runner",
           "ratio_heap_mini_batch_vs_streaming_rocksdb", ">=", 0.5),
    Target("Spark runner (heap, per record) / transformWithStateInPandas", "spark_runner",
           "ratio_heap_vs_transform_with_state_pandas", ">=", 2.0),
    Target("Spark runner (heap, mini-batch) / transformWithStateInPandas", "spark_runner",
           "ratio_heap_mini_batch_vs_transform_with_state_pandas", ">=", 2.0),
    Target("statecert certify hashmap, default settings (wall s)", "certify", "hashmap_wall_s", "<", 30),
    Target("statecert certify hashmap --profile quick (wall s)", "certify", "hashmap_quick_wall_s", "<", 10),
    Target("statecert certify rocksdb / statecert certify hashmap (wall time)", "certify",
           "ratio_rocksdb_vs_hashmap", "<", 2.0,
           "no waiting left (wall {rocksdb[wall_s]} s on {rocksdb[cpu_s]} s CPU over the workers): RocksDB's own CPU "
           "per test (about 6,800 instances opened, each with its column families, flushed, checkpointed and closed: "
           "2-4 ms each); each column family created on a live database rewrites and rereads RocksDB's OPTIONS file "
           "for all of them, so the 258 states the many-states test registers one by one take about 8.6 s of one "
           "worker (their restore, created in one open, milliseconds)"),
    Target("statecert certify rocksdb, incremental / statecert certify hashmap (wall time)", "certify",
           "ratio_rocksdb_incremental_vs_hashmap", "<", 2.0),
    Target("heap snapshot write / raw fsspec write of the same bytes (page cache, medians)", "heap",
           "cached_ratio", ">=", 0.7,
           "collecting and packing the entries alone take {phase_collect_and_pack_ms} ms, CRC-32C "
           "{phase_crc32c_ms} ms and the file write {phase_file_write_ms} ms, where the raw write of the same "
           "bytes takes {cached_raw_write_ms} ms; the same state inserted in the order the snapshot reads it "
           "collects and packs in {phase_collect_and_pack_write_order_ms} ms: the rest is reading values scattered "
           "over the heap"),
    Target("heap snapshot write / raw fsspec write of the same bytes (fsync'd, medians)", "heap",
           "durable_ratio", ">=", 0.7,
           "the same CPU work as in the page cache row comes before the flush to the disk"),
)  # fmt: skip


def rows(data: dict[str, Any]) -> list[tuple[Target, float | None]]:
    return [(t, t.measured(data)) for t in TARGETS]


def print_table(data: dict[str, Any]) -> None:
    print(f"\nperformance targets, run started {data.get('started', '?')} on {data.get('machine', {})}")
    print(f"{'target':<78}{'wanted':>14}{'measured':>14}  verdict")
    for target, value in rows(data):
        wanted = f"{target.relation} {target.threshold:,.6g}"
        if value is None:
            reason = data.get(target.benchmark, {}).get(f"{target.figure}_note", "not measured in this run")
            print(f"{target.title:<78}{wanted:>14}{'-':>14}  not measured: {reason}")
            continue
        verdict = "met" if target.met(value) else "NOT MET"
        print(f"{target.title:<78}{wanted:>14}{value:>14,.4g}  {verdict}")
        why = "" if target.met(value) else target.explanation(data)
        if why:
            print(f"    where the time goes: {why}")


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [(t, v) for t, v in rows(data) if v is not None]
    fig, ax = plt.subplots(figsize=(13, 0.6 * max(1, len(measured)) + 1.5))
    names = [t.title for t, _ in measured]
    progress = [t.progress(v) for t, v in measured]
    colours = ["tab:green" if t.met(v) else "tab:red" for t, v in measured]
    ax.barh(names, progress, color=colours)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("measured / target (1 = on target; green met, red not met)")
    for i, (target, v) in enumerate(measured):
        ax.text(progress[i], i, f"  {v:,.3g} (wanted {target.relation} {target.threshold:,.3g})", va="center")
    ax.set_xlim(right=max([*progress, 1.0]) * 8)  # room for the labels
    ax.invert_yaxis()
    fig.suptitle(f"statecert benchmarks, {data.get('started', '')}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="?", default=str(DEFAULT))
    args = parser.parse_args()
    path = Path(args.json)
    data = json.loads(path.read_text())
    print_table(data)
    png = path.with_suffix(".png")
    plot(data, png)
    print(f"\nfigures: {path}\nplot: {png}")


if __name__ == "__main__":
    main()
