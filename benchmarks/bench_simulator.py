"""The barrier simulator: speed and the trends it reproduces, measured in one run (issue: coordinator and
simulator). Prints figures and ratios; nothing is asserted.

1. Speed: simulated records per wall second of a 1-stage job in 512-record network buffers (SIM-14), the same job
   with mini-batch (SIM-15), each the median of 3 runs, and with one record per buffer; messages per second, and a
   bare simpy loop's messages per second as the floor.
2. Scale: the issue's 3-stage job at parallelism 256 (`--large-records`, default 1,000,000; the target's 10,000,000)
   and a 3-stage job at parallelism 64 (4,096 channels per shuffle), 20 checkpoints, real heap backend.
3. Trends: aligned vs unaligned checkpoint duration under backpressure; asynchronous vs synchronous (stop-the-
   world) snapshots and their throughput cost against the checkpoint interval; incremental vs full checkpoint size.

Usage: python benchmarks/bench_simulator.py [--skip-scale] [--large-records N] [--json F]
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import simpy
from figures import add_json_argument, record

from statecert.reference.coordinator.settings import CheckpointingMode, CheckpointingSettings
from statecert.reference.simulator.job_spec import JobSpec, load_job_spec
from statecert.reference.simulator.runtime import Simulation

JOBS = Path(__file__).resolve().parent.parent / "scenarios" / "simulator"


def simulate(spec: JobSpec, seed: int = 1) -> tuple[dict[str, Any], float]:
    with tempfile.TemporaryDirectory() as workdir:
        start = time.perf_counter()
        report = Simulation(spec, seed, Path(workdir)).run()
        return report, time.perf_counter() - start


def simulate_repeated(spec: JobSpec, runs: int = 3) -> tuple[dict[str, Any], float, list[float]]:
    """`simulate` `runs` times: the report (the same every run: one seed), the median wall time and every run's,
    so that one run slowed down by the machine does not make the figure."""
    walls = []
    for _ in range(runs):
        report, wall = simulate(spec)
        walls.append(wall)
    return report, statistics.median(walls), walls


def events(report: dict[str, Any]) -> int:
    return int(report["metrics"]["messages_delivered"] + report["metrics"]["records_processed"])


BACKEND_CODE = (  # the state backend: its state objects, key handling, serializers, tables and snapshot writing
    "reference/heap/", "reference/keyed_states.py", "reference/keyed_backend_base.py", "reference/serializers.py",
    "reference/state_store.py", "reference/snapshot_task.py", "reference/format/", "reference/storage/",
    "spec/keygroups.py",
)  # fmt: skip


def backend_share(spec: JobSpec) -> tuple[float, int]:
    """Where a simulated job's time goes: the share of it (under cProfile, which inflates every Python call alike)
    spent in the state backend's code entered from the simulator, and how many times the job set a current key."""
    profile = cProfile.Profile()
    profile.enable()
    simulate(spec)
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]

    def inside(function: tuple[str, int, str]) -> bool:
        return any(part in function[0].replace("\\", "/") for part in BACKEND_CODE)

    total = sum(entry[2] for entry in stats.values())
    entered = sum(
        timing[3]
        for function, entry in stats.items()
        if inside(function)
        for caller, timing in entry[4].items()
        if not inside(caller)
    )
    keys = sum(entry[1] for function, entry in stats.items() if function[2] == "set_current_key" and inside(function))
    return entered / total, keys


def scale() -> None:
    """A 3-stage job (sources, routers, counters) at parallelism 64: two shuffles of 64 x 64 = 4,096 channels."""
    for mode in (CheckpointingMode.EXACTLY_ONCE, CheckpointingMode.UNALIGNED):
        job = load_job_spec(JOBS / "three-stage-parallelism-64.toml")
        spec = dataclasses.replace(job, checkpointing=dataclasses.replace(job.checkpointing, mode=mode))
        report, wall = simulate(spec)
        print(
            f"scale ({mode.value}): 3 stages at parallelism {spec.parallelism}, {spec.sources * spec.parallelism} "
            f"channels per shuffle, {len(report['completed_checkpoints'])} checkpoints completed in "
            f"{report['sim_time_ms']:.0f} simulated ms, {wall:.1f} s wall, {events(report) / wall:,.0f} events/s, "
            f"exactly-once={report['checks']['exactly_once']}"
        )


def trends() -> None:
    base = JobSpec(
        sources=2,
        parallelism=3,
        keys_per_source=8,
        records_per_source=300,
        buffer_records=64,
        checkpointing=CheckpointingSettings(interval_ms=60),
    )

    def p50(mode: CheckpointingMode, processing_ms: float) -> float:
        spec = dataclasses.replace(
            base, processing_ms=processing_ms, checkpointing=dataclasses.replace(base.checkpointing, mode=mode)
        )
        return float(simulate(spec)[0]["metrics"]["checkpoint_duration_ms"]["p50"])

    print("\ncheckpoint duration p50 (ms) as backpressure grows (processing time per record)")
    print(f"{'processing ms':>14}{'aligned':>10}{'unaligned':>11}{'aligned/unaligned':>19}")
    for processing in (0.1, 0.5, 1.0, 2.0):
        a, u = p50(CheckpointingMode.EXACTLY_ONCE, processing), p50(CheckpointingMode.UNALIGNED, processing)
        print(f"{processing:>14}{a:>10.2f}{u:>11.2f}{a / u:>19.1f}")

    stateful = JobSpec(
        sources=2,
        parallelism=2,
        keys_per_source=400,
        records_per_source=600,
        buffer_records=4,
        bandwidth_bytes_per_ms=50.0,
        checkpointing=CheckpointingSettings(interval_ms=60),
    )
    print("\nthroughput (records/s simulated) of asynchronous vs synchronous snapshots, by checkpoint interval")
    print(f"{'interval ms':>12}{'async':>10}{'sync':>10}{'sync/async':>12}")
    for interval in (10, 20, 40, 80):
        rates = []
        for synchronous in (False, True):
            spec = dataclasses.replace(
                stateful,
                synchronous_snapshots=synchronous,
                checkpointing=dataclasses.replace(stateful.checkpointing, interval_ms=interval),
            )
            rates.append(float(simulate(spec)[0]["metrics"]["throughput_records_per_s"]))
        print(f"{interval:>12}{rates[0]:>10.0f}{rates[1]:>10.0f}{rates[1] / rates[0]:>12.2f}")

    sizes = []
    for incremental in (False, True):
        spec = dataclasses.replace(
            base,
            backend="rocksdb",
            incremental=incremental,
            parallelism=2,
            keys_per_source=5000,
            records_per_source=8000,
            record_interval_ms=0.2,
            processing_ms=0.02,
            file_state_size_threshold=1024,
            checkpointing=dataclasses.replace(base.checkpointing, interval_ms=200),
        )
        sizes.append(simulate(spec)[0]["metrics"]["uploaded_bytes"])
    print("\nbytes written per checkpoint, RocksDB (incremental: only SST files not uploaded before)")
    print(f"  full:        {sizes[0][:12]}")
    print(f"  incremental: {sizes[1][:12]}")
    half = len(sizes[0]) // 2
    growth = [statistics.median(s[half:]) / s[0] for s in sizes]
    print(f"  growth, median of the second half against the first: full {growth[0]:.2f}x, incremental {growth[1]:.2f}x")
    later = slice(2, None)
    print(
        f"  incremental/full after the first two checkpoints: {sum(sizes[1][later]) / max(1, sum(sizes[0][later])):.2f}"
    )


def bare_simpy_rate(pairs: int = 64, messages: int = 2_000) -> float:
    """The floor a simpy-based simulator is measured against: `pairs` producers and consumers, each message one
    put, one get and one timeout (a store-and-forward hop), in messages per wall second."""
    env = simpy.Environment()
    stores = [simpy.Store(env, capacity=16) for _ in range(pairs)]

    def producer(store: simpy.Store) -> Any:
        for i in range(messages):
            yield env.timeout(0.001)
            yield store.put(i)

    def consumer(store: simpy.Store) -> Any:
        for _ in range(messages):
            yield store.get()

    for store in stores:
        env.process(producer(store))
        env.process(consumer(store))
    start = time.perf_counter()
    env.run()
    return pairs * messages / (time.perf_counter() - start)


def buffered_job() -> JobSpec:
    """A 1-stage keyed job (4 sources into 4 counters) of 1,000,000 records in 512-record network buffers (SIM-14),
    checkpointed every 20 simulated ms."""
    return JobSpec(
        sources=4,
        parallelism=4,
        records_per_source=250_000,
        keys_per_source=500,
        record_interval_ms=0.002,
        processing_ms=0.0005,
        latency_ms=0.2,
        latency_jitter_ms=0.05,
        buffer_records=4,
        buffer_size_records=512,
        buffer_timeout_ms=5.0,
        checkpointing=CheckpointingSettings(interval_ms=20),
    )


def large_job(records: int) -> JobSpec:
    """The issue's large job: 3 stages at parallelism 256 (65,536 channels per shuffle), unaligned checkpoints every
    4 simulated ms, 512-record buffers, the sources together emitting 25,600 records per simulated ms."""
    parallelism = 256
    return JobSpec(
        sources=parallelism,
        stages=3,
        parallelism=parallelism,
        max_parallelism=512,
        keys_per_source=64,
        records_per_source=-(-records // parallelism),
        record_interval_ms=0.01,
        processing_ms=0.002,
        latency_ms=0.2,
        latency_jitter_ms=0.05,
        buffer_records=4,
        buffer_size_records=512,
        buffer_timeout_ms=1.0,
        max_time_ms=1e9,
        checkpointing=CheckpointingSettings(interval_ms=4, timeout_ms=100_000_000, mode=CheckpointingMode.UNALIGNED),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument(
        "--large-records", type=int, default=1_000_000, help="records of the p256 job (the target's: 10,000,000)"
    )
    add_json_argument(parser)
    args = parser.parse_args()
    floor = bare_simpy_rate()
    print(f"bare simpy store-and-forward loop (64 producers, 64 consumers): {floor:,.0f} messages/s")
    per_record = JobSpec(
        sources=4,
        parallelism=4,
        records_per_source=2000,
        keys_per_source=50,
        checkpointing=CheckpointingSettings(interval_ms=50),
    )
    report, wall = simulate(per_record)
    records = per_record.sources * per_record.records_per_source
    one_per_buffer = records / wall
    print(
        f"one record per buffer: {records:,} records in {wall:.2f} s wall = {one_per_buffer:,.0f} records/s, "
        f"{events(report) / wall:,.0f} events/s ({len(report['completed_checkpoints'])} checkpoints)"
    )
    spec = buffered_job()
    report, wall, walls = simulate_repeated(spec)
    records = spec.sources * spec.records_per_source
    messages = report["metrics"]["messages_delivered"]
    print(
        f"512-record buffers, 1 keyed stage: {records:,} records in {wall:.2f} s wall (median of "
        f"{', '.join(f'{w:.2f}' for w in walls)} s) = {records / wall:,.0f} "
        f"simulated records per wall second; {messages:,} messages = {messages / wall:,.0f} messages/s "
        f"({len(report['completed_checkpoints'])} checkpoints, exactly-once={report['checks']['exactly_once']})"
    )
    share, keys_set = backend_share(spec)
    print(
        f"  where its time goes (the same job under cProfile): {share:.0%} in the state backend's code, entered "
        f"from the simulator; {keys_set:,} current keys set ({keys_set / records:.2f} per record)"
    )
    bundled = dataclasses.replace(spec, mini_batch_size=records, mini_batch_latency_ms=spec.checkpointing.interval_ms)
    mini_report, mini_wall, mini_walls = simulate_repeated(bundled)
    print(
        f"the same job with mini-batch (SIM-15; state applied once per key per checkpoint interval): {records:,} "
        f"records in {mini_wall:.2f} s wall (median of {', '.join(f'{w:.2f}' for w in mini_walls)} s) = "
        f"{records / mini_wall:,.0f} simulated records per wall second "
        f"(exactly-once={mini_report['checks']['exactly_once']}, "
        f"violations={len(mini_report['checks']['violations'])})"
    )
    figures: dict[str, Any] = {
        "bare_simpy_messages_per_s": round(floor),
        "records_per_s": round(records / wall),
        "records_per_s_mini_batch": round(records / mini_wall),
        "buffered_walls_s": [round(w, 3) for w in walls],
        "mini_batch_walls_s": [round(w, 3) for w in mini_walls],
        "mini_batch_exactly_once": mini_report["checks"]["exactly_once"] and not mini_report["checks"]["violations"],
        "messages_per_s": round(messages / wall),
        "records_per_message": round(records / messages, 1),
        "buffered_exactly_once": report["checks"]["exactly_once"],
        "records_per_s_one_record_per_buffer": round(one_per_buffer),
        "backend_share_profiled": round(share, 3),
        "current_keys_set": keys_set,
    }
    large = large_job(args.large_records)
    report, wall = simulate(large)
    done = len(report["completed_checkpoints"])
    barriers = 2 * large.parallelism**2  # per checkpoint: every channel of both shuffles
    print(
        f"3 stages at parallelism 256: {report['records']:,} records, {done} checkpoints in {wall:.1f} s wall "
        f"({report['records'] / wall:,.0f} records/s, {report['metrics']['messages_delivered']:,} messages, "
        f"exactly-once={report['checks']['exactly_once']}); each checkpoint alone sends {barriers:,} barriers"
    )
    figures.update(
        {
            "large_job_records": report["records"],
            "large_job_checkpoints": done,
            "large_job_measured_wall_s": round(wall, 1),
            "large_job_exactly_once": report["checks"]["exactly_once"],
        }
    )
    if report["records"] >= 10_000_000 and done >= 50:
        figures["large_job_wall_s"] = round(wall, 1)
    else:
        figures["large_job_wall_s"] = None
        figures["large_job_wall_s_note"] = (
            f"run at {report['records']:,} records: {wall:.0f} s wall, {done} checkpoints; 50 checkpoints alone "
            f"send {50 * barriers / 1e6:.1f}M barriers, {50 * barriers / floor:.0f} s at this run's bare simpy floor"
        )
    record(args.json, "simulator", figures)
    if not args.skip_scale:
        scale()
    trends()


if __name__ == "__main__":
    main()
