"""The simulation's job description, read from TOML; an invalid file gets one error naming the file, the key and
what was expected (until the scenarios issue brings the full scenario format)."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statecert.reference.coordinator.settings import CheckpointingMode, CheckpointingSettings
from statecert.reference.key_types import KeyType
from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.spec.errors import StateCertError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


MAX_SIMULATED_PARALLELISM = 1024
MAX_SIMULATED_RECORDS = 10_000_000
MAX_BUFFER_RECORDS = 1 << 16


class SimulationSpecError(StateCertError):
    """An invalid simulation file: the message names the file, the key and what was expected."""


@dataclass(frozen=True)
class Fault:
    """task-crash (task, at_ms), worker-loss (tasks, at_ms), coordinator-crash-before-metadata (checkpoint),
    storage-outage and storage-slowdown (at_ms, duration_ms, factor), network-spike (at_ms, duration_ms, extra_ms);
    and the operations savepoint and stop-with-savepoint (at_ms, native) and cancel (at_ms). A task crash with a
    phase (snapshot, upload) fires in that phase of the task's first snapshot after at_ms; a coordinator crash
    with checkpoint 0 fires before the first checkpoint `_metadata` written after at_ms."""

    kind: str
    at_ms: float = 0.0
    task: str = ""
    checkpoint: int = 0
    tasks: tuple[str, ...] = ()
    duration_ms: float = 0.0
    factor: float = 1.0
    extra_ms: float = 0.0
    native: bool = False
    phase: str = ""  # task-crash: "" at at_ms; snapshot or upload: in that phase of its first snapshot after at_ms


@dataclass(frozen=True)
class JobSpec:
    sources: int = 2
    stages: int = 2  # 2: sources -> counters; 3: sources -> routers -> counters (two keyed shuffles)
    operator: str = "count"  # the keyed aggregate: count | sum
    key_selector: str = "key"  # key | split (one key per source split)
    key_type: str = "string"  # the keys' Java type (reference.key_types): which hashCode places them (KG-1)
    serializer_version: int = 1  # the aggregate's value schema (2 adds a field)
    parallelism: int = 2
    max_parallelism: int = 128
    backend: str = "hashmap"
    incremental: bool = False
    changelog: bool = False  # the backend wrapped in the changelog backend (CL-1)
    materialize_interval_ms: int = 600_000  # its materialization interval, in simulated time
    rocksdb_options_factory: str | None = None  # state.backend.rocksdb.options-factory (module:attr)
    window_ms: int = 0  # > 0: the counters aggregate in event-time tumbling windows of this size (TM)
    mini_batch_size: int = 0  # > 0: keyed tasks bundle up to this many records per state access (SIM-15)
    mini_batch_latency_ms: float = 0.0  # > 0: a bundle is applied once its first record waited this long
    union_state: bool = False  # the counters keep union list state (OS-2): each restore records what it read
    keys_per_source: int = 10
    key_skew: float = 1.0  # 1 draws keys uniformly; above 1 a few keys get most records (index = n * u**skew)
    records_per_source: int = 300
    record_interval_ms: float = 1.0
    processing_ms: float = 0.2
    sink_ms: float = 0.0  # extra time per record at the counters (a slow sink): backpressure on the last shuffle
    latency_ms: float = 1.0
    latency_jitter_ms: float = 0.5
    buffer_records: int = 16  # credits per channel: the receiver's buffers for it (Flink's buffers-per-channel)
    buffer_size_records: int = 1  # records per network buffer (SIM-14); 1 sends every record as its own message
    buffer_timeout_ms: float = 100.0  # a partly filled buffer leaves after this long (execution.buffer-timeout)
    bandwidth_bytes_per_ms: float = 100_000.0
    file_state_size_threshold: int | None = None  # state below it is inline in _metadata (Flink's default 20 KB)
    storage: str = "filesystem"  # filesystem | jobmanager (all state inline in _metadata)
    restart_delay_ms: float = 20.0
    restart_attempts: int = 1_000_000
    synchronous_snapshots: bool = False
    max_time_ms: float = 600_000.0
    checkpointing: CheckpointingSettings = field(default_factory=lambda: CheckpointingSettings(interval_ms=100))
    faults: tuple[Fault, ...] = ()
    config: tuple[tuple[str, str], ...] = ()
    """Flink keys from the file's `[config]` table (already applied to the fields above; the backend and storage
    loaders get them too)."""


_JOB_KEYS: dict[str, type] = {
    "sources": int,
    "stages": int,
    "operator": str,
    "key_selector": str,
    "key_type": str,
    "serializer_version": int,
    "parallelism": int,
    "max_parallelism": int,
    "backend": str,
    "keys_per_source": int,
    "key_skew": float,
    "records_per_source": int,
    "record_interval_ms": float,
    "processing_ms": float,
    "sink_ms": float,
    "incremental": bool,
    "changelog": bool,
    "materialize_interval_ms": int,
    "rocksdb_options_factory": str,
    "window_ms": int,
    "mini_batch_size": int,
    "mini_batch_latency_ms": float,
    "union_state": bool,
}
_NETWORK_KEYS: dict[str, type] = {
    "latency_ms": float,
    "latency_jitter_ms": float,
    "buffer_records": int,
    "buffer_size_records": int,
    "buffer_timeout_ms": float,
}
_CHECKPOINT_KEYS: dict[str, type] = {
    "interval_ms": int,
    "timeout_ms": int,
    "max_concurrent": int,
    "min_pause_ms": int,
    "tolerable_failures": int,
    "retained": int,
    "mode": str,
    "alignment_timeout_ms": int,
    "synchronous_snapshots": bool,
}
_FAULT_KINDS = (
    "task-crash",
    "worker-loss",
    "coordinator-crash-before-metadata",
    "storage-outage",
    "storage-slowdown",
    "network-spike",
    "savepoint",
    "stop-with-savepoint",
    "cancel",
)
_FAULT_KEYS: dict[str, type] = {
    "kind": str,
    "at_ms": float,
    "task": str,
    "checkpoint": int,
    "tasks": list,
    "duration_ms": float,
    "factor": float,
    "extra_ms": float,
    "native": bool,
    "phase": str,
}


def aggregate_of(spec: JobSpec) -> KeyedAggregate:
    """The job's keyed aggregate, its keys of the spec's key type."""
    key_type = KeyType(spec.key_type, spec.keys_per_source)
    return KeyedAggregate(spec.operator, spec.key_selector, spec.serializer_version, key_type)


def _typed(path: str, key: str, value: Any, kind: type) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise SimulationSpecError(f"{path}: {key}: expected {kind.__name__}, got {value!r}")
    return value


def _section(path: str, data: dict[str, Any], name: str, keys: dict[str, type]) -> dict[str, Any]:
    section = data.get(name, {})
    if not isinstance(section, dict):
        raise SimulationSpecError(f"{path}: [{name}]: expected a table")
    unknown = sorted(set(section) - set(keys))
    if unknown:
        raise SimulationSpecError(f"{path}: [{name}]: unknown key(s) {unknown}; expected some of {sorted(keys)}")
    return {k: _typed(path, f"{name}.{k}", v, keys[k]) for k, v in section.items()}


def load_job_spec(file: str | Path) -> JobSpec:
    path = str(file)
    try:
        data = tomllib.loads(Path(file).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SimulationSpecError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SimulationSpecError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SimulationSpecError(f"{path}: invalid TOML: {exc}") from None
    unknown = sorted(
        set(data) - {"job", "network", "storage", "checkpointing", "restart", "faults", "limits", "config"}
    )
    if unknown:
        raise SimulationSpecError(f"{path}: unknown section(s) {unknown}")
    job = _section(path, data, "job", _JOB_KEYS)
    network = _section(path, data, "network", _NETWORK_KEYS)
    storage = _section(
        path, data, "storage", {"bandwidth_bytes_per_ms": float, "file_state_size_threshold": int, "storage": str}
    )
    restart = _section(path, data, "restart", {"delay_ms": float, "attempts": int})
    limits = _section(path, data, "limits", {"max_time_ms": float})
    checkpointing = _section(path, data, "checkpointing", _CHECKPOINT_KEYS)
    try:
        mode = CheckpointingMode(checkpointing.pop("mode", "exactly-once"))
    except ValueError:
        raise SimulationSpecError(
            f"{path}: checkpointing.mode: expected one of {[m.value for m in CheckpointingMode]}"
        ) from None
    faults = []
    raw_faults = data.get("faults", [])
    if not isinstance(raw_faults, list):
        raise SimulationSpecError(f"{path}: faults: expected an array of tables ([[faults]])")
    for i, raw in enumerate(raw_faults):
        where = f"faults[{i}]"
        if not isinstance(raw, dict) or raw.get("kind") not in _FAULT_KINDS:
            raise SimulationSpecError(f"{path}: {where}.kind: expected one of {list(_FAULT_KINDS)}")
        extra = sorted(set(raw) - set(_FAULT_KEYS))
        if extra:
            raise SimulationSpecError(f"{path}: {where}: unknown key(s) {extra}")
        values = {k: _typed(path, f"{where}.{k}", v, _FAULT_KEYS[k]) for k, v in raw.items()}
        values["tasks"] = tuple(values.get("tasks", ()))
        if values.get("phase", "") not in ("", "snapshot", "upload"):
            raise SimulationSpecError(f"{path}: {where}.phase: expected snapshot or upload")
        faults.append(Fault(**values))
    synchronous = checkpointing.pop("synchronous_snapshots", False)
    try:
        spec = JobSpec(
            **job,
            **network,
            **storage,
            restart_delay_ms=restart.get("delay_ms", 20.0),
            restart_attempts=restart.get("attempts", 1_000_000),
            synchronous_snapshots=synchronous,
            max_time_ms=limits.get("max_time_ms", 600_000.0),
            checkpointing=CheckpointingSettings(mode=mode, **checkpointing),
            faults=tuple(faults),
        )
    except ValueError as exc:
        raise SimulationSpecError(f"{path}: [checkpointing]: {exc}") from None
    flink_keys = data.get("config", {})
    if not isinstance(flink_keys, dict) or not all(
        isinstance(v, str | int | float | bool) and not isinstance(v, dict) for v in flink_keys.values()
    ):
        raise SimulationSpecError(f"{path}: [config]: expected a table of Flink configuration keys and plain values")
    try:
        from statecert.reference.simulator.flink_config import with_flink_config

        spec = with_flink_config(spec, flink_keys)
    except StateCertError as exc:
        raise SimulationSpecError(f"{path}: [config]: {exc}") from None
    if not 1 <= spec.parallelism <= spec.max_parallelism or spec.sources < 1:
        raise SimulationSpecError(f"{path}: job: need 1 <= parallelism <= max_parallelism and sources >= 1")
    for key, value, cap in (
        ("max_parallelism", spec.max_parallelism, 32768),
        ("parallelism", spec.parallelism, MAX_SIMULATED_PARALLELISM),
        ("sources", spec.sources, MAX_SIMULATED_PARALLELISM),
        ("records_per_source", spec.records_per_source, MAX_SIMULATED_RECORDS),
    ):
        if not 1 <= value <= cap:
            raise SimulationSpecError(
                f"{path}: job.{key}: expected a number in 1..{cap} (simulations are capped to end in minutes), "
                f"got {value}"
            )
    try:
        aggregate = aggregate_of(spec)
    except ValueError as exc:
        raise SimulationSpecError(f"{path}: job: {exc}") from None
    keys = spec.sources * (spec.keys_per_source if spec.key_selector == "key" else 1)
    if keys > aggregate.key_type.capacity:
        raise SimulationSpecError(
            f"{path}: job.key_type: {spec.key_type} holds {aggregate.key_type.capacity} distinct keys, the input "
            f"has {keys} (sources x keys_per_source)"
        )
    if not 1 <= spec.buffer_records <= MAX_BUFFER_RECORDS or not 1 <= spec.buffer_size_records <= MAX_BUFFER_RECORDS:
        raise SimulationSpecError(
            f"{path}: network: buffer_records and buffer_size_records: expected numbers in 1..{MAX_BUFFER_RECORDS}, "
            f"got {spec.buffer_records} and {spec.buffer_size_records}"
        )
    if not (0 <= spec.buffer_timeout_ms <= spec.max_time_ms or spec.buffer_timeout_ms == math.inf):
        raise SimulationSpecError(
            f"{path}: network.buffer_timeout_ms: expected 0..limits.max_time_ms or inf (sent only when full), "
            f"got {spec.buffer_timeout_ms}"
        )
    if spec.storage not in ("filesystem", "jobmanager"):
        raise SimulationSpecError(f"{path}: storage.storage: expected filesystem or jobmanager, got {spec.storage!r}")
    if spec.stages not in (2, 3):
        raise SimulationSpecError(f"{path}: job.stages: expected 2 or 3, got {spec.stages}")
    if spec.window_ms < 0 or (spec.window_ms and spec.stages != 2):
        raise SimulationSpecError(
            f"{path}: job.window_ms: expected 0 (no windows) or a window size in ms with stages = 2, "
            f"got {spec.window_ms} with stages = {spec.stages}"
        )
    if spec.mini_batch_size < 0 or not 0 <= spec.mini_batch_latency_ms <= spec.max_time_ms:
        raise SimulationSpecError(
            f"{path}: job.mini_batch_size and job.mini_batch_latency_ms: expected a size >= 0 (0: no mini-batch) "
            f"and a latency in 0..limits.max_time_ms, got {spec.mini_batch_size} and {spec.mini_batch_latency_ms}"
        )
    if spec.key_skew < 1.0:
        raise SimulationSpecError(f"{path}: job.key_skew: expected a number >= 1, got {spec.key_skew}")
    for fault in spec.faults:
        for task in (fault.task,) if fault.kind == "task-crash" else fault.tasks:
            if not _valid_task(task, spec):
                raise SimulationSpecError(
                    f"{path}: faults: task {task!r}: expected source-<i>, counter-<i> or (3 stages) router-<i>"
                )
    return spec


def _valid_task(name: str, spec: JobSpec) -> bool:
    kind, _, index = name.partition("-")
    limit = {"source": spec.sources, "counter": spec.parallelism, "router": spec.parallelism * (spec.stages == 3)}.get(
        kind
    )
    return limit is not None and index.isdigit() and int(index) < limit


def to_toml(spec: JobSpec) -> str:
    """A job file that `load_job_spec` reads back as `spec`: how a failing fault schedule is printed for replay."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)  # a TOML basic string for the plain names used here
        if isinstance(v, tuple | list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    c = spec.checkpointing
    lines = ["[job]"]
    lines += [f"{k} = {value(getattr(spec, k))}" for k in _JOB_KEYS if getattr(spec, k) is not None]
    lines += ["", "[network]"] + [f"{k} = {value(getattr(spec, k))}" for k in _NETWORK_KEYS]
    lines += ["", "[storage]", f"bandwidth_bytes_per_ms = {value(spec.bandwidth_bytes_per_ms)}"]
    if spec.file_state_size_threshold is not None:
        lines.append(f"file_state_size_threshold = {spec.file_state_size_threshold}")
    lines.append(f"storage = {value(spec.storage)}")
    lines += ["", "[restart]", f"delay_ms = {value(spec.restart_delay_ms)}", f"attempts = {spec.restart_attempts}"]
    lines += ["", "[limits]", f"max_time_ms = {value(spec.max_time_ms)}"]
    lines += [
        "",
        "[checkpointing]",
        f'mode = "{c.mode.value}"',
        f"synchronous_snapshots = {value(spec.synchronous_snapshots)}",
    ]
    lines += [
        f"{k} = {getattr(c, k)}"
        for k in ("interval_ms", "timeout_ms", "max_concurrent", "min_pause_ms", "tolerable_failures", "retained")
    ]
    if c.alignment_timeout_ms is not None:
        lines.append(f"alignment_timeout_ms = {c.alignment_timeout_ms}")
    if spec.config:
        lines += ["", "[config]"] + [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in spec.config]
    defaults = Fault("task-crash")
    for fault in spec.faults:
        lines += ["", "[[faults]]", f'kind = "{fault.kind}"']
        lines += [
            f"{k} = {value(getattr(fault, k))}"
            for k in _FAULT_KEYS
            if k != "kind" and getattr(fault, k) != getattr(defaults, k)
        ]
    return "\n".join(lines) + "\n"
