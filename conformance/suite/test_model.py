"""Model-based tier: random programs of state operations (value, list, map, reducing and aggregating state, merges of
namespaces, timers), key and namespace switches, checkpoints (completed, aborted or never confirmed, taken at once or
with steps between their synchronous and asynchronous parts), failures that
restore the latest checkpoint not aborted (the model rolls back with it), restores at other parallelisms and round
trips through the reference backend, checked against a plain-dict model that shares no code with the backend under
test. A failure prints the shrunk program (the steps of `BackendMachine`)."""

from __future__ import annotations

import copy
import shutil
import tempfile
import weakref
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from statecert.conformance.capabilities import declared, supports
from statecert.conformance.helpers import CHECKPOINT_OUTCOMES, conclude_checkpoint
from statecert.conformance.suite.test_keyed_state_properties import Sum
from statecert.reference.checkpointing import PendingSubtaskSnapshot, complete_snapshot, create_subtasks, take_snapshot
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.keyed_backend import CheckpointOptions
from statecert.spec.keygroups import assign_to_key_group, operator_index_for_key_group
from statecert.spec.metadata import CheckpointKind
from statecert.spec.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)

MAX_PARALLELISMS = (16, 7, 1000, 1)
"""The machine's max parallelisms, one drawn per program: powers of two, where taking a hash's low bits agrees with
Flink's modulo (KG-2), and others, where it does not; a failing program shrinks towards the first."""
KEYS = StringSerializer()
NAMESPACES = StringSerializer()
KEY_POOL = [f"k{i}" for i in range(6)]
NS_POOL = ["n0", "n1", "n2"]
VALUE = ValueStateDescriptor("value", serializer=LongSerializer())
LIST = ListStateDescriptor("list", element_serializer=LongSerializer())
MAP = MapStateDescriptor("map", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())
REDUCING = ReducingStateDescriptor("reducing", reduce_function=lambda a, b: a + b, serializer=LongSerializer())
AGGREGATING = AggregatingStateDescriptor(
    "aggregating", aggregate_function=Sum(), accumulator_serializer=LongSerializer()
)
INTS = st.integers(-(2**40), 2**40)
MODEL = ("values", "lists", "maps", "sums", "merged", "timers")
"""The machine's attributes that are the model's state, which a restore of an earlier checkpoint rolls back."""


def make_machine(new_backend: Any) -> type[RuleBasedStateMachine]:
    class BackendMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.tmp = tempfile.mkdtemp(prefix="statecert-model-")
            # removed when the machine goes, even if creating a backend below or disposing one in teardown raised
            weakref.finalize(self, shutil.rmtree, self.tmp, True)
            self.backend = new_backend(self.tmp)
            self.canonical = supports(declared(self.backend), "canonical_savepoints")
            self.rescaling = supports(declared(self.backend), "rescaling")
            self.storage = FileSystemCheckpointStorage(f"{self.tmp}/c", savepoint_dir=f"{self.tmp}/sp")
            self.access = self.storage.create_checkpoint_storage("model")
            self.parallelism = 1
            self.local_dir = f"{self.tmp}/local"
            self.max_parallelism = MAX_PARALLELISMS[0]
            self.subtasks: list[Any] = []  # created by `start`, the program's first step
            self.checkpoint_id = 0
            self.key, self.ns = KEY_POOL[0], NS_POOL[0]
            # the model: (key, namespace) -> value / list / dict
            self.values: dict[tuple[str, str], int] = {}
            self.lists: dict[tuple[str, str], list[int]] = {}
            self.maps: dict[tuple[str, str], dict[str, int]] = {}
            self.sums: dict[str, dict[tuple[str, str], int]] = {"reducing": {}, "aggregating": {}}
            self.merged: set[tuple[str, str]] = set()  # lists whose element order a merge left open (KS-MERGE-1)
            # timers (chapter TM): (kind, key, namespace, timestamp) registered and not yet fired or deleted
            self.timers_supported = supports(declared(self.backend), "timers")
            self.timers: set[tuple[str, str, str, int]] = set()
            self.fired: list[tuple[str, str, str, int]] = []
            # the model's clocks: the time of the last advance of each kind since the subtasks were created or
            # restored (a new or restored timer service starts at Long.MIN_VALUE, TM-8)
            self.now: dict[str, int] = {}
            # the checkpoint a failure restores (the latest not aborted, confirmed or not) and the model at it
            self.restorable: tuple[Any, dict[str, Any]] | None = None
            # a checkpoint whose synchronous parts were taken and whose asynchronous parts have not run yet: its
            # location, id, each subtask's pending snapshot by index, and the model at its call (KB-SNAP-2, KB-SNAP-3)
            self.pending: tuple[Any, int, dict[int, PendingSubtaskSnapshot], dict[str, Any]] | None = None

        def _owner(self, key: str) -> Any:
            key_group = assign_to_key_group(KEYS.key_hash(key), self.max_parallelism)
            return self.subtasks[operator_index_for_key_group(self.max_parallelism, self.parallelism, key_group)].keyed

        def _backend_for(self, key: str) -> Any:
            backend = self._owner(key)
            backend.set_current_key(key)
            return backend

        def _state(self, descriptor: Any, key: str | None = None, ns: str | None = None) -> Any:
            backend = self._backend_for(key or self.key)
            return backend.get_partitioned_state(ns or self.ns, descriptor, NAMESPACES)

        @initialize(max_parallelism=st.sampled_from(MAX_PARALLELISMS))
        def start(self, max_parallelism: int) -> None:
            """The job's one subtask at the drawn max parallelism, which every later snapshot and restore keeps."""
            self.max_parallelism = max_parallelism
            self.subtasks = create_subtasks(self.backend, KEYS, 1, max_parallelism, local_dir=self.local_dir)

        @rule(key=st.sampled_from(KEY_POOL))
        def switch_key(self, key: str) -> None:
            self.key = key

        @rule(ns=st.sampled_from(NS_POOL))
        def switch_namespace(self, ns: str) -> None:
            self.ns = ns

        @rule(v=INTS)
        def value_update(self, v: int) -> None:
            self._state(VALUE).update(v)
            self.values[(self.key, self.ns)] = v

        @rule()
        def value_clear(self) -> None:
            self._state(VALUE).clear()
            self.values.pop((self.key, self.ns), None)

        @rule()
        def value_update_none(self) -> None:
            self._state(VALUE).update(None)  # clears (KS-VALUE-3)
            self.values.pop((self.key, self.ns), None)

        @rule(v=INTS)
        def list_add(self, v: int) -> None:
            self._state(LIST).add(v)
            self.lists.setdefault((self.key, self.ns), []).append(v)

        @rule(vs=st.lists(INTS, max_size=3))
        def list_add_all(self, vs: list[int]) -> None:
            self._state(LIST).add_all(vs)
            if vs:
                self.lists.setdefault((self.key, self.ns), []).extend(vs)

        @rule(vs=st.lists(INTS, max_size=3))
        def list_update(self, vs: list[int]) -> None:
            self._state(LIST).update(vs)
            self.merged.discard((self.key, self.ns))
            if vs:
                self.lists[(self.key, self.ns)] = list(vs)
            else:
                self.lists.pop((self.key, self.ns), None)

        @rule(uk=st.sampled_from(["a", "b", "c"]), v=INTS)
        def map_put(self, uk: str, v: int) -> None:
            self._state(MAP).put(uk, v)
            self.maps.setdefault((self.key, self.ns), {})[uk] = v

        @rule(entries=st.dictionaries(st.sampled_from(["a", "b", "c"]), INTS, max_size=3))
        def map_put_all(self, entries: dict[str, int]) -> None:
            self._state(MAP).put_all(entries)
            if entries:
                self.maps.setdefault((self.key, self.ns), {}).update(entries)

        @rule(uk=st.sampled_from(["a", "b", "c"]))
        def map_remove(self, uk: str) -> None:
            self._state(MAP).remove(uk)
            entries = self.maps.get((self.key, self.ns), {})
            entries.pop(uk, None)
            if not entries:
                self.maps.pop((self.key, self.ns), None)

        @rule(v=INTS, namespaces=st.lists(st.sampled_from(NS_POOL), min_size=1, unique=True))
        def fold_add(self, v: int, namespaces: list[str]) -> None:
            """Adds `v` to reducing and aggregating state in each of `namespaces` of the current key, as a sliding
            window operator adds an element to every window it falls in."""
            for ns in namespaces:
                for kind, descriptor in (("reducing", REDUCING), ("aggregating", AGGREGATING)):
                    self._state(descriptor, ns=ns).add(v)
                    self.sums[kind][(self.key, ns)] = self.sums[kind].get((self.key, ns), 0) + v

        @rule(every_other=st.booleans(), one=st.sampled_from(NS_POOL))
        def merge_namespaces(self, every_other: bool, one: str) -> None:
            """Merges every other namespace, or `one`, into the current namespace in list, reducing and aggregating
            state (KS-MERGE-1, KS-MERGE-2); the order of a merged list is left open, so it is compared as a multiset
            from then on."""
            sources = [s for s in NS_POOL if s != self.ns] if every_other else [one] if one != self.ns else []
            target = (self.key, self.ns)
            for descriptor in (LIST, REDUCING, AGGREGATING):
                self._state(descriptor).merge_namespaces(self.ns, sources)
            moved = [v for s in sources for v in self.lists.pop((self.key, s), [])]
            self.merged.difference_update((self.key, s) for s in sources)
            if moved:
                self.lists.setdefault(target, []).extend(moved)
                self.merged.add(target)
            for sums in self.sums.values():
                folded = [sums.pop((self.key, s)) for s in sources if (self.key, s) in sums]
                if folded:
                    sums[target] = sums.get(target, 0) + sum(folded)

        def _check(self, key: str, ns: str) -> None:
            where = (key, ns)
            got = self._state(VALUE, key, ns).value()
            assert got == self.values.get(where), (
                f"KS-VALUE-1: value() at {where}: expected {self.values.get(where)}, got {got}"
            )
            got_list, want = self._state(LIST, key, ns).get(), self.lists.get(where)
            if where in self.merged and got_list is not None and want is not None:
                got_list, want = sorted(got_list), sorted(want)
            assert got_list == want, f"KS-LIST-1: get() at {where}: expected {want}, got {got_list}"
            got_map = dict(self._state(MAP, key, ns).items())
            assert got_map == self.maps.get(where, {}), (
                f"KS-MAP-2: items() at {where}: expected {self.maps.get(where, {})}, got {got_map}"
            )
            for kind, descriptor in (("reducing", REDUCING), ("aggregating", AGGREGATING)):
                got = self._state(descriptor, key, ns).get()
                assert got == self.sums[kind].get(where), (
                    f"KS-MERGE-1: {kind} get() at {where}: expected {self.sums[kind].get(where)}, got {got}"
                )

        # -- timers ------------------------------------------------------------------------------------------------
        def on_event_time(self, timer: Any) -> None:
            self._fired("event", timer)

        def on_processing_time(self, timer: Any) -> None:
            self._fired("processing", timer)

        def _fired(self, kind: str, timer: Any) -> None:
            backend = self._owner(timer.key)
            assert backend.get_current_key() == timer.key, f"TM-2: {kind} timer {timer} fired with another current key"
            self.fired.append((kind, timer.key, timer.namespace, timer.timestamp))

        def _service(self, backend: Any) -> Any:
            return backend.get_timer_service("model-timers", NAMESPACES, self)

        @precondition(lambda self: self.timers_supported)
        @rule(kind=st.sampled_from(["event", "processing"]), time=st.integers(0, 4), delete=st.booleans())
        def timer_register_or_delete(self, kind: str, time: int, delete: bool) -> None:
            service = self._service(self._backend_for(self.key))
            timer = (kind, self.key, self.ns, time)
            if delete:
                getattr(service, f"delete_{kind}_time_timer")(self.ns, time)
                self.timers.discard(timer)
            else:
                getattr(service, f"register_{kind}_time_timer")(self.ns, time)
                self.timers.add(timer)

        @precondition(lambda self: self.timers_supported)
        @rule(kind=st.sampled_from(["event", "processing"]), time=st.integers(0, 5))
        def timers_advance(self, kind: str, time: int) -> None:
            # Time moves forward only (TM-2): a drawn time before the clock advances to the clock itself, and
            # every timer registered at or before it since the last advance is due in this one (TM-5).
            now = self.now[kind] = max(time, self.now.get(kind, time))
            self.fired.clear()
            for s in self.subtasks:
                service = self._service(s.keyed)
                if kind == "event":
                    service.advance_watermark(now)
                else:
                    service.advance_processing_time(now)
            due = {t for t in self.timers if t[0] == kind and t[3] <= now}
            assert sorted(self.fired) == sorted(due), (
                f"TM-6: advance {kind} time to {now}: expected {sorted(due)} to fire once each, "
                f"got {sorted(self.fired)}"
            )
            self.timers -= due

        def _snapshot(self, kind: CheckpointKind, outcome: str = "completed") -> Any:
            """A checkpoint or savepoint of every subtask, then concluded as `outcome` says (`conclude_checkpoint`)."""
            self.checkpoint_id += 1
            location = (
                self.access.initialize_location_for_savepoint(self.checkpoint_id)
                if kind.is_savepoint
                else self.access.initialize_location_for_checkpoint(self.checkpoint_id)
            )
            pointer = take_snapshot(self.subtasks, location, self.checkpoint_id, self.max_parallelism, kind=kind)
            operator = self.storage.load_checkpoint(pointer).operator("op")
            conclude_checkpoint([s.keyed for s in self.subtasks], location, self.checkpoint_id, outcome)
            return operator

        def _model(self) -> dict[str, Any]:
            return copy.deepcopy({name: getattr(self, name) for name in MODEL})

        def _restore(self, backend: Any, operator: Any, parallelism: int) -> None:
            for s in self.subtasks:
                s.dispose()  # cancels a pending checkpoint's asynchronous parts (KB-SNAP-6): it never completes
            if self.pending is not None:
                self.pending[0].dispose_on_failure()
                self.pending = None
            self.parallelism = parallelism
            self.now.clear()  # restored services start at Long.MIN_VALUE (TM-8)
            self.subtasks = create_subtasks(
                backend, KEYS, parallelism, self.max_parallelism, restore_from=operator, local_dir=self.local_dir
            )

        def _next_parallelism(self, drawn: int) -> int:
            """The drawn parallelism (at most the max parallelism), or the current one for a backend without
            rescaling: every restore of it must hand it handles of its own key-group ranges (SB-3 lets it refuse
            others)."""
            return min(drawn, self.max_parallelism) if self.rescaling else self.parallelism

        @precondition(lambda self: self.pending is None)
        @rule()
        def checkpoint_call(self) -> None:
            """The synchronous part of a checkpoint in every subtask; the asynchronous parts run in a later step,
            after whatever the program does meanwhile, which must not reach the checkpoint (KB-SNAP-3)."""
            self.checkpoint_id += 1
            location = self.access.initialize_location_for_checkpoint(self.checkpoint_id)
            options = CheckpointOptions()
            pending = {s.index: s.snapshot_call(self.checkpoint_id, location, options) for s in self.subtasks}
            self.pending = (location, self.checkpoint_id, pending, self._model())

        @precondition(lambda self: self.pending is not None)
        @rule(outcome=st.sampled_from(CHECKPOINT_OUTCOMES))
        def checkpoint_completes(self, outcome: str) -> None:
            """The asynchronous parts of the pending checkpoint run, its `_metadata` is written and it ends as
            `outcome` says; a failure after it restores what the program had at its call."""
            assert self.pending is not None, "KB-SNAP-1: the precondition holds a pending checkpoint"
            location, checkpoint_id, pending, model = self.pending
            self.pending = None
            self._change_every_entry()  # whatever steps ran since the call, every entry changes before the parts run
            states = {index: subtask.run() for index, subtask in pending.items()}
            pointer = complete_snapshot(location, checkpoint_id, states, self.max_parallelism)
            operator = self.storage.load_checkpoint(pointer).operator("op")
            self._check_checkpoint(checkpoint_id, operator, model)
            conclude_checkpoint([s.keyed for s in self.subtasks], location, checkpoint_id, outcome)
            if outcome != "aborted":
                self.restorable = (operator, model)

        def _change_every_entry(self) -> None:
            """Write every stored entry again with another value (a value or user value plus one, one more list
            element, one more added to a fold), in the backend and the model."""
            for key, ns in list(self.values):
                self.values[(key, ns)] += 1
                self._state(VALUE, key, ns).update(self.values[(key, ns)])
            for key, ns in list(self.lists):
                self.lists[(key, ns)].append(1)
                self._state(LIST, key, ns).add(1)
            for key, ns in list(self.maps):
                for user_key in self.maps[(key, ns)]:
                    self.maps[(key, ns)][user_key] += 1
                self._state(MAP, key, ns).put_all(self.maps[(key, ns)])
            for kind, descriptor in (("reducing", REDUCING), ("aggregating", AGGREGATING)):
                for key, ns in list(self.sums[kind]):
                    self.sums[kind][(key, ns)] += 1
                    self._state(descriptor, key, ns).add(1)

        def _check_checkpoint(self, checkpoint_id: int, operator: Any, model: dict[str, Any]) -> None:
            """Every entry of checkpoint `checkpoint_id`, restored into subtasks of its own, and its number of
            timers, are the model's at its call; the running subtasks and the model are left as they were."""
            live, live_model = self.subtasks, {name: getattr(self, name) for name in MODEL}
            self.subtasks = create_subtasks(
                self.backend,
                KEYS,
                self.parallelism,
                self.max_parallelism,
                restore_from=operator,
                local_dir=self.local_dir,
            )
            for name, value in model.items():
                setattr(self, name, value)
            try:
                for key in KEY_POOL:
                    for ns in NS_POOL:
                        self._check(key, ns)
                self.timer_counts_match_the_model()
            except AssertionError as exc:
                raise AssertionError(f"KB-SNAP-3: checkpoint {checkpoint_id}, restored as of its call: {exc}") from exc
            finally:
                for s in self.subtasks:
                    s.dispose()
                self.subtasks = live
                for name, value in live_model.items():
                    setattr(self, name, value)

        @precondition(lambda self: self.pending is None)
        @rule(parallelism=st.integers(1, 4))
        def checkpoint_and_restore(self, parallelism: int) -> None:
            operator = self._snapshot(CheckpointKind.CHECKPOINT)
            self.restorable = (operator, self._model())
            self._restore(self.backend, operator, self._next_parallelism(parallelism))

        @precondition(lambda self: self.pending is None)
        @rule(outcome=st.sampled_from(CHECKPOINT_OUTCOMES))
        def checkpoint(self, outcome: str) -> None:
            operator = self._snapshot(CheckpointKind.CHECKPOINT, outcome)
            if outcome != "aborted":
                self.restorable = (operator, self._model())

        @precondition(lambda self: self.restorable is not None)
        @rule(parallelism=st.integers(1, 4))
        def fail_and_restore_the_latest_checkpoint(self, parallelism: int) -> None:
            """The job fails and restores the latest checkpoint not aborted, whether or not its completion reached
            the backend (KB-RESTORE-1): what was done since is undone, in the model too."""
            assert self.restorable is not None, "KB-RESTORE-1: the precondition holds a restorable checkpoint"
            operator, model = self.restorable
            self._restore(self.backend, operator, self._next_parallelism(parallelism))
            for name, value in copy.deepcopy(model).items():
                setattr(self, name, value)

        @precondition(lambda self: self.canonical and self.pending is None)
        @rule(parallelism=st.integers(1, 4))
        def round_trip_through_reference_backend(self, parallelism: int) -> None:
            # The reference backend restores at the parallelism the backend will: its canonical savepoint then has
            # the key-group ranges the backend's restore gets.
            parallelism = self._next_parallelism(parallelism)
            operator = self._snapshot(CheckpointKind.SAVEPOINT_CANONICAL)
            self._restore(HashMapStateBackend(), operator, parallelism)
            operator = self._snapshot(CheckpointKind.SAVEPOINT_CANONICAL)
            self._restore(self.backend, operator, parallelism)
            self.restorable = (operator, self._model())  # until the next checkpoint, a failure restores the savepoint

        @invariant()
        def current_entries_match_the_model(self) -> None:
            self._check(self.key, self.ns)

        @invariant()
        def timer_counts_match_the_model(self) -> None:
            if self.timers_supported:
                services = [self._service(s.keyed) for s in self.subtasks]
                for kind in ("event", "processing"):
                    got = sum(getattr(service, f"num_{kind}_time_timers")() for service in services)
                    want = sum(1 for t in self.timers if t[0] == kind)
                    assert got == want, f"TM-6: num_{kind}_time_timers() over all subtasks: expected {want}, got {got}"

        @rule()
        def every_entry_matches_the_model(self) -> None:
            for key in KEY_POOL:
                for ns in NS_POOL:
                    self._check(key, ns)

        def teardown(self) -> None:
            try:
                for s in self.subtasks:
                    s.dispose()
            finally:
                shutil.rmtree(self.tmp, ignore_errors=True)

    return BackendMachine


@pytest.mark.tier("model")
@pytest.mark.requirement(
    "KS-3",
    "KB-RESTORE-1",
    "KB-RESTORE-2",
    "KB-SNAP-8",
    "KB-SNAP-9",
    "SP-1",
    "KS-LIST-1",
    "KS-MAP-2",
    "KS-VALUE-1",
    "KS-VALUE-3",
    "KS-MERGE-1",
    "KS-MERGE-2",
    "KS-RED-1",
    "KS-AGG-1",
    "TM-2",
    "TM-3",
    "TM-4",
    "TM-5",
    "TM-6",
    "TM-7",
)
def test_random_programs_match_the_model(certification: Any) -> None:
    machine = make_machine(lambda directory: certification.new_backend(directory))
    run_state_machine_as_test(machine, settings=settings(stateful_step_count=25, deadline=None))
