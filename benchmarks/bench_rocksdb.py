"""RocksDB backend against plain alternatives, measured in one run (issue: embedded RocksDB backend).

1. State-operation rates: the backend's value and map operations against raw rocksdict doing the same work with
   the same key layout (key group, key, namespace) and the same serializers.
2. Bytes uploaded by an incremental checkpoint after 1% of the keys changed, against a full checkpoint.
3. Restore time of a native checkpoint at equal parallelism (files used as they are) and at changed parallelism
   (key groups copied out), against restoring the canonical (full) checkpoint of the same state.

Prints absolute figures and ratios; nothing is asserted. Usage:
    python benchmarks/bench_rocksdb.py [--keys N] [--ops N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rocksdict
from figures import add_json_argument, record

from statecert.reference.checkpointing import create_subtasks, take_snapshot
from statecert.reference.rocksdb.backend import EmbeddedRocksDBStateBackend
from statecert.reference.rocksdb.key_layout import composite_key
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.handles import IncrementalKeyedStateHandle
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.keygroups import KeyGroupRange, assign_to_key_group
from statecert.spec.state import MapStateDescriptor, ValueStateDescriptor

KEYS, LONGS = StringSerializer(), LongSerializer()
COUNT = ValueStateDescriptor("count", serializer=LONGS)


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def op_rates(local: Path, keys: list[str], ops: int) -> list[tuple[str, float, float]]:
    sequence = [keys[i % len(keys)] for i in range(ops)]
    backend: Any = EmbeddedRocksDBStateBackend(local_dir=str(local)).create_keyed_state_backend(
        KeyedBackendParameters("bench", "op", KEYS, 128, KeyGroupRange(0, 127))
    )
    value = backend.get_or_create_state(COUNT)
    mp = backend.get_or_create_state(MapStateDescriptor("m", user_key_serializer=KEYS, user_value_serializer=LONGS))

    def ours_value() -> None:
        for k in sequence:
            backend.set_current_key(k)
            value.update((value.value() or 0) + 1)

    def ours_map() -> None:
        for i, k in enumerate(sequence):
            backend.set_current_key(k)
            mp.put(f"u{i % 16}", i)
            mp.get(f"u{(i + 1) % 16}")

    options = EmbeddedRocksDBStateBackend().settings.options()
    raw = rocksdict.Rdict(str(local / "raw"), options)
    raw_value = raw.create_column_family("value", options)
    raw_map = raw.create_column_family("map", options)

    def raw_value_ops() -> None:
        for k in sequence:
            kb = KEYS.serialize(k)
            key = composite_key(assign_to_key_group(KEYS.key_hash(k), 128), kb, b"")
            old = raw_value.get(key)
            raw_value[key] = LONGS.serialize((LONGS.deserialize(old) if old else 0) + 1)

    def raw_map_ops() -> None:
        for i, k in enumerate(sequence):
            prefix = composite_key(assign_to_key_group(KEYS.key_hash(k), 128), KEYS.serialize(k), b"")
            raw_map[prefix + KEYS.serialize(f"u{i % 16}")] = LONGS.serialize(i)
            got = raw_map.get(prefix + KEYS.serialize(f"u{(i + 1) % 16}"))
            if got is not None:
                LONGS.deserialize(got)

    rows = [
        ("value read-modify-write", ops / timed(ours_value), ops / timed(raw_value_ops)),
        ("map put+get", ops / timed(ours_map), ops / timed(raw_map_ops)),
    ]
    backend.dispose()
    raw.close()
    return rows


def uploaded_bytes(handles: list[Any], base: set[str]) -> int:
    """Bytes a checkpoint wrote: its private files, meta data, and shared files not already uploaded."""
    total = 0
    for h in handles:
        if isinstance(h, IncrementalKeyedStateHandle):
            total += sum(s.size for s in h.private_state.values()) + h.meta_state.size
            total += sum(s.size for s in h.shared_state.values() if getattr(s, "path", None) not in base)
        else:
            total += h.size
    return total


def handles_of(storage: Any, pointer: str) -> list[Any]:
    op = storage.load_checkpoint(pointer).operator("op")
    return [h for st in op.subtask_states.values() for h in st.managed_keyed_state]


def incremental_vs_full(root: Path, keys: int) -> dict[str, float]:
    storage = FileSystemCheckpointStorage(str(root / "c"))
    access = storage.create_checkpoint_storage("bench")
    results: dict[str, float] = {}
    pointers = {}
    for mode, incremental in (("full", False), ("incremental", True)):
        backend = EmbeddedRocksDBStateBackend(incremental=incremental, local_dir=str(root / mode))
        subtasks = create_subtasks(backend, KEYS, 2, 128, job_id=mode)
        write_counts(subtasks, range(keys), 1)
        first = take_snapshot(subtasks, access.initialize_location_for_checkpoint(1 if incremental else 11), 1, 128)
        for s in subtasks:
            s.keyed.notify_checkpoint_complete(1)
        write_counts(subtasks, range(0, keys, 100), 2)  # 1% of the keys change
        second = take_snapshot(subtasks, access.initialize_location_for_checkpoint(2 if incremental else 12), 2, 128)
        base = {
            getattr(s, "path", "")
            for h in handles_of(storage, first)
            if isinstance(h, IncrementalKeyedStateHandle)
            for s in h.shared_state.values()
        }
        results[f"{mode}_bytes"] = uploaded_bytes(handles_of(storage, second), base)
        pointers[mode] = second
        for s in subtasks:
            s.dispose()
    for mode, pointer in pointers.items():
        operator = storage.load_checkpoint(pointer).operator("op")
        for parallelism in (2, 3):
            backend = EmbeddedRocksDBStateBackend(local_dir=str(root / f"restore-{mode}-{parallelism}"))
            start = time.perf_counter()
            restored = create_subtasks(backend, KEYS, parallelism, 128, job_id="r", restore_from=operator)
            results[f"restore_{mode}_p{parallelism}"] = time.perf_counter() - start
            for s in restored:
                s.dispose()
    return results


def write_counts(subtasks: list[Any], keys: range, value: int) -> None:
    states = [s.keyed.get_or_create_state(COUNT) for s in subtasks]
    for i in keys:
        key = f"key-{i}"
        for s, state in zip(subtasks, states, strict=True):
            if s.keyed.key_group_of(key) in s.keyed.key_group_range:
                s.keyed.set_current_key(key)
                state.update(value * i)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--ops", type=int, default=100_000)
    add_json_argument(parser)
    args = parser.parse_args()
    figures: dict[str, object] = {"ops": args.ops, "keys": args.keys}
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        print(f"RocksDB backend vs raw rocksdict, same key layout and serializers ({args.ops} ops over 10000 keys)")
        print(f"{'operation':<26}{'ours ops/s':>14}{'raw ops/s':>14}{'ours/raw':>12}")
        for name, ours, raw in op_rates(root / "ops", [f"key-{i}" for i in range(10_000)], args.ops):
            print(f"{name:<26}{ours:>14,.0f}{raw:>14,.0f}{ours / raw:>12.2f}")
            figures[f"{name} ops/s"], figures[f"{name} ratio"] = round(ours), round(ours / raw, 3)
        r = incremental_vs_full(root / "ckpt", args.keys)
    print(f"\ncheckpoint after 1% of {args.keys} keys changed (parallelism 2)")
    print(
        f"  incremental uploaded {r['incremental_bytes'] / 1e6:.2f} MB, full wrote {r['full_bytes'] / 1e6:.2f} MB: "
        f"incremental/full = {r['incremental_bytes'] / r['full_bytes']:.3f}"
    )
    print("\nrestore of that checkpoint (seconds)")
    print(f"{'':<24}{'p=2 (equal)':>14}{'p=3 (rescale)':>16}")
    for mode in ("incremental", "full"):
        label = "native (incremental)" if mode == "incremental" else "canonical (full)"
        print(f"{label:<24}{r[f'restore_{mode}_p2']:>14.2f}{r[f'restore_{mode}_p3']:>16.2f}")
    print(
        f"native/canonical at p=2: {r['restore_incremental_p2'] / r['restore_full_p2']:.2f}, "
        f"at p=3: {r['restore_incremental_p3'] / r['restore_full_p3']:.2f}"
    )
    figures.update(r)
    record(args.json, "rocksdb", figures)


if __name__ == "__main__":
    main()
