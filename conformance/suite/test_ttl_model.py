"""Model-based tier for state with a time-to-live: random programs of writes, reads, map iterations stopped at any
entry, list merges, clock steps and recoveries from a checkpoint, checked against a model that keeps each entry's
last-access timestamp (chapter TTL). A read updates the model as TTL-2 says it refreshes: only with
`ON_READ_AND_WRITE`, and only what it returns. Certifying through the changelog backend (`--changelog`), a recovery
replays the changes logged since the last materialization, so this also checks that replay leaves each timestamp as
the live program did (CL-4)."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

from statecert.conformance.helpers import keyed_backend, location_for, snapshot_now
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.state import (
    ListStateDescriptor,
    ManualClock,
    MapStateDescriptor,
    ReducingStateDescriptor,
    TtlConfig,
    TtlUpdateType,
    ValueStateDescriptor,
)

TTL_MS = 10
ON_READ = TtlConfig(TTL_MS, TtlUpdateType.ON_READ_AND_WRITE)
ON_WRITE = TtlConfig(TTL_MS, TtlUpdateType.ON_CREATE_AND_WRITE)
NAMESPACES = StringSerializer()
KEY_POOL = ["k0", "k1"]
NS_POOL = ["n0", "n1", "n2"]
TICKS = st.integers(0, 7)  # every step first moves the clock by this many ms: entries expire within a few steps
USER_KEYS = ["a", "b", "c"]
VALUE = ValueStateDescriptor("ttl-value", ON_READ, serializer=LongSerializer())
LIST = ListStateDescriptor("ttl-list", ON_WRITE, element_serializer=LongSerializer())
MAP = MapStateDescriptor(
    "ttl-map", ON_READ, user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer()
)
REDUCING = ReducingStateDescriptor("ttl-reducing", ON_READ, reduce_function=str.__add__, serializer=StringSerializer())
Where = tuple[str, str]  # (key, namespace)


def make_machine(new_backend: Any, kind: str) -> type[RuleBasedStateMachine]:
    """A machine over one state kind (value, list, map or reducing), so that its writes, reads and time steps meet
    within a few steps."""

    class TtlMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.kind = kind
            self.tmp = tempfile.mkdtemp(prefix="statecert-ttl-model-")
            self.state_backend = new_backend(self.tmp)
            self.storage = FileSystemCheckpointStorage(f"{self.tmp}/c")
            self.clock = ManualClock()
            self.backend = keyed_backend(self.state_backend, clock=self.clock)
            self.checkpoint_id = 0
            self.key, self.ns = KEY_POOL[0], NS_POOL[0]
            # the model: each entry with its last-access timestamp
            self.values: dict[Where, tuple[int, int]] = {}
            self.lists: dict[Where, list[tuple[int, int]]] = {}
            self.maps: dict[Where, dict[str, tuple[int, int]]] = {}
            self.reduced: dict[Where, tuple[str, int]] = {}
            self._checkpoint()  # through the changelog backend, a materialization: later checkpoints log changes

        def _alive(self, stamp: int) -> bool:
            return stamp + TTL_MS > self.clock.now_ms()

        def _state(self, descriptor: Any, key: str | None = None, ns: str | None = None) -> Any:
            self.backend.set_current_key(key or self.key)
            return self.backend.get_partitioned_state(ns or self.ns, descriptor, NAMESPACES)

        def _read(self, entries: dict[Any, tuple[Any, int]], at: Any) -> Any:
            """The model's read of the entry at `at` in `entries`: its value, refreshed as an ON_READ_AND_WRITE read
            refreshes it (TTL-2); None, and gone, when absent or expired."""
            stored = entries.pop(at, None)
            if stored is None or not self._alive(stored[1]):
                return None
            entries[at] = (stored[0], self.clock.now_ms())
            return stored[0]

        def _where(self) -> Where:
            return (self.key, self.ns)

        def _program(self, what: str) -> str:
            return f"{what} at {self.clock.now_ms()} ms, key {self.key!r}, namespace {self.ns!r}, TTL {TTL_MS} ms"

        @rule(key=st.sampled_from(KEY_POOL), ns=st.sampled_from(NS_POOL))
        def switch(self, key: str, ns: str) -> None:
            self.key, self.ns = key, ns

        # -- value state, ON_READ_AND_WRITE ---------------------------------------------------------------------
        @precondition(lambda self: self.kind == "value")
        @rule(dt=TICKS, v=st.integers(0, 99))
        def value_update(self, dt: int, v: int) -> None:
            self.clock.advance(dt)
            self._state(VALUE).update(v)
            self.values[self._where()] = (v, self.clock.now_ms())

        @precondition(lambda self: self.kind == "value")
        @rule(dt=TICKS)
        def value_read(self, dt: int) -> None:
            self.clock.advance(dt)
            got = self._state(VALUE).value()
            expected = self._read(self.values, self._where())
            assert got == expected, f"TTL-2: value() {self._program('read')}: expected {expected!r}, got {got!r}"

        # -- list state, ON_CREATE_AND_WRITE, merged across namespaces ------------------------------------------
        @precondition(lambda self: self.kind == "list")
        @rule(dt=TICKS, v=st.integers(0, 99))
        def list_add(self, dt: int, v: int) -> None:
            self.clock.advance(dt)
            self._state(LIST).add(v)
            self.lists.setdefault(self._where(), []).append((v, self.clock.now_ms()))

        @precondition(lambda self: self.kind == "list")
        @rule(dt=TICKS)
        def list_read(self, dt: int) -> None:
            self.clock.advance(dt)
            got = self._state(LIST).get()
            alive = sorted(v for v, stamp in self.lists.get(self._where(), []) if self._alive(stamp))
            assert sorted(got or []) == alive and (got is None) == (not alive), (
                f"TTL-4: get() {self._program('read')}: expected the elements {alive} (None when none), got {got!r}"
            )

        @precondition(lambda self: self.kind == "list")
        @rule(dt=TICKS, sources=st.lists(st.sampled_from(NS_POOL), min_size=1, max_size=2, unique=True))
        def list_merge(self, dt: int, sources: list[str]) -> None:
            """Each element moves with its timestamp (TTL-4): a merge is not a write."""
            self.clock.advance(dt)
            sources = [s for s in sources if s != self.ns]
            self._state(LIST).merge_namespaces(self.ns, sources)
            moved = [e for s in sources for e in self.lists.pop((self.key, s), [])]
            if moved:
                self.lists.setdefault(self._where(), []).extend(moved)

        # -- map state, ON_READ_AND_WRITE: each read refreshes what it returns ----------------------------------
        @precondition(lambda self: self.kind == "map")
        @rule(dt=TICKS, uk=st.sampled_from(USER_KEYS), v=st.integers(0, 99))
        def map_put(self, dt: int, uk: str, v: int) -> None:
            self.clock.advance(dt)
            self._state(MAP).put(uk, v)
            self.maps.setdefault(self._where(), {})[uk] = (v, self.clock.now_ms())

        def _map_read(self, uk: str) -> int | None:
            return self._read(self.maps.get(self._where(), {}), uk)  # type: ignore[no-any-return]

        @precondition(lambda self: self.kind == "map")
        @rule(dt=TICKS, uk=st.sampled_from(USER_KEYS), contains=st.booleans())
        def map_get_or_contains(self, dt: int, uk: str, contains: bool) -> None:
            self.clock.advance(dt)
            state = self._state(MAP)
            got = state.contains(uk) if contains else state.get(uk)
            value = self._map_read(uk)
            expected = (value is not None) if contains else value
            call = f"contains({uk!r})" if contains else f"get({uk!r})"
            assert got == expected, f"TTL-2: {call} {self._program('read')}: expected {expected!r}, got {got!r}"

        @precondition(lambda self: self.kind == "map")
        @rule(dt=TICKS, stop_after=st.integers(0, 3), how=st.sampled_from(["items", "iterator"]))
        def map_iterate(self, dt: int, stop_after: int, how: str) -> None:
            """An iteration stopped after `stop_after` entries (3: run to its end) refreshes what it returned."""
            self.clock.advance(dt)
            state = self._state(MAP)
            entries = iter(state.items()) if how == "items" else state.iterator()
            returned = [entry for _, entry in zip(range(stop_after), entries, strict=False)]
            model = self.maps.get(self._where(), {})
            alive = {uk: v for uk, (v, stamp) in model.items() if self._alive(stamp)}
            for uk, v in returned:
                assert alive.get(uk) == v, (
                    f"TTL-1: {how}() {self._program('iterated')} returned {(uk, v)}; alive entries: {alive}"
                )
                self._map_read(uk)
            if stop_after == 3:
                assert dict(returned) == alive, (
                    f"TTL-1: {how}() {self._program('iterated')}: expected the entries {alive}, got {dict(returned)}"
                )

        @precondition(lambda self: self.kind == "map")
        @rule(dt=TICKS)
        def map_is_empty(self, dt: int) -> None:
            self.clock.advance(dt)
            got = self._state(MAP).is_empty()
            alive = [uk for uk, (_, stamp) in self.maps.get(self._where(), {}).items() if self._alive(stamp)]
            assert got == (not alive), f"TTL-1: is_empty() {self._program('read')}: alive entries {alive}, got {got}"

        # -- reducing state, ON_READ_AND_WRITE: an expired value is not folded into the next add ----------------
        @precondition(lambda self: self.kind == "reducing")
        @rule(dt=TICKS, v=st.sampled_from(["x", "y", "z"]))
        def reducing_add(self, dt: int, v: str) -> None:
            self.clock.advance(dt)
            self._state(REDUCING).add(v)
            stored = self.reduced.get(self._where())
            current = stored[0] if stored is not None and self._alive(stored[1]) else ""
            self.reduced[self._where()] = (current + v, self.clock.now_ms())

        @precondition(lambda self: self.kind == "reducing")
        @rule(dt=TICKS)
        def reducing_read(self, dt: int) -> None:
            self.clock.advance(dt)
            got = self._state(REDUCING).get()
            expected = self._read(self.reduced, self._where())
            assert got == expected, f"TTL-3: get() {self._program('read')}: expected {expected!r}, got {got!r}"

        # -- checkpoints and recovery -----------------------------------------------------------------------------
        def _checkpoint(self) -> Any:
            self.checkpoint_id += 1
            location = location_for(self.storage, self.checkpoint_id, "ttl-model")
            handle = snapshot_now(self.backend, location, self.checkpoint_id)
            self.backend.notify_checkpoint_complete(self.checkpoint_id)
            return handle

        @rule()
        def checkpoint_fail_and_recover(self) -> None:
            """A checkpoint, then the backend is lost and a new one restores it on the same clock: every entry
            expires at the instant it would have (TTL-6). Through the changelog backend, the checkpoint holds the
            changes logged since the materialization taken right after the previous recovery (the first checkpoint
            after a restore materializes, CL-6), and the restore replays them."""
            handle = self._checkpoint()
            self.backend.dispose()
            self.backend = keyed_backend(self.state_backend, clock=self.clock, restore=[handle] if handle else [])
            self._checkpoint()

        def teardown(self) -> None:
            self.backend.dispose()
            shutil.rmtree(self.tmp, ignore_errors=True)

    return TtlMachine


@pytest.mark.tier("model")
@pytest.mark.capability("ttl")
@pytest.mark.requirement("TTL-1", "TTL-2", "TTL-3", "TTL-4", "TTL-6", "KB-RESTORE-1")
@pytest.mark.parametrize("kind", ["list", "map", "reducing", "value"])
def test_random_programs_with_a_ttl_match_the_model(certification: Any, kind: str) -> None:
    machine = make_machine(lambda directory: certification.new_backend(directory), kind)
    run_state_machine_as_test(machine, settings=settings(stateful_step_count=30, deadline=None))
