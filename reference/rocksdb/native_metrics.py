"""RocksDB's native metrics (`state.backend.rocksdb.metrics.<name>: true`, Flink's `RocksDBNativeMetricOptions`),
read as RocksDB properties `rocksdb.<name>` and summed over the backend's column families (RDB-11)."""

from __future__ import annotations

from collections.abc import Mapping

from statecert.reference.config.values import parse_bool
from statecert.spec.errors import IllegalConfigurationError

METRICS_PREFIX = "state.backend.rocksdb.metrics."
PROPERTY_METRICS = (
    "num-immutable-mem-table",
    "mem-table-flush-pending",
    "compaction-pending",
    "background-errors",
    "cur-size-active-mem-table",
    "cur-size-all-mem-tables",
    "size-all-mem-tables",
    "num-entries-active-mem-table",
    "num-entries-imm-mem-tables",
    "num-deletes-active-mem-table",
    "num-deletes-imm-mem-tables",
    "estimate-num-keys",
    "estimate-table-readers-mem",
    "num-snapshots",
    "num-live-versions",
    "estimate-live-data-size",
    "total-sst-files-size",
    "live-sst-files-size",
    "estimate-pending-compaction-bytes",
    "num-running-compactions",
    "num-running-flushes",
    "actual-delayed-write-rate",
    "is-write-stopped",
    "block-cache-capacity",
    "block-cache-usage",
    "block-cache-pinned-usage",
)
"""Flink's property-based native metrics; each is off unless its key is true."""


def enabled_metrics(config: Mapping[str, object]) -> frozenset[str]:
    """The metric names switched on; an unknown `state.backend.rocksdb.metrics.*` key is a configuration error."""
    names = set()
    for key in config:
        if key.startswith(METRICS_PREFIX):
            name = key.removeprefix(METRICS_PREFIX)
            if name not in PROPERTY_METRICS and name != "column-family-as-variable":
                known = ", ".join(PROPERTY_METRICS)
                raise IllegalConfigurationError(f"{key}: unknown RocksDB native metric; known: {known}")
            if name != "column-family-as-variable" and config.get(key) is not None and parse_bool(key, config[key]):
                names.add(name)
    return frozenset(names)
