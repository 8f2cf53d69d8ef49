"""The keyed timer service (chapter TM): timers fire in timestamp order with their key current, once each, and
travel with their key groups through snapshots, restores, rescaling and canonical savepoints.

Every test checks the backend against a plain set of (key, namespace, timestamp) triples kept by the test."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from statecert.conformance.helpers import (
    REJECTED,
    STATE_NAMES,
    create_subtasks,
    first_canonical_entry,
    key_group_of,
    keyed_backend,
    location_for,
    owner_of,
    rewritten_canonical_stream,
    shown_name,
    snapshot_now,
)
from statecert.conformance.suite.test_keyed_state_properties import one_java_hash
from statecert.reference.checkpointing import take_snapshot
from statecert.reference.serializers import BooleanSerializer, LongSerializer, MsgpackSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.errors import CheckpointFormatError, UnsupportedFeatureError
from statecert.spec.keyed_backend import CheckpointOptions, SnapshotType
from statecert.spec.keygroups import KeyGroupRange
from statecert.spec.metadata import CheckpointKind
from statecert.spec.state import MapStateDescriptor, ValueStateDescriptor
from statecert.spec.timers import MAX_TIMESTAMP, MIN_TIMESTAMP, InternalTimer

NAMESPACES = LongSerializer()
WINDOW_SUM = ValueStateDescriptor("window-sum", serializer=LongSerializer())
Timer = tuple[str, int, int]  # key, namespace, timestamp

KEYS = st.text(alphabet="abcdefgh", min_size=1, max_size=3)
TIMERS = st.lists(st.tuples(KEYS, st.integers(0, 3), st.integers(-50, 200)), max_size=40)


@dataclass
class Recorder:
    """A Triggerable that records what fires and what the backend says the current key is at that moment."""

    backend: Any
    fired: list[tuple[str, Timer]] = field(default_factory=list)
    wrong_key: list[tuple[Any, Any]] = field(default_factory=list)
    on_fire: Any = None

    def _record(self, kind: str, timer: InternalTimer[Any, Any]) -> None:
        if self.backend.get_current_key() != timer.key:
            self.wrong_key.append((timer.key, self.backend.get_current_key()))
        self.fired.append((kind, (timer.key, timer.namespace, timer.timestamp)))
        if self.on_fire is not None:
            self.on_fire(kind, timer)

    def on_event_time(self, timer: InternalTimer[Any, Any]) -> None:
        self._record("event", timer)

    def on_processing_time(self, timer: InternalTimer[Any, Any]) -> None:
        self._record("processing", timer)


def service_of(backend: Any, name: str = "user-timers") -> tuple[Any, Recorder]:
    recorder = Recorder(backend)
    return backend.get_timer_service(name, NAMESPACES, recorder), recorder


def register(backend: Any, service: Any, timers: list[Timer], kind: str = "event") -> None:
    for key, namespace, time in timers:
        backend.set_current_key(key)
        if kind == "event":
            service.register_event_time_timer(namespace, time)
        else:
            service.register_processing_time_timer(namespace, time)


def fired_timers(recorder: Recorder, kind: str = "event") -> list[Timer]:
    return [timer for k, timer in recorder.fired if k == kind]


def assert_fired_in_order(
    recorder: Recorder, expected: set[Timer], call: str, kind: str = "event", rid: str = "TM-2"
) -> None:
    """The timers `expected` fired once each, in timestamp order, each with its key current; a failure names `rid`,
    the requirement the calling test checks with it (TM-2 for the order and the key, whatever it is)."""
    got = fired_timers(recorder, kind)
    assert sorted(got) == sorted(expected), (
        f"{rid}: {call}: expected the {kind}-time timers {sorted(expected)} to fire once each, got {sorted(got)}"
    )
    stamps = [t[2] for t in got]
    assert stamps == sorted(stamps), f"TM-2: {call}: expected timers in timestamp order, got {stamps}"
    assert not recorder.wrong_key, (
        f"TM-2: {call}: expected each timer's key current when it fires, got (timer key, current key) "
        f"{recorder.wrong_key}"
    )


@pytest.mark.requirement("TM-1", "TM-2", "TM-3")
@pytest.mark.capability("timers")
@given(timers=TIMERS, watermark=st.integers(-60, 210))
def test_due_timers_fire_once_in_timestamp_order_with_their_key_current(
    certification: Any, tmp_path_factory: Any, timers: list[Timer], watermark: int
) -> None:
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        service, recorder = service_of(backend)
        register(backend, service, timers)
        register(backend, service, timers)  # again: de-duplicated (TM-3)
        assert service.num_event_time_timers() == len(set(timers)), (
            f"TM-1, TM-2, TM-3: num_event_time_timers(): expected {len(set(timers))} distinct timers, got "
            f"{service.num_event_time_timers()}"
        )
        service.advance_watermark(watermark)
        assert service.current_watermark() == watermark, (
            "TM-1, TM-2, TM-3: service.current_watermark(): expected watermark"
        )
        assert_fired_in_order(recorder, {t for t in timers if t[2] <= watermark}, f"advance_watermark({watermark})")
        assert service.num_event_time_timers() == len({t for t in timers if t[2] > watermark}), (
            "TM-1, TM-2, TM-3: service.num_event_time_timers(): expected len({t for t in timers if t[2] > watermark})"
        )


@pytest.mark.requirement("TM-2")
@pytest.mark.capability("timers")
@given(timers=TIMERS)
def test_state_read_in_a_callback_is_the_timer_keys(
    certification: Any, tmp_path_factory: Any, timers: list[Timer]
) -> None:
    """Each key's window sum is the length of its name; the callback reads it under the timer's key and
    namespace, which a backend firing with a stale current key gets wrong."""
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        sums = backend.get_or_create_state(WINDOW_SUM, NAMESPACES)
        service, recorder = service_of(backend)
        seen: list[tuple[Timer, Any]] = []

        def read(kind: str, timer: InternalTimer[Any, Any]) -> None:
            sums.set_current_namespace(timer.namespace)
            seen.append(((timer.key, timer.namespace, timer.timestamp), sums.value()))

        recorder.on_fire = read
        for key, namespace, time in timers:
            backend.set_current_key(key)
            sums.set_current_namespace(namespace)
            sums.update(len(key) * 10 + namespace)
            service.register_event_time_timer(namespace, time)
        service.advance_watermark(MAX_TIMESTAMP)
        wrong = [(timer, value) for timer, value in seen if value != len(timer[0]) * 10 + timer[1]]
        assert not wrong, (
            f"TM-2: state read in on_event_time was another key's or namespace's: (timer, value) {wrong[:5]}"
        )


def advance(service: Any, kind: str, time: int) -> None:
    if kind == "event":
        service.advance_watermark(time)
    else:
        service.advance_processing_time(time)


@pytest.mark.requirement("TM-4", "TM-6")
@pytest.mark.capability("timers")
@pytest.mark.parametrize("kind", ["event", "processing"])
@given(timers=TIMERS, deleted=st.sets(st.integers(0, 39)), first=st.integers(-60, 210))
def test_deleted_and_fired_timers_never_fire(
    certification: Any, tmp_path_factory: Any, kind: str, timers: list[Timer], deleted: set[int], first: int
) -> None:
    """Deleted timers never fire, fired ones never fire again, and neither comes back from a snapshot taken after.
    Each deleted timer has a twin of another key with the same namespace and time, which a deletion leaves alone."""
    backend_factory = certification.new_backend(tmp_path_factory.mktemp("local"))
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    with keyed_backend(backend_factory) as backend:
        service, recorder = service_of(backend)
        gone = {timers[i] for i in deleted if i < len(timers)}
        twins = {(f"{key}z", namespace, time) for key, namespace, time in gone}  # "z" is in no drawn key
        register(backend, service, [*timers, *sorted(twins)], kind)
        for key, namespace, time in [*gone, ("zz", 9, 5)]:  # the last one never existed
            backend.set_current_key(key)
            getattr(service, f"delete_{kind}_time_timer")(namespace, time)
        advance(service, kind, first)
        handle = snapshot_now(backend, location_for(storage))
        advance(service, kind, MAX_TIMESTAMP)
        call = f"delete_{kind}_time_timer, then advance to {first} and to Long.MAX_VALUE"
        assert_fired_in_order(recorder, (set(timers) - gone) | twins, call, kind, rid="TM-4")
    with keyed_backend(backend_factory, restore=[handle] if handle is not None else []) as restored:
        service, recorder = service_of(restored)
        advance(service, kind, MAX_TIMESTAMP)
        left = {t for t in (set(timers) - gone) | twins if t[2] > first}
        assert_fired_in_order(recorder, left, f"{call}, snapshot after the first advance, restore", kind, rid="TM-4")


@pytest.mark.requirement("TM-4", "TM-3", "TM-6")
@pytest.mark.capability("timers")
@pytest.mark.parametrize("kind", ["event", "processing"])
@given(timers=TIMERS, actions=st.lists(st.sampled_from(["kept", "deleted", "registered again"]), max_size=40))
@example(timers=[("a", 0, 1)], actions=["registered again"])
def test_a_deleted_timer_registered_again_fires_once(
    certification: Any, tmp_path_factory: Any, kind: str, timers: list[Timer], actions: list[str]
) -> None:
    """A timer deleted and registered again is a timer like any other: counted, snapshotted, fired once; a queue
    that deletes lazily must not take the new registration for a duplicate of the deleted one (TM-3)."""
    backend_factory = certification.new_backend(tmp_path_factory.mktemp("local"))
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    gone = {timer for timer, action in zip(timers, actions, strict=False) if action != "kept"}
    back = {timer for timer, action in zip(timers, actions, strict=False) if action == "registered again"}
    expected = (set(timers) - gone) | back
    call = f"register {sorted(set(timers))}, delete {sorted(gone)}, register {sorted(back)} again"
    with keyed_backend(backend_factory) as backend:
        service, recorder = service_of(backend)
        register(backend, service, timers, kind)
        for key, namespace, time in sorted(gone):
            backend.set_current_key(key)
            getattr(service, f"delete_{kind}_time_timer")(namespace, time)
        register(backend, service, sorted(back), kind)
        count = getattr(service, f"num_{kind}_time_timers")()
        assert count == len(expected), (
            f"TM-4, TM-3, TM-6: num_{kind}_time_timers() after {call}: expected {len(expected)}, got {count}"
        )
        handle = snapshot_now(backend, location_for(storage))
        advance(service, kind, MAX_TIMESTAMP)
        assert_fired_in_order(recorder, expected, f"{call}, advance to Long.MAX_VALUE", kind, rid="TM-4")
    with keyed_backend(backend_factory, restore=[handle] if handle is not None else []) as restored:
        service, recorder = service_of(restored)
        advance(service, kind, MAX_TIMESTAMP)
        assert_fired_in_order(
            recorder, expected, f"{call}, snapshot, restore, advance to Long.MAX_VALUE", kind, rid="TM-4"
        )


@pytest.mark.requirement("TM-3", "TM-6")
@pytest.mark.capability("timers")
@pytest.mark.parametrize("kind", ["event", "processing"])
@given(restored=TIMERS, again=TIMERS, overlap=st.lists(st.integers(0, 39), max_size=20))
@example(restored=[("a", 0, 1)], again=[], overlap=[0])
def test_a_restored_timer_registered_again_is_the_same_timer(
    certification: Any, tmp_path_factory: Any, kind: str, restored: list[Timer], again: list[Timer], overlap: list[int]
) -> None:
    """After a restore, registering a timer the snapshot holds changes nothing (TM-3), as a window operator
    re-registers its window's timer for every element that arrives after a recovery: it fires once, not once per
    copy. Timers new after the restore are counted and fire as usual."""
    backend_factory = certification.new_backend(tmp_path_factory.mktemp("local"))
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    repeated = [restored[i] for i in overlap if i < len(restored)]
    expected = set(restored) | set(again)
    call = f"register {sorted(set(restored))}, snapshot, restore, register {sorted(set(repeated))} again and {again}"
    with keyed_backend(backend_factory) as backend:
        service, _ = service_of(backend)
        register(backend, service, restored, kind)
        handle = snapshot_now(backend, location_for(storage))
    with keyed_backend(backend_factory, restore=[handle] if handle is not None else []) as backend:
        service, recorder = service_of(backend)
        register(backend, service, [*repeated, *again], kind)
        count = getattr(service, f"num_{kind}_time_timers")()
        assert count == len(expected), f"TM-3: num_{kind}_time_timers() after {call}: {count}, not {len(expected)}"
        advance(service, kind, MAX_TIMESTAMP)
        fired = fired_timers(recorder, kind)
        twice = sorted({timer for timer in fired if fired.count(timer) > 1})
        assert not twice, f"TM-3: {call}, advance to Long.MAX_VALUE: {twice} fired more than once"
        assert_fired_in_order(recorder, expected, f"{call}, advance to Long.MAX_VALUE", kind, rid="TM-3")


CLOSE_TIMERS = st.lists(
    st.tuples(st.sampled_from([1, True, 2]), st.sampled_from([0, False, 1]), st.integers(0, 1)), max_size=20
)
"""Timers from a domain of 18 under msgpack keys and namespaces, so that most share two of key, namespace and time
with another, and many have a key or namespace Python finds equal to another's but serialized differently."""


def told_apart(timers: Any) -> list[tuple[str, str, int]]:
    """Timers as the spec tells them apart: keys and namespaces by what they are (1 is not True), not by equality."""
    return sorted({(repr(key), repr(namespace), time) for key, namespace, time in timers})


@pytest.mark.requirement("TM-3", "TM-6")
@pytest.mark.capability("timers")
@pytest.mark.parametrize("kind", ["event", "processing"])
@given(timers=CLOSE_TIMERS)
@example(timers=[(1, 0, 1), (1, 1, 1), (2, 0, 1), (1, 0, 0), (1, 0, 1), (True, 0, 1), (1, False, 1)])
def test_timers_are_told_apart_by_key_namespace_and_time(
    certification: Any, tmp_path_factory: Any, kind: str, timers: list[Any]
) -> None:
    """Only a timer equal in all three is the same timer (TM-3), keys and namespaces compared as the state compares
    them (KS-3): timers that share two of key, namespace and time are counted, fire and are snapshotted each on its
    own, as sliding windows of one key that end together need, and so are timers of keys 1 and True."""
    backend_factory = certification.new_backend(tmp_path_factory.mktemp("local"))
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    want = told_apart(timers)

    def fire_all(backend: Any, call: str) -> None:
        recorder = Recorder(backend)
        service = backend.get_timer_service("user-timers", MsgpackSerializer(), recorder)
        advance(service, kind, MAX_TIMESTAMP)
        got = [(repr(key), repr(namespace), time) for key, namespace, time in fired_timers(recorder, kind)]
        assert sorted(got) == want, f"TM-3: {call}: expected the {kind}-time timers {want} to fire once each, got {got}"

    with keyed_backend(backend_factory, key_serializer=MsgpackSerializer()) as backend:
        service = backend.get_timer_service("user-timers", MsgpackSerializer(), Recorder(backend))
        for key, namespace, time in timers:
            backend.set_current_key(key)
            getattr(service, f"register_{kind}_time_timer")(namespace, time)
        count = getattr(service, f"num_{kind}_time_timers")()
        assert count == len(want), (
            f"TM-3: num_{kind}_time_timers() after registering {timers}: {count}, not {len(want)}"
        )
        handle = snapshot_now(backend, location_for(storage))
        fire_all(backend, f"register {timers}, advance to Long.MAX_VALUE")
    restore = [handle] if handle is not None else []
    with keyed_backend(backend_factory, restore=restore, key_serializer=MsgpackSerializer()) as restored:
        fire_all(restored, f"register {timers}, snapshot, restore, advance")


@pytest.mark.requirement("TM-3", "TM-4", "KS-3")
@pytest.mark.capability("timers")
@pytest.mark.parametrize("kind", ["event", "processing"])
@given(
    keys=one_java_hash("str"),
    namespaces=one_java_hash("long").map(lambda longs: longs[:3]),
    deleted=st.integers(0, 47),
)
def test_timers_of_keys_and_namespaces_of_one_hash_are_different_timers(
    certification: Any, tmp_path_factory: Any, kind: str, keys: list[str], namespaces: list[int], deleted: int
) -> None:
    """Timers are told apart by their keys' and namespaces' bytes (KS-3), not by the hash their serializers give:
    string keys of one Java `String.hashCode` and long namespaces of one `Long.hashCode`, each with a timer at one
    time, are counted and fire each on its own, live and after a restore; deleting one deletes no other (TM-4). A
    queue that de-duplicates by that hash takes one key's timer for another's."""
    timers = [(key, namespace, 5) for key in keys for namespace in namespaces]
    gone = timers[deleted % len(timers)]
    want = sorted(t for t in timers if t != gone)
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    backend_factory = certification.new_backend(tmp_path_factory.mktemp("local"))
    call = f"register {kind}-time timers {timers}, delete {gone}"
    with keyed_backend(backend_factory) as backend:
        service, recorder = service_of(backend)
        register(backend, service, timers, kind)
        backend.set_current_key(gone[0])
        getattr(service, f"delete_{kind}_time_timer")(gone[1], gone[2])
        count = getattr(service, f"num_{kind}_time_timers")()
        assert count == len(want), f"TM-3: {call}: num_{kind}_time_timers() is {count}, not {len(want)}"
        handle = snapshot_now(backend, location_for(storage))
        advance(service, kind, MAX_TIMESTAMP)
        assert_fired_in_order(recorder, set(want), f"{call}, advance", kind, rid="TM-3")
        assert len(fired_timers(recorder, kind)) == len(want), f"TM-3: {call}, advance: a timer fired twice"
    with keyed_backend(backend_factory, restore=[handle] if handle is not None else []) as restored:
        service, recorder = service_of(restored)
        advance(service, kind, MAX_TIMESTAMP)
        assert_fired_in_order(recorder, set(want), f"{call}, snapshot, restore, advance", kind, rid="TM-3")
        assert len(fired_timers(recorder, kind)) == len(want), f"TM-3: {call}, restore, advance: a timer fired twice"


@pytest.mark.requirement("TM-1")
@pytest.mark.capability("timers")
@pytest.mark.parametrize("kind", ["event", "processing"])
def test_timers_at_the_ends_of_javas_long_range_are_accepted_and_fire(state_backend: Any, kind: str) -> None:
    with keyed_backend(state_backend) as backend:
        service, recorder = service_of(backend)
        register(backend, service, [("k", 0, MIN_TIMESTAMP), ("k", 0, MAX_TIMESTAMP)], kind)
        advance(service, kind, MIN_TIMESTAMP)
        assert_fired_in_order(recorder, {("k", 0, MIN_TIMESTAMP)}, f"{kind} timers at Long.MIN_VALUE", kind, rid="TM-1")
        advance(service, kind, MAX_TIMESTAMP)
        expected = {("k", 0, MIN_TIMESTAMP), ("k", 0, MAX_TIMESTAMP)}
        assert_fired_in_order(recorder, expected, f"{kind} timers at Long.MIN_VALUE and MAX_VALUE", kind, rid="TM-1")


@pytest.mark.requirement("KB-KEY-1", "TM-9")
@pytest.mark.capability("timers")
def test_asking_for_a_timer_service_keeps_the_current_key(state_backend: Any, storage: Any) -> None:
    """A service that loads restored timers of other keys leaves the backend's current key as it was."""
    with keyed_backend(state_backend) as backend:
        service, _ = service_of(backend)
        register(backend, service, [(f"k{i}", 0, 10 + i) for i in range(20)])
        handle = snapshot_now(backend, location_for(storage))
    with keyed_backend(state_backend, restore=[handle]) as restored:
        restored.set_current_key("current")
        service_of(restored)
        got = restored.get_current_key()
        assert got == "current", f"KB-KEY-1: get_timer_service() changed the current key from 'current' to {got!r}"


@pytest.mark.requirement("TM-5")
@pytest.mark.capability("timers")
def test_timers_registered_by_callbacks_fire_in_the_same_advance(state_backend: Any) -> None:
    """A callback at time t registers t + 10 (due in this advance while <= 100) and t - 1000 (already past)."""
    with keyed_backend(state_backend) as backend:
        service, recorder = service_of(backend)

        def chain(kind: str, timer: InternalTimer[Any, Any]) -> None:
            if timer.timestamp >= 0:
                service.register_event_time_timer(timer.namespace, timer.timestamp + 10)
                service.register_event_time_timer(timer.namespace, timer.timestamp - 1000)

        recorder.on_fire = chain
        register(backend, service, [("a", 0, 0)])
        service.advance_watermark(100)
        expected = {("a", 0, t) for t in range(0, 101, 10)} | {("a", 0, t - 1000) for t in range(0, 101, 10)}
        got = set(fired_timers(recorder))
        assert got == expected, f"TM-5: advance_watermark(100): expected {sorted(expected)}, got {sorted(got)}"
        assert service.num_event_time_timers() == 1, "TM-5: the timer at 110 stays registered"


FEW_KEYS_TIMERS = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 2), st.integers(0, 60)), max_size=30)


@pytest.mark.requirement("TM-4", "TM-2")
@pytest.mark.capability("timers")
@pytest.mark.parametrize("kind", ["event", "processing"])
@given(
    timers=FEW_KEYS_TIMERS,
    deletions=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 29)), max_size=30),
    now=st.integers(0, 60),
)
@example(timers=[("a", 0, 10), ("a", 1, 20)], deletions=[(0, 1)], now=60)
def test_a_timer_deleted_by_a_callback_never_fires(
    certification: Any, tmp_path_factory: Any, kind: str, timers: list[Timer], deletions: list[Any], now: int
) -> None:
    """A callback deletes timers of its key, as a window operator's cleanup deletes the window's other timers: one
    deleted before its turn never fires, in this advance or a later one, as Flink's `InternalTimerServiceImpl` polls
    one due timer at a time. A callback deletes only timers later than its own (ties fire in any order, TM-2) or
    its own, which has fired and is gone (TM-4)."""
    unique = sorted(set(timers))
    deletes: dict[Timer, set[Timer]] = {timer: set() for timer in unique}
    for i, j in deletions if unique else []:
        deleting, deleted = unique[i % len(unique)], unique[j % len(unique)]
        if deleting[0] == deleted[0] and (deleting == deleted or deleted[2] > deleting[2]):
            deletes[deleting].add(deleted)
    alive = set(unique)

    def model_fires(until: int) -> set[Timer]:
        """Flink's queue: one due timer at a time, in timestamp order, each callback's deletions before the next."""
        fired: set[Timer] = set()
        for timer in sorted(unique, key=lambda t: t[2]):
            if timer in alive and timer[2] <= until:
                alive.discard(timer)
                fired.add(timer)
                alive.difference_update(deletes[timer])
        return fired

    expected = model_fires(now)
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        service, recorder = service_of(backend)
        delete = getattr(service, f"delete_{kind}_time_timer")

        def cleanup(fired_kind: str, timer: InternalTimer[Any, Any]) -> None:
            for _, namespace, time in sorted(deletes[(timer.key, timer.namespace, timer.timestamp)]):
                delete(namespace, time)

        recorder.on_fire = cleanup
        register(backend, service, timers, kind)
        call = f"register {unique}, advance to {now} with callbacks deleting {{timer: deleted}} " + str(
            {timer: sorted(gone) for timer, gone in deletes.items() if gone}
        )
        advance(service, kind, now)
        assert_fired_in_order(recorder, expected, call, kind, rid="TM-4")
        count = getattr(service, f"num_{kind}_time_timers")()
        assert count == len(alive), (
            f"TM-4, TM-2: num_{kind}_time_timers() after {call}: expected {len(alive)}, got {count}"
        )
        advance(service, kind, MAX_TIMESTAMP)
        assert_fired_in_order(
            recorder, expected | model_fires(MAX_TIMESTAMP), f"{call}, then to Long.MAX_VALUE", kind, rid="TM-4"
        )


@pytest.mark.requirement("TM-2")
@pytest.mark.capability("timers")
@pytest.mark.parametrize("kind", ["event", "processing"])
@given(timers=TIMERS, now=st.integers(-60, 210))
@example(timers=[("a", 0, 5), ("b", 1, 7)], now=10)
def test_callbacks_see_the_time_their_advance_set(
    certification: Any, tmp_path_factory: Any, kind: str, timers: list[Timer], now: int
) -> None:
    """The advance sets the time before it fires, as Flink's `advanceWatermark` does: a callback deciding whether a
    window is late, or when to clean it up, reads the time the advance reached, not the one before."""
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        service, recorder = service_of(backend)
        name = "current_watermark" if kind == "event" else "current_processing_time"
        current = getattr(service, name)
        seen: list[tuple[Timer, int]] = []
        recorder.on_fire = lambda _, timer: seen.append(((timer.key, timer.namespace, timer.timestamp), current()))
        register(backend, service, timers, kind)
        advance(service, kind, now)
        wrong = [(timer, time) for timer, time in seen if time != now]
        assert not wrong, (
            f"TM-2: callbacks of an advance to {now} read {name}() as another time: (timer, time read) {wrong[:5]}"
        )


@pytest.mark.requirement("TM-9", "TM-6", "KB-RESTORE-3")
@pytest.mark.capability("timers")
@given(first=TIMERS, second=TIMERS, fired_at=st.integers(-60, 210))
@example(first=[("a", 0, 5)], second=[("b", 1, 7)], fired_at=0)
def test_timers_of_a_service_not_asked_for_since_the_restore_stay_in_later_snapshots(
    certification: Any, tmp_path_factory: Any, first: list[Timer], second: list[Timer], fired_at: int
) -> None:
    """Two services' timers are snapshotted; the restored backend asks only for the first (an operator that creates
    its second service lazily, say) before the next snapshot: restored from that, the second fires all its timers,
    as restored state not registered again stays in later snapshots."""
    backend_factory = certification.new_backend(tmp_path_factory.mktemp("local"))
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    with keyed_backend(backend_factory) as backend:
        service, _ = service_of(backend, "first")
        lazy, _ = service_of(backend, "second")
        register(backend, service, first)
        register(backend, lazy, second)
        handle = snapshot_now(backend, location_for(storage, 1), 1)
    with keyed_backend(backend_factory, restore=[handle] if handle is not None else []) as restored:
        service, _ = service_of(restored, "first")
        service.advance_watermark(fired_at)
        handle = snapshot_now(restored, location_for(storage, 2), 2)
    with keyed_backend(backend_factory, restore=[handle] if handle is not None else []) as again:
        service, recorder = service_of(again, "first")
        lazy, lazy_recorder = service_of(again, "second")
        service.advance_watermark(MAX_TIMESTAMP)
        lazy.advance_watermark(MAX_TIMESTAMP)
        call = "restore with service 'first' only, snapshot, restore, advance both"
        assert_fired_in_order(lazy_recorder, set(second), f"{call}: service 'second'", rid="TM-9")
        assert_fired_in_order(recorder, {t for t in first if t[2] > fired_at}, f"{call}: service 'first'", rid="TM-9")


@pytest.mark.requirement("KB-RESTORE-6", "TM-6", "KB-SNAP-10")
@pytest.mark.capability("timers")
def test_a_timer_service_asked_for_after_the_restored_checkpoint_was_deleted_fires_the_restored_timers(
    state_backend: Any, tmp_path: Path
) -> None:
    """A backend restored from checkpoint 1 takes checkpoint 2 (full, as the first after a restore, COORD-13) before
    its operator asks for the timer service (an operator creating it on its first element); checkpoint 2 completes
    and checkpoint 1 is subsumed and deleted. The service asked for then fires every restored timer, and checkpoint 3
    holds them: a backend that loads restored timers from the checkpoint only when their service is asked for
    finds the files gone."""
    first = FileSystemCheckpointStorage(str(tmp_path / "first"), file_state_size_threshold=0)
    later = FileSystemCheckpointStorage(str(tmp_path / "later"), file_state_size_threshold=0)
    timers = [(f"k{i}", i % 3, i) for i in range(100)]
    with keyed_backend(state_backend) as backend:
        service, _ = service_of(backend)
        register(backend, service, timers)
        handle = snapshot_now(backend, location_for(first, 1), 1)
    full = CheckpointOptions(SnapshotType.CHECKPOINT, full=True)
    call = "restored from checkpoint 1, checkpoint 2 taken and completed, checkpoint 1 deleted, then the service"
    with keyed_backend(state_backend, restore=[handle]) as restored:
        restored.snapshot(2, 0, location_for(later, 2), full).run()
        restored.notify_checkpoint_complete(2)
        shutil.rmtree(tmp_path / "first")  # what the completed checkpoint store does to a subsumed checkpoint
        try:
            service, recorder = service_of(restored)
            third = snapshot_now(restored, location_for(later, 3), 3)
            service.advance_watermark(49)
        except Exception as exc:
            raise AssertionError(f"KB-RESTORE-6: {call} asked for and advanced: {exc!r}") from exc
        assert_fired_in_order(recorder, {t for t in timers if t[2] <= 49}, f"{call} advanced to 49", rid="KB-RESTORE-6")
    with keyed_backend(state_backend, restore=[third]) as again:
        service, recorder = service_of(again)
        service.advance_watermark(MAX_TIMESTAMP)
        assert_fired_in_order(recorder, set(timers), f"{call}, checkpoint 3 restored and advanced", rid="KB-RESTORE-6")


@pytest.mark.requirement("TM-9", "TM-6")
@pytest.mark.capability("timers")
def test_timer_services_of_any_name_keep_their_timers(state_backend: Any, storage: Any) -> None:
    """Timer services are named by any text, as states are (KS-2): a service under each of the STATE_NAMES keeps
    its own event- and processing-time timers through a restore. A name split at a separator, or dropped when
    empty, shows only with such names."""
    timers = {name: ([(f"k{i}", i, 10 + i)], [(f"k{i}", i, 20 + i)]) for i, name in enumerate(STATE_NAMES)}
    with keyed_backend(state_backend) as backend:
        for name, (event, processing) in timers.items():
            service, _ = service_of(backend, name)
            register(backend, service, event)
            register(backend, service, processing, kind="processing")
        handle = snapshot_now(backend, location_for(storage, 1))
    with keyed_backend(state_backend, restore=[handle]) as restored:
        got = {}
        for name in STATE_NAMES:
            service, recorder = service_of(restored, name)
            service.advance_watermark(MAX_TIMESTAMP)
            service.advance_processing_time(MAX_TIMESTAMP)
            got[shown_name(name)] = (fired_timers(recorder), fired_timers(recorder, "processing"))
    expected = {shown_name(name): fired for name, fired in timers.items()}
    assert got == expected, (
        "TM-9: restored, each service advanced to the end of time fires its own (event, processing) timers: "
        f"expected {expected}, got {got}"
    )


@pytest.mark.requirement("TM-9", "KB-RESTORE-1")
@pytest.mark.capability("timers")
@pytest.mark.parametrize("name", ["a\x00b", "a\ud800b", "\udfff"], ids=["nul", "high-surrogate", "low-surrogate"])
def test_a_timer_service_name_outside_ks2_is_refused_or_kept(state_backend: Any, storage: Any, name: str) -> None:
    """A service named by text KS-2 does not allow for states (NUL, a lone surrogate, which UTF-8 cannot encode) is
    refused when asked for, leaving the backend able to snapshot, or kept like any other: its timers come back after
    a restore. A backend that takes the name and then fails every snapshot on it fails the job at its first
    checkpoint instead of where the name was given."""
    with keyed_backend(state_backend) as backend:
        try:
            service, _ = service_of(backend, name)
        except REJECTED:
            service = None
        if service is not None:
            register(backend, service, [("k", 0, 10)])
        backend.set_current_key("k")
        backend.get_or_create_state(WINDOW_SUM).update(7)
        try:
            handle = snapshot_now(backend, location_for(storage, 1))
        except Exception as e:
            verdict = "refused it" if service is None else "took it"
            pytest.fail(f"TM-9: get_timer_service({name!r}) {verdict}, then the snapshot raised {e!r}")
    with keyed_backend(state_backend, restore=[handle]) as restored:
        restored.set_current_key("k")
        value = restored.get_or_create_state(WINDOW_SUM).value()
        assert value == 7, (
            f"KB-RESTORE-1: after get_timer_service({name!r}), the value restored: expected 7, got {value}"
        )
        if service is not None:
            again, recorder = service_of(restored, name)
            again.advance_watermark(MAX_TIMESTAMP)
            got = fired_timers(recorder)
            assert got == [("k", 0, 10)], (
                f"TM-9: get_timer_service({name!r}) took the name: restored, its timers: expected [('k', 0, 10)], "
                f"got {got}"
            )


@pytest.mark.requirement("TM-6")
@pytest.mark.capability("timers")
@pytest.mark.heavy
def test_timers_beyond_16_bit_counts_all_fire_after_a_restore(state_backend: Any, tmp_path: Path) -> None:
    """One key and namespace with 70,000 event-time timers (a timer per element, as a process function may
    register) and another with 70,000 processing-time timers: restored, every one fires once, in order. A count of
    timers written in 16 bits shows only at this size."""
    size = 70_000
    storage = FileSystemCheckpointStorage(str(tmp_path / "c"))  # files: more state than a job manager storage holds
    with keyed_backend(state_backend) as backend:
        service, _ = service_of(backend)
        backend.set_current_key("e")
        for time in range(size):
            service.register_event_time_timer(1, time)
        backend.set_current_key("p")
        for time in range(size):
            service.register_processing_time_timer(2, time)
        handle = snapshot_now(backend, location_for(storage, 1))
    with keyed_backend(state_backend, restore=[handle]) as restored:
        service, recorder = service_of(restored)
        service.advance_watermark(MAX_TIMESTAMP)
        service.advance_processing_time(MAX_TIMESTAMP)
    for kind, key, namespace in (("event", "e", 1), ("processing", "p", 2)):
        fired = fired_timers(recorder, kind)
        assert fired == [(key, namespace, time) for time in range(size)], (
            f"TM-6: {size} {kind}-time timers of one key restored, advanced to the end of time: {len(fired)} fired, "
            f"first {fired[:2]}, last {fired[-2:]}"
        )


@pytest.mark.requirement("TM-2", "TM-5")
@pytest.mark.capability("timers")
@given(timers=TIMERS, now=st.integers(-60, 210), kind=st.sampled_from(["event", "processing"]))
def test_timers_registered_at_or_before_the_current_time_fire_in_the_next_advance(
    certification: Any, tmp_path_factory: Any, timers: list[Timer], now: int, kind: str
) -> None:
    """Time reaches `now`, then timers are registered on both sides of it: the next advance, even one to `now`
    itself, fires those at or before it and keeps the rest."""
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        service, recorder = service_of(backend)
        call = "advance_watermark" if kind == "event" else "advance_processing_time"
        advance, count = getattr(service, call), getattr(service, f"num_{kind}_time_timers")
        advance(now)
        register(backend, service, timers, kind)
        advance(now)
        assert_fired_in_order(
            recorder,
            {t for t in timers if t[2] <= now},
            f"{call}({now}), register, {call}({now}) again",
            kind,
            rid="TM-5",
        )
        later = {t for t in timers if t[2] > now}
        assert count() == len(later), (
            f"TM-2, TM-5: num_{kind}_time_timers() after the second {call}({now}): expected the {len(later)} "
            "later timers, got "
            f"{count()}"
        )


@pytest.mark.requirement("TM-6", "TM-8", "TM-9")
@pytest.mark.capability("timers")
@given(
    before=TIMERS,
    processing=TIMERS,
    after=TIMERS,
    fired_at=st.integers(-60, 210),
)
def test_a_snapshot_holds_exactly_the_timers_at_its_call(
    certification: Any,
    tmp_path_factory: Any,
    before: list[Timer],
    processing: list[Timer],
    after: list[Timer],
    fired_at: int,
) -> None:
    """Event-time and processing-time timers of two services are snapshotted; timers registered, fired and
    deleted after the snapshot call leave it unchanged; the restored services start at Long.MIN_VALUE."""
    backend_factory = certification.new_backend(tmp_path_factory.mktemp("local"))
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    with keyed_backend(backend_factory) as backend:
        service, _ = service_of(backend)
        other, _ = service_of(backend, "other")
        register(backend, service, before)
        register(backend, service, processing, kind="processing")
        register(backend, other, before[:5])
        service.advance_watermark(fired_at)
        at_snapshot = {t for t in before if t[2] > fired_at}
        task = backend.snapshot(1, 0, location_for(storage))
        register(backend, service, after)
        service.advance_watermark(fired_at + 100)
        for key, namespace, time in before[:3]:
            backend.set_current_key(key)
            service.delete_processing_time_timer(namespace, time)
        handle = task.run()
    with keyed_backend(backend_factory, restore=[handle] if handle is not None else []) as restored:
        service, recorder = service_of(restored)
        other, other_recorder = service_of(restored, "other")
        assert (service.current_watermark(), service.current_processing_time()) == (MIN_TIMESTAMP, MIN_TIMESTAMP), (
            "TM-6, TM-8, TM-9: a restored timer service starts at Long.MIN_VALUE (TM-8)"
        )
        for kind, held in (("event", at_snapshot), ("processing", set(processing))):
            listed: list[Timer] = []
            getattr(service, f"for_each_{kind}_time_timer")(
                lambda namespace, time, add=listed.append: add((restored.get_current_key(), namespace, time))
            )
            count = getattr(service, f"num_{kind}_time_timers")()
            assert (sorted(listed), count) == (sorted(held), len(held)), (
                f"TM-6: after the restore, for_each_{kind}_time_timer listed {sorted(listed)} and "
                f"num_{kind}_time_timers() gave {count}: expected the {len(held)} restored timers {sorted(held)}"
            )
        service.advance_watermark(MAX_TIMESTAMP)
        service.advance_processing_time(MAX_TIMESTAMP)
        other.advance_watermark(MAX_TIMESTAMP)
        assert_fired_in_order(recorder, at_snapshot, "restore, advance_watermark(MAX)", rid="TM-6")
        assert_fired_in_order(
            recorder, set(processing), "restore, advance_processing_time(MAX)", kind="processing", rid="TM-6"
        )
        assert_fired_in_order(
            other_recorder, set(before[:5]), "restore, the other service's advance_watermark(MAX)", rid="TM-6"
        )


@pytest.mark.requirement("TM-7", "KG-2")
@pytest.mark.capability("timers", "rescaling")
@given(
    old=st.integers(1, 6),
    new=st.integers(1, 6),
    max_parallelism=st.sampled_from([128, 1, 7, 1000]),
    kind=st.sampled_from(["event", "processing"]),
    timers=st.lists(st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 3), st.integers(0, 99)), max_size=60),
)
@example(old=2, new=3, max_parallelism=7, kind="processing", timers=[(f"k{i}", i % 4, i) for i in range(30)])
@example(old=3, new=2, max_parallelism=1000, kind="event", timers=[(f"k{i}", i % 4, i) for i in range(30)])
def test_rescaled_timers_fire_exactly_once_across_the_new_subtasks(
    certification: Any,
    tmp_path_factory: Any,
    old: int,
    new: int,
    max_parallelism: int,
    kind: str,
    timers: list[Timer],
) -> None:
    """Event and processing-time timers, at max parallelisms that are powers of two and others (where a timer's key
    group taken from the hash's low bits is not Flink's, KG-2)."""
    old, new = min(old, max_parallelism), min(new, max_parallelism)
    backend_factory = certification.new_backend(tmp_path_factory.mktemp("local"))
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    subtasks = create_subtasks(backend_factory, StringSerializer(), old, max_parallelism)
    for key, namespace, time in timers:
        owner = owner_of(subtasks, key, max_parallelism)
        service, _ = service_of(owner)
        register(owner, service, [(key, namespace, time)], kind)
    for s in subtasks:  # every subtask's service exists, so empty ones snapshot too
        service_of(s.keyed)
    location = storage.create_checkpoint_storage("job").initialize_location_for_checkpoint(1)
    pointer = take_snapshot(subtasks, location, 1, max_parallelism, kind=CheckpointKind.CHECKPOINT)
    for s in subtasks:
        s.dispose()
    operator = storage.load_checkpoint(pointer).operator("op")
    fired: list[Timer] = []
    misplaced: list[Timer] = []
    for s in create_subtasks(backend_factory, StringSerializer(), new, max_parallelism, restore_from=operator):
        service, recorder = service_of(s.keyed)
        advance(service, kind, MAX_TIMESTAMP)
        mine = fired_timers(recorder, kind)
        misplaced += [t for t in mine if key_group_of(t[0], max_parallelism) not in s.keyed.key_group_range]
        fired += mine
        s.dispose()
    scaled = f"{kind} timers {old}->{new} at max parallelism {max_parallelism}"
    assert not misplaced, (
        f"TM-7, KG-2: {scaled}: timers fired in a subtask that does not own their key group: {misplaced}"
    )
    assert sorted(fired) == sorted(set(timers)), (
        f"TM-7, KG-2: {scaled}: expected every timer to fire once across the new subtasks: "
        f"missing {sorted(set(timers) - set(fired))[:5]}, repeated {_repeats(fired)}"
    )


def _repeats(fired: list[Timer]) -> list[Timer]:
    return sorted({t for t in fired if fired.count(t) > 1})


@pytest.mark.requirement("TM-10", "IF-8")
@pytest.mark.capability("timers", "canonical_savepoints")
def test_canonical_savepoint_timers_restore_into_the_reference_backend_and_back(
    state_backend: Any, reference_backend: Any, storage: Any
) -> None:
    timers = [(f"k{i}", i % 2, 1000 - i) for i in range(50)]
    for source, target in ((state_backend, reference_backend), (reference_backend, state_backend)):
        with keyed_backend(source) as backend:
            service, _ = service_of(backend)
            register(backend, service, timers)
            location = location_for(storage, checkpoint_id=7 if source is state_backend else 8)
            handle = backend.snapshot(1, 0, location, CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)).run()
        with keyed_backend(target, restore=[handle]) as restored:
            service, recorder = service_of(restored)
            service.advance_watermark(MAX_TIMESTAMP)
            direction = "backend under test -> reference" if source is state_backend else "reference -> under test"
            assert_fired_in_order(recorder, set(timers), f"canonical savepoint {direction}", rid="TM-10")


@pytest.mark.requirement("TM-1")
@pytest.mark.capability("timers")
@pytest.mark.parametrize("kind", ["event", "processing"])
@pytest.mark.parametrize("time", [MIN_TIMESTAMP - 1, MAX_TIMESTAMP + 1, 1.5, "7"])
def test_a_time_outside_javas_long_range_is_rejected(state_backend: Any, time: Any, kind: str) -> None:
    with keyed_backend(state_backend) as backend:
        service, _ = service_of(backend)
        backend.set_current_key("k")
        with pytest.raises(REJECTED):
            getattr(service, f"register_{kind}_time_timer")(0, time)
        count = getattr(service, f"num_{kind}_time_timers")()
        assert count == 0, f"TM-1: register_{kind}_time_timer(0, {time!r}) was rejected but left {count} timer(s)"


@pytest.mark.requirement("TM-1")
@pytest.mark.capability("timers")
@pytest.mark.parametrize("kind", ["event", "processing"])
def test_registering_without_a_current_key_is_rejected(state_backend: Any, kind: str) -> None:
    with keyed_backend(state_backend, key_group_range=KeyGroupRange(0, 127)) as backend:
        service, _ = service_of(backend)
        with pytest.raises(REJECTED):
            getattr(service, f"register_{kind}_time_timer")(0, 5)
        count = getattr(service, f"num_{kind}_time_timers")()
        assert count == 0, f"TM-1: register_{kind}_time_timer(0, 5) without a current key was rejected but left {count}"


@pytest.mark.requirement("TM-11", "SB-3")
@pytest.mark.capability("timers", supported=False)
def test_timers_unsupported_fail_only_with_the_documented_error(state_backend: Any) -> None:
    """Not declaring timers is the default: a backend may lack the method or even provide it; a failing call must
    be the documented error."""
    with keyed_backend(state_backend) as backend:
        if hasattr(backend, "get_timer_service"):
            try:
                backend.get_timer_service("user-timers", NAMESPACES, Recorder(backend))
            except UnsupportedFeatureError:
                pass
            except Exception as exc:
                raise AssertionError(
                    f"get_timer_service() of a backend without timers: expected UnsupportedFeatureError or a "
                    f"service, got {type(exc).__name__}: {exc}"
                ) from exc


@pytest.mark.requirement("TM-6")
@pytest.mark.capability("timers")
def test_timers_of_a_checkpoint_restore_after_more_checkpoints(state_backend: Any, storage: Any) -> None:
    """Three checkpoints, timers fired and registered between them; restoring each one gives its own timers
    (incremental backends reuse files across checkpoints)."""
    at: dict[int, set[Timer]] = {}
    handles = {}
    live: set[Timer] = set()
    with keyed_backend(state_backend) as backend:
        service, _ = service_of(backend)
        for checkpoint_id in (1, 2, 3):
            new = [(f"k{checkpoint_id}-{i}", i % 3, checkpoint_id * 100 + i) for i in range(30)]
            register(backend, service, new)
            live |= set(new)
            service.advance_watermark(checkpoint_id * 100 + 9)
            live = {t for t in live if t[2] > checkpoint_id * 100 + 9}
            at[checkpoint_id] = set(live)
            handles[checkpoint_id] = snapshot_now(backend, location_for(storage, checkpoint_id), checkpoint_id)
            backend.notify_checkpoint_complete(checkpoint_id)
    for checkpoint_id, handle in handles.items():
        with keyed_backend(state_backend, restore=[handle]) as restored:
            service, recorder = service_of(restored)
            service.advance_watermark(MAX_TIMESTAMP)
            assert_fired_in_order(recorder, at[checkpoint_id], f"restore checkpoint {checkpoint_id} of 3", rid="TM-6")


@pytest.mark.requirement("TM-6")
@pytest.mark.capability("timers")
@pytest.mark.parametrize("kind", ["event", "processing"])
@given(timers=TIMERS, deleted=st.sets(st.integers(0, 39)), fired_at=st.integers(-60, 210))
def test_for_each_timer_lists_every_timer_once_with_its_key_current(
    certification: Any, tmp_path_factory: Any, kind: str, timers: list[Timer], deleted: set[int], fired_at: int
) -> None:
    """Listed after some timers were deleted and the due ones fired: exactly the timers left (TM-4, TM-6)."""
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        service, _ = service_of(backend)
        register(backend, service, timers, kind)
        gone = {timers[i] for i in deleted if i < len(timers)}
        for key, namespace, time in sorted(gone):
            backend.set_current_key(key)
            getattr(service, f"delete_{kind}_time_timer")(namespace, time)
        advance(service, kind, fired_at)
        listed: list[Timer] = []
        getattr(service, f"for_each_{kind}_time_timer")(
            lambda namespace, time: listed.append((backend.get_current_key(), namespace, time))
        )
        left = {t for t in set(timers) - gone if t[2] > fired_at}
        assert sorted(listed) == sorted(left), (
            f"TM-6: for_each_{kind}_time_timer after deleting {len(gone)} and advancing to {fired_at}: expected "
            f"{sorted(left)} with each timer's key current, got {sorted(listed)}"
        )
        count = getattr(service, f"num_{kind}_time_timers")()
        assert count == len(left), f"TM-6: num_{kind}_time_timers() is {count}, {len(left)} timers are left"


@pytest.mark.requirement("IF-8", "TM-10")
@pytest.mark.capability("timers", "canonical_savepoints")
def test_canonical_savepoint_holds_timers_as_the_interchange_chapter_says(
    state_backend: Any, reference_backend: Any, storage: Any
) -> None:
    """Read as plain map state by the reference backend, a canonical savepoint's timers are `_timer_state/<kind>_<
    service>`: the user key the timestamp, the value true, one entry per key and namespace."""
    event, processing = [("k1", 0, 5), ("k1", 0, 7), ("k2", 3, -4)], [("k3", 1, 9)]
    with keyed_backend(state_backend) as backend:
        service, _ = service_of(backend)
        register(backend, service, event)
        register(backend, service, processing, kind="processing")
        handle = backend.snapshot(
            1, 0, location_for(storage), CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)
        ).run()
    with keyed_backend(reference_backend, restore=[handle]) as restored:
        for kind, timers in (("event", event), ("processing", processing)):
            name = f"_timer_state/{kind}_user-timers"
            state = restored.get_or_create_state(
                MapStateDescriptor(
                    name, user_key_serializer=LongSerializer(), user_value_serializer=BooleanSerializer()
                ),
                NAMESPACES,
            )
            found = []
            for key, namespace in list(restored.get_keys_and_namespaces(name)):
                restored.set_current_key(key)
                state.set_current_namespace(namespace)
                found += [(key, namespace, time, value) for time, value in state.items()]
            expected = sorted((k, n, t, True) for k, n, t in timers)
            assert sorted(found) == expected, f"IF-8: the state {name!r} holds {sorted(found)}, expected {expected}"


def _cut_first_timestamp(pair: list[bytes]) -> None:
    pair[0] = pair[0][:3]


def _first_value_not_a_bool(pair: list[bytes]) -> None:
    pair[1] = b"\x07"


@pytest.mark.requirement("FMT-15", "FMT-8", "IF-8")
@pytest.mark.capability("timers")
@pytest.mark.parametrize("damage", [_cut_first_timestamp, _first_value_not_a_bool], ids=["timestamp-cut", "not-a-bool"])
def test_hostile_canonical_timers_are_refused_on_restore(
    state_backend: Any, reference_backend: Any, storage: Any, tmp_path: Any, damage: Any
) -> None:
    """A canonical savepoint whose first timer's timestamp was cut to 3 bytes, or whose value is not the bool
    serializer's encoding, with the stream's size and checksum recorded anew: restoring it raises
    CheckpointFormatError naming the stream, when the backend is created or at the latest when the timer service is
    asked for and advanced; never fewer timers, nor another error."""
    timers = [(f"k{i}", i % 2, 100 + i) for i in range(20)]
    with keyed_backend(reference_backend) as backend:
        service, _ = service_of(backend)
        register(backend, service, timers)
        options = CheckpointOptions(SnapshotType.SAVEPOINT_CANONICAL)
        handle = backend.snapshot(1, 0, location_for(storage), options).run()

    def damaged(header: Any, blocks: dict[int, list[list[Any]]]) -> Any:
        damage(first_canonical_entry(header, blocks, "_timer_state/event_user-timers")[3][0])
        return header

    hostile = rewritten_canonical_stream(handle, tmp_path / "hostile-timers", damaged)
    fired: Any = "nothing: the restore raised"
    with pytest.raises(CheckpointFormatError, match="hostile-timers"):
        with keyed_backend(state_backend, restore=[hostile]) as restored:
            service, recorder = service_of(restored)
            service.advance_watermark(MAX_TIMESTAMP)
            fired = sorted(fired_timers(recorder))
        raise AssertionError(f"FMT-15: a canonical savepoint with {damage.__name__} restored; it fired {fired}")


@pytest.mark.requirement("KB-LIFE-2", "TM-9")
@pytest.mark.capability("timers")
def test_a_closed_backend_refuses_a_timer_service(state_backend: Any) -> None:
    from statecert.spec.errors import BackendClosedError

    for end in ("close", "dispose"):
        for name in ("user-timers", "asked-for-after-the-end"):
            backend = keyed_backend(state_backend)
            service_of(backend, "user-timers")
            getattr(backend, end)()
            try:
                got: Any = service_of(backend, name)[0]
            except BackendClosedError:
                continue
            except Exception as exc:
                got = exc
            raise AssertionError(
                f"KB-LIFE-2: get_timer_service({name!r}) after {end}(): expected BackendClosedError, got {got!r}"
            )
