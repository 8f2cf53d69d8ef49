"""Model-based tier for state with a time-to-live: random programs of writes (of one element or entry, and of several
at once), reads, clears, map iterations stopped at any entry, list merges, clock steps, checkpoints (completed,
aborted or never confirmed), recoveries from the latest checkpoint not aborted (at parallelism 1 to 3 for a backend
with rescaling; the model rolls back, the clock does not) and round trips through the reference backend by canonical
savepoint, checked against a model that keeps each entry's last-access timestamp (chapter TTL). Each program draws
its update type; a read updates the model as TTL-2 says it refreshes: only with `ON_READ_AND_WRITE`, and only what it
returns. Certifying through the changelog backend (`--changelog`), a recovery replays the changes logged since the
last materialization, so this also checks that replay leaves each timestamp as the live program did (CL-4), also when
a restore keeps only some of a log's key groups (KB-RESTORE-2)."""

from __future__ import annotations

import copy
import shutil
import tempfile
import weakref
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test

from statecert.conformance.capabilities import declared, supports
from statecert.conformance.helpers import CHECKPOINT_OUTCOMES, conclude_checkpoint, key_group_of, keyed_backend
from statecert.conformance.suite.test_ttl import folding
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.keyed_backend import CheckpointOptions, SnapshotType
from statecert.spec.keygroups import key_group_range_for_operator
from statecert.spec.state import (
    ListStateDescriptor,
    ManualClock,
    MapStateDescriptor,
    TtlConfig,
    TtlUpdateType,
    ValueStateDescriptor,
)

TTL_MS = 10
ON_READ = TtlConfig(TTL_MS, TtlUpdateType.ON_READ_AND_WRITE)
ON_WRITE = TtlConfig(TTL_MS, TtlUpdateType.ON_CREATE_AND_WRITE)
NAMESPACES = StringSerializer()
MAX_PARALLELISM = 16
KEY_POOL = ["k0", "k2", "k3"]  # key groups 1, 2 and 10 of 16: k3 moves to another subtask at parallelism 2 and 3
NS_POOL = ["n0", "n1", "n2"]
TICKS = st.integers(0, 7)  # every step first moves the clock by this many ms: entries expire within a few steps
USER_KEYS = ["a", "b", "c"]


def descriptors(ttl: TtlConfig, aggregating: bool) -> dict[str, Any]:
    """The machine's state of each kind with `ttl`; "reducing" is reducing or aggregating state of strings
    concatenated in the order they are added (the two fold alike)."""
    return {
        "value": ValueStateDescriptor("ttl-value", ttl, serializer=LongSerializer()),
        "list": ListStateDescriptor("ttl-list", ttl, element_serializer=LongSerializer()),
        "map": MapStateDescriptor(
            "ttl-map", ttl, user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer()
        ),
        "reducing": folding("aggregating" if aggregating else "reducing", ttl),
    }


Where = tuple[str, str]  # (key, namespace)


def make_machine(new_backend: Any, kind: str) -> type[RuleBasedStateMachine]:
    """A machine over one state kind (value, list, map or reducing), so that its writes, reads and time steps meet
    within a few steps; each program draws its update type (and reducing or aggregating state)."""

    class TtlMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.kind = kind
            self.tmp = tempfile.mkdtemp(prefix="statecert-ttl-model-")
            # removed when the machine goes, even if creating a backend below or disposing one in teardown raised
            weakref.finalize(self, shutil.rmtree, self.tmp, True)
            self.state_backend = new_backend(self.tmp)
            self.rescaling = supports(declared(self.state_backend), "rescaling")
            self.canonical = supports(declared(self.state_backend), "canonical_savepoints")
            self.storage = FileSystemCheckpointStorage(f"{self.tmp}/c", savepoint_dir=f"{self.tmp}/sp")
            self.clock = ManualClock(1_700_000_000_000)  # an epoch time: every byte of a timestamp matters (IF-5)
            self.parallelism = 1
            self.backends = [self._backend(self.state_backend, 0, [])]
            self.checkpoint_id = 0
            self.key, self.ns = KEY_POOL[0], NS_POOL[0]
            # the model: each entry with its last-access timestamp
            self.values: dict[Where, tuple[int, int]] = {}
            self.lists: dict[Where, list[tuple[int, int]]] = {}
            self.maps: dict[Where, dict[str, tuple[int, int]]] = {}
            self.reduced: dict[Where, tuple[str, int]] = {}
            self.restorable: tuple[list[Any], dict[str, Any]] = ([], self._model())
            self._checkpoint()  # through the changelog backend, a materialization: later checkpoints log changes
            self.on_read = True
            self.states = descriptors(ON_READ, aggregating=False)

        @initialize(on_read=st.booleans(), aggregating=st.booleans())
        def choose_the_ttl(self, on_read: bool, aggregating: bool) -> None:
            self.on_read = on_read
            self.states = descriptors(ON_READ if on_read else ON_WRITE, aggregating)

        def _alive(self, stamp: int) -> bool:
            return stamp + TTL_MS > self.clock.now_ms()

        def _backend(self, state_backend: Any, index: int, handles: list[Any]) -> Any:
            """Subtask `index`'s keyed backend at the current parallelism, restored from what `handles` hold of its
            key groups (KB-RESTORE-2)."""
            key_groups = key_group_range_for_operator(MAX_PARALLELISM, self.parallelism, index)
            ours = [part for h in handles if (part := h.intersection(key_groups)) is not None]
            return keyed_backend(
                state_backend,
                max_parallelism=MAX_PARALLELISM,
                key_group_range=key_groups,
                clock=self.clock,
                restore=ours,
            )

        def _state(self) -> Any:
            descriptor = self.states[self.kind]
            key_group = key_group_of(self.key, MAX_PARALLELISM)
            backend = next(b for b in self.backends if key_group in b.key_group_range)
            backend.set_current_key(self.key)
            return backend.get_partitioned_state(self.ns, descriptor, NAMESPACES)

        def _read(self, entries: dict[Any, tuple[Any, int]], at: Any) -> Any:
            """The model's read of the entry at `at` in `entries`: its value, refreshed only by an ON_READ_AND_WRITE
            read (TTL-2); None, and gone, when absent or expired."""
            stored = entries.pop(at, None)
            if stored is None or not self._alive(stored[1]):
                return None
            entries[at] = (stored[0], self.clock.now_ms() if self.on_read else stored[1])
            return stored[0]

        def _read_everything(self) -> None:
            """Reads every key and namespace of the machine's state kind, checked against the model."""
            at = self.key, self.ns
            read = {
                "value": lambda: self.value_read(0),
                "list": lambda: self.list_read(0),
                "map": lambda: self.map_iterate(0, 3, "items"),
                "reducing": lambda: self.reducing_read(0),
            }[self.kind]
            for key in KEY_POOL:
                for ns in NS_POOL:
                    self.key, self.ns = key, ns
                    read()
            self.key, self.ns = at

        def _where(self) -> Where:
            return (self.key, self.ns)

        def _program(self, what: str) -> str:
            return (
                f"{what} at {self.clock.now_ms()} ms, key {self.key!r}, namespace {self.ns!r}, TTL {TTL_MS} ms "
                f"{'ON_READ_AND_WRITE' if self.on_read else 'ON_CREATE_AND_WRITE'}, parallelism {self.parallelism}"
            )

        @rule(key=st.sampled_from(KEY_POOL), ns=st.sampled_from(NS_POOL))
        def switch(self, key: str, ns: str) -> None:
            self.key, self.ns = key, ns

        @rule(dt=TICKS)
        def clear(self, dt: int) -> None:
            self.clock.advance(dt)
            self._state().clear()
            where = self._where()
            self.values.pop(where, None), self.lists.pop(where, None)
            self.maps.pop(where, None), self.reduced.pop(where, None)

        # -- value state ----------------------------------------------------------------------------------------
        @precondition(lambda self: self.kind == "value")
        @rule(dt=TICKS, v=st.integers(0, 99))
        def value_update(self, dt: int, v: int) -> None:
            self.clock.advance(dt)
            self._state().update(v)
            self.values[self._where()] = (v, self.clock.now_ms())

        @precondition(lambda self: self.kind == "value")
        @rule(dt=TICKS)
        def value_read(self, dt: int) -> None:
            self.clock.advance(dt)
            got = self._state().value()
            expected = self._read(self.values, self._where())
            assert got == expected, f"TTL-2: value() {self._program('read')}: expected {expected!r}, got {got!r}"

        # -- list state, merged across namespaces ---------------------------------------------------------------
        @precondition(lambda self: self.kind == "list")
        @rule(dt=TICKS, v=st.integers(0, 99))
        def list_add(self, dt: int, v: int) -> None:
            self.clock.advance(dt)
            self._state().add(v)
            self.lists.setdefault(self._where(), []).append((v, self.clock.now_ms()))

        @precondition(lambda self: self.kind == "list")
        @rule(dt=TICKS, vs=st.lists(st.integers(0, 99), max_size=2))
        def list_add_all(self, dt: int, vs: list[int]) -> None:
            """Stamps only the elements it adds (TTL-4): those already there keep their timestamps."""
            self.clock.advance(dt)
            self._state().add_all(vs)
            if vs:
                self.lists.setdefault(self._where(), []).extend((v, self.clock.now_ms()) for v in vs)

        @precondition(lambda self: self.kind == "list")
        @rule(dt=TICKS)
        def list_read(self, dt: int) -> None:
            self.clock.advance(dt)
            got = self._state().get()
            alive = [(v, stamp) for v, stamp in self.lists.pop(self._where(), []) if self._alive(stamp)]
            if alive:
                now = self.clock.now_ms()
                self.lists[self._where()] = [(v, now if self.on_read else stamp) for v, stamp in alive]
            expected = sorted(v for v, _ in alive)
            assert sorted(got or []) == expected and (got is None) == (not alive), (
                f"TTL-4: get() {self._program('read')}: expected the elements {expected} (None when none), got {got!r}"
            )

        @precondition(lambda self: self.kind == "list")
        @rule(dt=TICKS, vs=st.lists(st.integers(0, 99), max_size=2))
        def list_update(self, dt: int, vs: list[int]) -> None:
            self.clock.advance(dt)
            self._state().update(vs)
            self.lists.pop(self._where(), None)
            if vs:
                self.lists[self._where()] = [(v, self.clock.now_ms()) for v in vs]

        @precondition(lambda self: self.kind == "list")
        @rule(dt=TICKS, sources=st.lists(st.sampled_from(NS_POOL), min_size=1, max_size=2, unique=True))
        def list_merge(self, dt: int, sources: list[str]) -> None:
            """Each element moves with its timestamp (TTL-4): a merge is not a write."""
            self.clock.advance(dt)
            sources = [s for s in sources if s != self.ns]
            self._state().merge_namespaces(self.ns, sources)
            moved = [e for s in sources for e in self.lists.pop((self.key, s), [])]
            if moved:
                self.lists.setdefault(self._where(), []).extend(moved)

        # -- map state: a read refreshes only what it returns ----------------------------------------------------
        @precondition(lambda self: self.kind == "map")
        @rule(dt=TICKS, uk=st.sampled_from(USER_KEYS), v=st.integers(0, 99))
        def map_put(self, dt: int, uk: str, v: int) -> None:
            self.clock.advance(dt)
            self._state().put(uk, v)
            self.maps.setdefault(self._where(), {})[uk] = (v, self.clock.now_ms())

        @precondition(lambda self: self.kind == "map")
        @rule(dt=TICKS, entries=st.dictionaries(st.sampled_from(USER_KEYS), st.integers(0, 99), max_size=2))
        def map_put_all(self, dt: int, entries: dict[str, int]) -> None:
            """Stamps only the entries it puts (TTL-4): the map's other entries keep their timestamps."""
            self.clock.advance(dt)
            self._state().put_all(entries)
            if entries:
                model = self.maps.setdefault(self._where(), {})
                model.update({uk: (v, self.clock.now_ms()) for uk, v in entries.items()})

        @precondition(lambda self: self.kind == "map")
        @rule(dt=TICKS, uk=st.sampled_from(USER_KEYS))
        def map_remove(self, dt: int, uk: str) -> None:
            self.clock.advance(dt)
            self._state().remove(uk)
            self.maps.get(self._where(), {}).pop(uk, None)

        def _map_read(self, uk: str) -> int | None:
            return self._read(self.maps.get(self._where(), {}), uk)  # type: ignore[no-any-return]

        @precondition(lambda self: self.kind == "map")
        @rule(dt=TICKS, uk=st.sampled_from(USER_KEYS), contains=st.booleans())
        def map_get_or_contains(self, dt: int, uk: str, contains: bool) -> None:
            self.clock.advance(dt)
            state = self._state()
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
            state = self._state()
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
            got = self._state().is_empty()
            alive = [uk for uk, (_, stamp) in self.maps.get(self._where(), {}).items() if self._alive(stamp)]
            # false while a live entry remains; with only expired entries left it may be either (TTL-3)
            assert not (alive and got), f"TTL-3: is_empty() {self._program('read')}: alive entries {alive}, got {got}"

        # -- reducing or aggregating state: an expired value is not folded into the next add ----------------------
        @precondition(lambda self: self.kind == "reducing")
        @rule(dt=TICKS, v=st.sampled_from(["x", "y", "z"]))
        def reducing_add(self, dt: int, v: str) -> None:
            self.clock.advance(dt)
            self._state().add(v)
            stored = self.reduced.get(self._where())
            current = stored[0] if stored is not None and self._alive(stored[1]) else ""
            self.reduced[self._where()] = (current + v, self.clock.now_ms())

        @precondition(lambda self: self.kind == "reducing")
        @rule(dt=TICKS)
        def reducing_read(self, dt: int) -> None:
            self.clock.advance(dt)
            got = self._state().get()
            expected = self._read(self.reduced, self._where())
            assert got == expected, f"TTL-3: get() {self._program('read')}: expected {expected!r}, got {got!r}"

        # -- checkpoints and recovery -----------------------------------------------------------------------------
        def _checkpoint(
            self, snapshot_type: SnapshotType = SnapshotType.CHECKPOINT, outcome: str = "completed"
        ) -> list[Any]:
            """A snapshot of every subtask, then concluded as `outcome` says (`conclude_checkpoint`); a checkpoint not
            aborted is the one a failure restores."""
            self.checkpoint_id += 1
            access = self.storage.create_checkpoint_storage("ttl-model")
            location = (
                access.initialize_location_for_checkpoint(self.checkpoint_id)
                if snapshot_type is SnapshotType.CHECKPOINT
                else access.initialize_location_for_savepoint(self.checkpoint_id)
            )
            options = CheckpointOptions(snapshot_type)
            handles = [h for b in self.backends if (h := b.snapshot(self.checkpoint_id, 0, location, options).run())]
            conclude_checkpoint(self.backends, location, self.checkpoint_id, outcome)
            if outcome != "aborted" and snapshot_type is SnapshotType.CHECKPOINT:
                self.restorable = (handles, self._model())
            return handles

        def _model(self) -> dict[str, Any]:
            return copy.deepcopy({name: getattr(self, name) for name in ("values", "lists", "maps", "reduced")})

        def _restore(self, state_backend: Any, handles: list[Any]) -> None:
            for b in self.backends:
                b.dispose()
            self.backends = [self._backend(state_backend, i, handles) for i in range(self.parallelism)]

        @rule(parallelism=st.integers(1, 3))
        def checkpoint_fail_and_recover(self, parallelism: int) -> None:
            """A checkpoint, then every subtask is lost and new ones restore it on the same clock, at the drawn
            parallelism for a backend with rescaling: every entry expires at the instant it would have (TTL-6).
            Through the changelog backend, the checkpoint holds the changes logged since the materialization taken
            right after the previous recovery (the first checkpoint after a restore materializes, CL-6), and the
            restore replays those of its key groups."""
            handles = self._checkpoint()
            self.parallelism = parallelism if self.rescaling else self.parallelism
            self._restore(self.state_backend, handles)
            self._checkpoint()

        @rule(outcome=st.sampled_from(CHECKPOINT_OUTCOMES))
        def checkpoint(self, outcome: str) -> None:
            self._checkpoint(outcome=outcome)

        @rule(dt=TICKS, parallelism=st.integers(1, 3))
        def fail_and_restore_the_latest_checkpoint(self, dt: int, parallelism: int) -> None:
            """The job fails, `dt` ms pass, and new subtasks restore the latest checkpoint not aborted (confirmed or
            not): what was done since is undone, in the model too, and every restored entry expires by the timestamp
            it had at that checkpoint (TTL-6)."""
            handles, model = self.restorable
            self.clock.advance(dt)
            self.parallelism = parallelism if self.rescaling else self.parallelism
            self._restore(self.state_backend, handles)
            for name, value in copy.deepcopy(model).items():
                setattr(self, name, value)
            self._checkpoint()

        @precondition(lambda self: self.canonical)
        @rule(dt=TICKS)
        def round_trip_through_the_reference_backend(self, dt: int) -> None:
            """A canonical savepoint restored by the reference backend, time passing there, and its canonical
            savepoint restored by ours: every list element and map entry keeps its own timestamp (TTL-6, IF-5)."""
            self._restore(HashMapStateBackend(), self._checkpoint(SnapshotType.SAVEPOINT_CANONICAL))
            self.clock.advance(dt)
            self._read_everything()  # in the reference backend: it reads the timestamps as ours wrote them
            self._restore(self.state_backend, self._checkpoint(SnapshotType.SAVEPOINT_CANONICAL))
            self._checkpoint()

        def teardown(self) -> None:
            try:
                for b in self.backends:
                    b.dispose()
            finally:
                shutil.rmtree(self.tmp, ignore_errors=True)

    return TtlMachine


@pytest.mark.tier("model")
@pytest.mark.capability("ttl")
@pytest.mark.requirement("TTL-1", "TTL-2", "TTL-3", "TTL-4", "TTL-6", "KB-RESTORE-1", "KB-RESTORE-2", "IF-5")
@pytest.mark.parametrize("kind", ["list", "map", "reducing", "value"])
def test_random_programs_with_a_ttl_match_the_model(certification: Any, kind: str) -> None:
    machine = make_machine(lambda directory: certification.new_backend(directory), kind)
    run_state_machine_as_test(machine, settings=settings(stateful_step_count=30, deadline=None))
