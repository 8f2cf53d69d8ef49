"""Configuring the changelog backend (chapter CL): the keys that switch it on, where its log goes, what it refuses,
and the accumulator access it needs from a wrapped backend. What it does with state is the conformance suite's
`test_changelog.py`, run on every backend with `--changelog`."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.conformance.helpers import keyed_backend, location_for
from statecert.reference.changelog.backend import ChangelogStateBackend, changelog_settings
from statecert.reference.changelog.keyed_backend import ChangelogSettings
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.heap.keyed_backend import HeapKeyedStateBackend
from statecert.reference.loader import load_state_backend
from statecert.reference.serializers import LongSerializer, MsgpackSerializer
from statecert.reference.simulator.job_spec import load_job_spec
from statecert.reference.simulator.runtime import Simulation
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.scenarios.loader import ScenarioError, load_scenario
from statecert.spec.errors import IllegalConfigurationError, UnsupportedFeatureError
from statecert.spec.handles import ByteStreamStateHandle, ChangelogStateBackendHandle, FileStateHandle
from statecert.spec.state import AggregatingStateDescriptor, ValueStateDescriptor

JOBS = Path(__file__).resolve().parent.parent / "scenarios" / "simulator"
CURRENT, DEPRECATED = "state.changelog.enabled", "state.backend.changelog.enabled"
FLAGS = st.sampled_from([None, "true", "false", True, False])
VALUE = ValueStateDescriptor("v", serializer=LongSerializer())


def _truth(flag: object) -> bool:
    return str(flag).lower() == "true"


# -- CL-1: switching it on -----------------------------------------------------------------------------------------
@pytest.mark.requirement("CL-1")
@given(current=FLAGS, deprecated=FLAGS)
def test_the_current_key_wins_and_the_deprecated_key_warns(current: object, deprecated: object) -> None:
    config = {k: v for k, v in ((CURRENT, current), (DEPRECATED, deprecated)) if v is not None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backend = load_state_backend(job_config=config)
    expected = _truth(current) if current is not None else _truth(deprecated)
    assert isinstance(backend, ChangelogStateBackend) == expected, (
        f"load_state_backend({config}) gave {backend.name}, expected changelog {'on' if expected else 'off'}"
    )
    if expected:
        assert isinstance(backend.delegate, HashMapStateBackend), backend.delegate
    deprecation = [w for w in caught if issubclass(w.category, DeprecationWarning) and DEPRECATED in str(w.message)]
    assert bool(deprecation) == (current is None and deprecated is not None), [str(w.message) for w in caught]


@pytest.mark.requirement("CL-1")
def test_changes_reach_the_wrapped_backend_and_the_log(tmp_path: Path) -> None:
    """Reads are the wrapped backend's; a checkpoint after the first materialization carries the changes since it
    as a log segment."""
    backend = load_state_backend(job_config={CURRENT: "true", "state.changelog.periodic-materialize.interval": "1 h"})
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"))
    with keyed_backend(backend) as keyed:
        keyed.snapshot(1, 0, location_for(storage, 1)).run()
        keyed.notify_checkpoint_complete(1)
        keyed.set_current_key("a")
        keyed.get_or_create_state(VALUE).update(7)
        inner = keyed.delegate.get_or_create_state(VALUE)
        assert inner.value() == 7, f"the wrapped backend holds {inner.value()!r}, expected 7"
        handle = keyed.snapshot(2, 0, location_for(storage, 2)).run()
    assert isinstance(handle, ChangelogStateBackendHandle) and handle.changelog, handle


# -- CL-10: where the log goes, and what is refused ------------------------------------------------------------------
@pytest.mark.requirement("CL-10")
@pytest.mark.parametrize(("storage", "kind"), [("filesystem", FileStateHandle), ("memory", ByteStreamStateHandle)])
def test_changelog_storage_decides_whether_segments_are_files_or_inline(
    tmp_path: Path, storage: str, kind: type
) -> None:
    interval = "state.changelog.periodic-materialize.interval"
    config = {CURRENT: "true", "state.changelog.storage": storage, interval: "1h"}
    backend = load_state_backend(job_config=config)
    # threshold 0: every stream the storage is asked for becomes a file, so inline segments come from `memory` alone
    checkpoints = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), file_state_size_threshold=0)
    with keyed_backend(backend) as keyed:
        keyed.snapshot(1, 0, location_for(checkpoints, 1)).run()  # the first checkpoint materializes
        keyed.notify_checkpoint_complete(1)
        for i in range(50):
            keyed.set_current_key(f"k{i}")
            keyed.get_or_create_state(VALUE).update(i)
        handle = keyed.snapshot(2, 0, location_for(checkpoints, 2)).run()
    assert isinstance(handle, ChangelogStateBackendHandle), handle
    segments = [s.delegate for s in handle.changelog]
    assert segments and all(isinstance(s, kind) for s in segments), (
        f"state.changelog.storage={storage}: expected {kind.__name__} segments, got {segments}"
    )
    if storage == "filesystem":
        assert all("/shared/" in s.path for s in segments if isinstance(s, FileStateHandle)), segments


@pytest.mark.requirement("CL-10")
@pytest.mark.parametrize(
    "config",
    [
        {"state.changelog.storage": "s3"},
        {"state.changelog.dstl.dfs.base-path": "file:///elsewhere"},
        {"dstl.dfs.base-path": "file:///elsewhere"},
        {"state.changelog.periodic-materialize.interval": "soon"},
        {"state.changelog.max-failures-allowed": "-1"},
    ],
)
def test_refused_changelog_settings_are_configuration_errors(config: dict[str, str]) -> None:
    key = next(iter(config))
    with pytest.raises(IllegalConfigurationError, match=key.replace(".", r"\.")):
        changelog_settings(config)
    with pytest.raises(IllegalConfigurationError):
        load_state_backend(job_config={CURRENT: "true", **config})


@pytest.mark.requirement("CL-10")
def test_the_simulator_refuses_concurrent_checkpoints_with_changelog(tmp_path: Path) -> None:
    base = load_job_spec(JOBS / "crash-aligned.toml")
    spec = dataclasses.replace(
        base, changelog=True, checkpointing=dataclasses.replace(base.checkpointing, max_concurrent=2)
    )
    with pytest.raises(IllegalConfigurationError, match="CL-10"):
        Simulation(spec, 0, tmp_path)


@pytest.mark.requirement("CL-10")
def test_a_scenario_with_changelog_and_concurrent_checkpoints_is_invalid(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        '[scenario]\ndescription = "x"\n[job]\nchangelog = true\n[checkpointing]\nmax_concurrent = 2\n'
        '[[timeline]]\nepoch = 2\naction = "task-failure"\n',
        encoding="utf-8",
    )
    with pytest.raises(ScenarioError, match=r"bad\.toml: checkpointing\.max_concurrent.*CL-10"):
        load_scenario(path)


# -- CL-9: accumulators --------------------------------------------------------------------------------------------
class _Sum:
    """Non-commutative enough to notice a lost accumulator: the accumulator is the list of inputs."""

    def create_accumulator(self) -> list[int]:
        return []

    def add(self, value: int, accumulator: list[int]) -> list[int]:
        return [*accumulator, value]

    def get_result(self, accumulator: list[int]) -> int:
        return sum(i * v for i, v in enumerate(accumulator, 1))

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return a + b


class _OpaqueAggregating:
    """Aggregating state with only the public API: no `get_internal` / `update_internal`."""

    def __init__(self, delegate: Any) -> None:
        self._delegate = delegate

    def get(self) -> Any:
        return self._delegate.get()

    def add(self, value: Any) -> None:
        self._delegate.add(value)

    def clear(self) -> None:
        self._delegate.clear()

    def set_current_namespace(self, namespace: Any) -> None:
        self._delegate.set_current_namespace(namespace)


class _OpaqueKeyed(HeapKeyedStateBackend):
    def get_or_create_state(self, descriptor: Any, namespace_serializer: Any = None) -> Any:
        state = super().get_or_create_state(descriptor, namespace_serializer)
        return _OpaqueAggregating(state) if isinstance(descriptor, AggregatingStateDescriptor) else state


class _OpaqueBackend(HashMapStateBackend):
    def create_keyed_state_backend(self, params: Any) -> Any:
        return _OpaqueKeyed(params)


def _aggregating() -> AggregatingStateDescriptor[int, list[int], int]:
    return AggregatingStateDescriptor("agg", aggregate_function=_Sum(), accumulator_serializer=MsgpackSerializer())


@pytest.mark.requirement("CL-9")
def test_aggregating_state_without_internal_access_is_unsupported_under_changelog() -> None:
    with keyed_backend(ChangelogStateBackend(_OpaqueBackend())) as keyed:
        keyed.set_current_key("a")
        with pytest.raises(UnsupportedFeatureError, match=r"agg.*get_internal"):
            keyed.get_or_create_state(_aggregating())


@pytest.mark.requirement("CL-9", "CL-4")
@given(values=st.lists(st.integers(-50, 50), min_size=1, max_size=20))
def test_accumulators_are_logged_and_replayed_through_internal_access(tmp_path_factory: Any, values: list[int]) -> None:
    """The accumulator (not only the result) comes back: adding after restore continues the same list."""
    backend = ChangelogStateBackend(HashMapStateBackend())
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("checkpoints")))
    descriptor = _aggregating()
    with keyed_backend(backend) as keyed:
        keyed.set_current_key("a")
        state = keyed.get_or_create_state(descriptor)
        for v in values:
            state.add(v)
        handle = keyed.snapshot(1, 0, location_for(storage, 1)).run()
    with keyed_backend(backend, restore=[handle]) as keyed:
        keyed.set_current_key("a")
        state = keyed.get_or_create_state(descriptor)
        state.add(1)
        expected = _Sum().get_result([*values, 1])
        assert state.get() == expected, f"after replaying {values} and adding 1: expected {expected}, got {state.get()}"


class _OwnChangelogBackend(ChangelogStateBackend):
    """An application's own subclass of the changelog backend."""


@pytest.mark.requirement("LD-2", "CL-1")
def test_configuring_the_changelog_backend_keeps_its_class_and_explicit_settings() -> None:
    """An application's changelog backend, configured by the loader, stays of its class; a setting it gave wins over
    the configuration, and those it left at their defaults are taken from it."""
    own = _OwnChangelogBackend(HashMapStateBackend(), ChangelogSettings(materialize_interval_ms=0))
    config = {"state.changelog.periodic-materialize.interval": "5 min", "state.changelog.max-failures-allowed": "7"}
    chosen = load_state_backend(own, job_config=config)
    assert type(chosen) is _OwnChangelogBackend, f"load_state_backend({own!r}) gave a {type(chosen).__name__}"
    expected = ChangelogSettings(materialize_interval_ms=0, max_failures_allowed=7)
    assert chosen.settings == expected, f"configured with {config}: expected {expected}, got {chosen.settings}"


@pytest.mark.requirement("CL-9", "CL-4")
def test_an_accumulator_set_through_internal_access_is_the_state_and_comes_back() -> None:
    """`update_internal` on the changelog's aggregating state sets the wrapped state's accumulator (and logs it)."""
    backend = ChangelogStateBackend(HashMapStateBackend())
    with keyed_backend(backend) as keyed:
        keyed.set_current_key("a")
        state = keyed.get_or_create_state(_aggregating())
        state.update_internal([5, 6])
        assert state.get_internal() == [5, 6], (
            f"CL-9: update_internal([5, 6]) then get_internal(): {state.get_internal()}"
        )


@pytest.mark.requirement("CL-4", "SER-5", "SER-6")
def test_a_logged_state_takes_over_its_materialization_exactly_when_replay_can_register_it() -> None:
    """`inspect --verify` asks `takes_over` of every segment: a log written after a compatible schema change (a
    record field added: after migration) takes over; other serializer roles, or another namespace serializer, do
    not."""
    from statecert.reference.changelog.replay import takes_over
    from statecert.reference.format.state_meta import StateMetaInfo
    from statecert.reference.serializers import (
        LongSerializer,
        RecordSerializer,
        StringSerializer,
        VoidNamespaceSerializer,
    )
    from statecert.spec.state import StateKind

    void = VoidNamespaceSerializer().snapshot_configuration()
    v1 = RecordSerializer([("n", LongSerializer(), 0)]).snapshot_configuration()
    v2 = RecordSerializer([("n", LongSerializer(), 0), ("m", LongSerializer(), 0)]).snapshot_configuration()
    materialized = StateMetaInfo("s", StateKind.VALUE, void, {"value": v1}, False)
    migrated = StateMetaInfo("s", StateKind.VALUE, void, {"value": v2}, False)
    assert takes_over(materialized, migrated) is None, "CL-4: a log after a compatible record change was refused"
    other_roles = StateMetaInfo("s", StateKind.VALUE, void, {"element": v1}, False)
    assert takes_over(materialized, other_roles), "CL-4: a log with other serializer roles took over"
    other_namespace = StateMetaInfo(
        "s", StateKind.VALUE, StringSerializer().snapshot_configuration(), {"value": v1}, False
    )
    assert takes_over(materialized, other_namespace), "SER-6: a log with another namespace serializer took over"
