"""RocksDB memory shared like Flink's managed memory (RDB-10): one block cache and one write buffer manager charged
to it, per slot (managed memory or `fixed-per-slot`) or per process (`fixed-per-tm`). Sizes as in Flink's
`RocksDBMemoryControllerUtils`: the cache holds total * (3 - r) / 3 and the write buffer manager 2 * total * r / 3
for write-buffer ratio r, so memtables and cached blocks together stay within the total."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import rocksdict


@dataclass(frozen=True)
class SharedResources:
    total_bytes: int
    write_buffer_ratio: float
    cache: rocksdict.Cache
    write_buffer_manager: rocksdict.WriteBufferManager


def cache_capacity(total_bytes: int, write_buffer_ratio: float) -> int:
    return int(total_bytes * (3 - write_buffer_ratio) / 3)


def write_buffer_manager_capacity(total_bytes: int, write_buffer_ratio: float) -> int:
    return int(2 * total_bytes * write_buffer_ratio / 3)


def _create(total_bytes: int, write_buffer_ratio: float) -> SharedResources:
    cache = rocksdict.Cache(cache_capacity(total_bytes, write_buffer_ratio))
    manager = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
        write_buffer_manager_capacity(total_bytes, write_buffer_ratio), False, cache
    )
    return SharedResources(total_bytes, write_buffer_ratio, cache, manager)


class SlotMemory:
    """The shared resources of one slot, created on first use. A slot is one configured `EmbeddedRocksDBStateBackend`
    object in one process (a simulator job's backend, a Spark worker's copy of it); pickling drops the resources,
    so each process makes its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._resources: dict[tuple[int, float], SharedResources] = {}

    def get(self, total_bytes: int, write_buffer_ratio: float) -> SharedResources:
        with self._lock:
            key = (total_bytes, write_buffer_ratio)
            if key not in self._resources:
                self._resources[key] = _create(total_bytes, write_buffer_ratio)
            return self._resources[key]

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SlotMemory)

    def __hash__(self) -> int:
        return 0


PROCESS_MEMORY = SlotMemory()
"""`fixed-per-tm`: shared by every RocksDB backend of the process (the task manager)."""
