"""Heap backend against plain alternatives, measured in one run (issue: foundation).

1. State-operation rates: the heap backend's value/list/map operations against a plain dict doing the same
   serialization (keys and values through the same serializers, dict keyed by (key bytes, namespace bytes)).
2. Snapshot write throughput: a heap backend snapshot to file-system checkpoint storage against raw fsspec
   writes of the same bytes in about the same chunking, into the page cache and fsync'd to the disk; and where a
   snapshot's time goes, including what collecting and packing cost when the values lie in memory in the order the
   snapshot reads them rather than scattered as the benchmark's round-robin inserts leave them.

Prints absolute rates and the ratio ours / plain; nothing is asserted. Usage:
    python benchmarks/bench_heap.py [--keys N] [--ops N] [--snapshot-mb N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable

import crc32c
import fsspec
from figures import add_json_argument, record

from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.handles import ByteStreamStateHandle, StreamStateHandle
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from statecert.spec.storage import CheckpointedStateScope

KEYS, LONGS = StringSerializer(), LongSerializer()


def rate(ops: int, fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return ops / (time.perf_counter() - start)


def backend() -> object:
    params = KeyedBackendParameters("bench", "op", KEYS, 128, KeyGroupRange(0, 127))
    return HashMapStateBackend().create_keyed_state_backend(params)


def op_rates(keys: list[str], ops: int) -> list[tuple[str, float, float]]:
    rows = []
    sequence = [keys[i % len(keys)] for i in range(ops)]
    void = b""

    # value state: read-modify-write
    b = backend()
    value = b.get_or_create_state(ValueStateDescriptor("v", serializer=LONGS))  # type: ignore[attr-defined]

    def ours_value() -> None:
        for k in sequence:
            b.set_current_key(k)  # type: ignore[attr-defined]
            value.update((value.value() or 0) + 1)

    plain: dict[tuple[bytes, bytes], bytes] = {}

    def plain_value() -> None:
        for k in sequence:
            kb = KEYS.serialize(k)
            old = plain.get((kb, void))
            plain[(kb, void)] = LONGS.serialize((LONGS.deserialize(old) if old else 0) + 1)

    rows.append(("value read-modify-write", rate(ops, ours_value), rate(ops, plain_value)))

    # list state: append
    lst = b.get_or_create_state(ListStateDescriptor("l", element_serializer=LONGS))  # type: ignore[attr-defined]

    def ours_list() -> None:
        for i, k in enumerate(sequence):
            b.set_current_key(k)  # type: ignore[attr-defined]
            lst.add(i)

    plain_lists: dict[tuple[bytes, bytes], list[bytes]] = {}

    def plain_list() -> None:
        for i, k in enumerate(sequence):
            plain_lists.setdefault((KEYS.serialize(k), void), []).append(LONGS.serialize(i))

    rows.append(("list add", rate(ops, ours_list), rate(ops, plain_list)))

    # map state: put then get
    mp = b.get_or_create_state(MapStateDescriptor("m", user_key_serializer=KEYS, user_value_serializer=LONGS))  # type: ignore[attr-defined]

    def ours_map() -> None:
        for i, k in enumerate(sequence):
            b.set_current_key(k)  # type: ignore[attr-defined]
            mp.put(f"u{i % 16}", i)
            mp.get(f"u{(i + 1) % 16}")

    plain_maps: dict[tuple[bytes, bytes], dict[bytes, bytes]] = {}

    def plain_map() -> None:
        for i, k in enumerate(sequence):
            entry = plain_maps.setdefault((KEYS.serialize(k), void), {})
            entry[KEYS.serialize(f"u{i % 16}")] = LONGS.serialize(i)
            got = entry.get(KEYS.serialize(f"u{(i + 1) % 16}"))
            if got is not None:
                LONGS.deserialize(got)

    rows.append(("map put+get", rate(ops, ours_map), rate(ops, plain_map)))
    return rows


def _fsync(path: str) -> None:
    """Flush a written file's pages to the disk (Linux: fsync through any descriptor of the file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _CountingStream:
    """A checkpoint state stream that keeps nothing: what a snapshot costs before its bytes are checksummed and
    written. With `checksum`, it computes the CRC-32C the file system stream computes (CS-9), and nothing else."""

    accepts_buffers = True

    def __init__(self, checksum: bool) -> None:
        self._checksum = checksum
        self._pos = 0
        self._crc = 0

    def write(self, data: bytes) -> int:
        self._pos += len(data)
        if self._checksum:
            self._crc = crc32c.crc32c(data, self._crc)
        return len(data)

    def tell(self) -> int:
        return self._pos

    def close_and_get_handle(self) -> StreamStateHandle | None:
        return ByteStreamStateHandle("discarded", b"")

    def discard(self) -> None:
        pass

    def __enter__(self) -> _CountingStream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class _CountingFactory:
    """Streams that keep nothing, for the snapshot's phase breakdown."""

    def __init__(self, checksum: bool) -> None:
        self.checksum = checksum

    def create_checkpoint_state_output_stream(self, scope: CheckpointedStateScope) -> _CountingStream:
        return _CountingStream(self.checksum)


def discarded_snapshot_ms(b: object, rounds: int, checksum: bool) -> float:
    """Median ms of `rounds` snapshots of `b` into streams that keep nothing (with `checksum`, computing CRC-32C)."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        b.snapshot(0, 0, _CountingFactory(checksum)).run()  # type: ignore[attr-defined]
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def snapshot_phases(b: object, rounds: int) -> dict[str, float]:
    """Where a snapshot's time goes, medians in ms: collecting and packing the entries (into a stream that keeps
    nothing), the stream's CRC-32C on top of that; the file write is what a real snapshot takes beyond both."""
    collect_and_pack = discarded_snapshot_ms(b, rounds, checksum=False)
    crc32c = discarded_snapshot_ms(b, rounds, checksum=True) - collect_and_pack
    return {"collect_and_pack": collect_and_pack, "crc32c": crc32c}


def in_write_order(b: object) -> object:
    """A backend holding the same list state as `b` (bench state "blob"), inserted key by key in the order a
    snapshot reads it (key group, then key), so that its values lie in memory about in the order they are written.
    `b`'s values were inserted round-robin over the keys, so a snapshot reads them scattered over the heap."""
    strings = StringSerializer()
    copy = backend()
    lst = copy.get_or_create_state(ListStateDescriptor("blob", element_serializer=strings))  # type: ignore[attr-defined]
    for entries in b.stores["blob"].capture():  # type: ignore[attr-defined]
        for (key, _), cell in entries.items():
            copy.set_current_key(strings.deserialize(key))  # type: ignore[attr-defined]
            lst.add_all([strings.deserialize(element) for element in cell.data])
    return copy


def snapshot_throughput(megabytes: int, directory: str, rounds: int = 7) -> dict[str, float]:
    """Snapshot write and raw write of the same bytes under the local `directory`, alternating `rounds` times, in
    two conditions: `cached`: both files are removed after each round, so neither side ever waits for dirty pages to
    reach the disk (both write at memory speed: the strict comparison); `durable`: each write is followed by an
    fsync of its file (both at disk speed). Without either, the kernel's writeback of earlier rounds lands on
    whichever side runs next, and the ratio measures that. The raw side writes in about as many writes as the
    snapshot has key groups; medians and bests of each side."""
    b = backend()
    lst = b.get_or_create_state(ListStateDescriptor("blob", element_serializer=StringSerializer()))  # type: ignore[attr-defined]
    payload = "x" * 1000
    for i in range(megabytes * 1000):
        b.set_current_key(f"key-{i % 20000}")  # type: ignore[attr-defined]
        lst.add(payload)
    storage = FileSystemCheckpointStorage(f"file://{directory}/ours")
    access = storage.create_checkpoint_storage("bench")
    figures: dict[str, float] = {"rounds": rounds}
    attempt = 0
    for condition in ("cached", "durable"):
        ours: list[float] = []
        raw: list[float] = []
        for _ in range(rounds):
            attempt += 1
            start = time.perf_counter()
            handle = b.snapshot(attempt, 0, access.initialize_location_for_checkpoint(attempt)).run()  # type: ignore[attr-defined]
            ours_path = fsspec.core.url_to_fs(handle.delegate.path)[1]
            if condition == "durable":
                _fsync(ours_path)
            ours.append(time.perf_counter() - start)
            size = handle.size
            with handle.delegate.open() as f:
                data = f.read()
            step = max(1, size // (len(handle.offsets) * 2))  # about as many writes as the snapshot makes
            chunks = [data[i : i + step] for i in range(0, size, step)]
            raw_path = f"{directory}/raw/{uuid.uuid4().hex}"
            start = time.perf_counter()
            with fsspec.open(f"file://{raw_path}", "wb", auto_mkdir=True) as out:
                for chunk in chunks:
                    out.write(chunk)
            if condition == "durable":
                _fsync(raw_path)
            raw.append(time.perf_counter() - start)
            for path in (ours_path, raw_path):
                os.remove(path)
        mb = size / 1e6
        median_ours, median_raw = mb / statistics.median(ours), mb / statistics.median(raw)
        best_ours, best_raw = mb / min(ours), mb / min(raw)
        figures.update(
            {
                f"{condition}_snapshot_median_mb_per_s": round(median_ours, 1),
                f"{condition}_raw_median_mb_per_s": round(median_raw, 1),
                f"{condition}_snapshot_best_mb_per_s": round(best_ours, 1),
                f"{condition}_raw_best_mb_per_s": round(best_raw, 1),
                f"{condition}_ratio": round(median_ours / median_raw, 3),
                f"{condition}_ratio_best": round(best_ours / best_raw, 3),
            }
        )
    figures["snapshot_mb"] = round(mb, 1)
    phases = snapshot_phases(b, rounds)
    cached_ms = mb / figures["cached_snapshot_median_mb_per_s"] * 1e3
    figures["phase_collect_and_pack_ms"] = round(phases["collect_and_pack"], 1)
    ordered = discarded_snapshot_ms(in_write_order(b), rounds, checksum=False)
    figures["phase_collect_and_pack_write_order_ms"] = round(ordered, 1)
    figures["phase_crc32c_ms"] = round(phases["crc32c"], 1)
    figures["phase_file_write_ms"] = round(cached_ms - phases["collect_and_pack"] - phases["crc32c"], 1)
    figures["cached_raw_write_ms"] = round(mb / figures["cached_raw_median_mb_per_s"] * 1e3, 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument("--snapshot-mb", type=int, default=50)
    add_json_argument(parser)
    args = parser.parse_args()
    keys = [f"key-{i}" for i in range(args.keys)]
    print(f"heap backend vs plain dict with the same serialization ({args.ops} ops over {args.keys} keys)")
    print(f"{'operation':<26}{'ours ops/s':>14}{'plain ops/s':>14}{'ours/plain':>12}")
    figures: dict[str, object] = {"ops": args.ops, "keys": args.keys}
    for name, ours, plain in op_rates(keys, args.ops):
        print(f"{name:<26}{ours:>14,.0f}{plain:>14,.0f}{ours / plain:>12.2f}")
        figures[f"{name} ops/s"], figures[f"{name} ratio"] = round(ours), round(ours / plain, 3)
    with tempfile.TemporaryDirectory() as directory:
        snap = snapshot_throughput(args.snapshot_mb, directory)
    print(
        f"\nsnapshot write of {snap['snapshot_mb']} MB to file:// storage vs raw fsspec write of the same bytes, "
        f"{snap['rounds']} alternating rounds per condition"
    )
    print(f"{'':>22}{'ours MB/s':>12}{'raw MB/s':>12}{'ours/raw':>12}")
    for condition, label in (("cached", "page cache"), ("durable", "fsync'd")):
        for which in ("median", "best"):
            ratio = snap[f"{condition}_ratio" if which == "median" else f"{condition}_ratio_best"]
            ours, raw = snap[f"{condition}_snapshot_{which}_mb_per_s"], snap[f"{condition}_raw_{which}_mb_per_s"]
            print(f"{label + ', ' + which:>22}{ours:>12.1f}{raw:>12.1f}{ratio:>12.2f}")
    print(
        f"\nwhere a page-cache snapshot's {snap['snapshot_mb']} MB go (medians): collecting and packing the entries "
        f"{snap['phase_collect_and_pack_ms']} ms, CRC-32C {snap['phase_crc32c_ms']} ms, the file write "
        f"{snap['phase_file_write_ms']} ms; the raw write of the same bytes {snap['cached_raw_write_ms']} ms"
    )
    print(
        f"the same state inserted in the order the snapshot reads it (its values about contiguous in memory, not "
        f"scattered): collecting and packing {snap['phase_collect_and_pack_write_order_ms']} ms"
    )
    figures.update(snap)
    record(args.json, "heap", figures)


if __name__ == "__main__":
    main()
