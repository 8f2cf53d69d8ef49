"""The model tier's own model: programs replayed step by step through `BackendMachine`, so that the model accepts
what the spec allows and still rejects what it forbids, independently of which programs hypothesis happens to draw."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from statecert.conformance.suite.test_model import make_machine
from statecert.reference.heap.backend import HashMapStateBackend
from statecert.reference.rocksdb.backend import EmbeddedRocksDBStateBackend
from tests.broken_backends import timers_past_wait_for_later_time
from tests.restricted_backends import without_rescaling

BACKENDS: dict[str, Callable[[str], Any]] = {
    "hashmap": lambda directory: HashMapStateBackend(),
    "rocksdb": lambda directory: EmbeddedRocksDBStateBackend(),
}


@contextmanager
def machine_over(new_backend: Callable[[str], Any], max_parallelism: int = 16) -> Iterator[Any]:
    """A `BackendMachine` over the backend, started at `max_parallelism` and torn down afterwards as hypothesis
    would."""
    machine = make_machine(new_backend)()
    try:
        machine.start(max_parallelism=max_parallelism)
        yield machine
    finally:
        machine.teardown()


def replay(new_backend: Callable[[str], Any], steps: list[tuple[str, dict[str, Any]]]) -> None:
    """Run the machine's rules in order, checking its invariants after each, as hypothesis does."""
    with machine_over(new_backend) as machine:
        for rule, arguments in steps:
            getattr(machine, rule)(**arguments)
            machine.current_entries_match_the_model()
            machine.timer_counts_match_the_model()


# Seed 4244 at 100 examples: processing time reached 4, then a timer at 1 was registered and time "advanced" to a
# drawn 0. The service, at 4, fires the timer (TM-5); the model expected only timers at or before 0.
def past_timer(kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("timers_advance", {"kind": kind, "time": 4}),
        ("timer_register_or_delete", {"kind": kind, "time": 1, "delete": False}),
        ("timers_advance", {"kind": kind, "time": 0}),
    ]


@pytest.mark.requirement("TM-5")
@pytest.mark.parametrize("kind", ["event", "processing"])
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_timer_registered_before_the_clock_fires_in_the_next_advance_even_to_an_earlier_drawn_time(
    backend: str, kind: str
) -> None:
    replay(BACKENDS[backend], past_timer(kind))


@pytest.mark.requirement("TM-5")
@pytest.mark.parametrize("kind", ["event", "processing"])
def test_the_model_rejects_a_timer_that_waits_for_time_to_move(kind: str) -> None:
    broken = timers_past_wait_for_later_time
    with pytest.raises(AssertionError, match=f"advance {kind} time to 4: expected \\[\\('{kind}', 'k0', 'n0', 1\\)\\]"):
        replay(lambda directory: broken({}), past_timer(kind))


@pytest.mark.requirement("TM-8")
def test_the_models_clock_restarts_with_the_restored_services() -> None:
    """Timers at 0 and 3 registered after the watermark reached 4 are due in the next advance; after a restore the
    services start at Long.MIN_VALUE again, so an advance to 0 fires the one at 0 only, and the one at 3 waits."""
    with machine_over(BACKENDS["hashmap"]) as machine:
        machine.timers_advance(kind="event", time=4)
        machine.timer_register_or_delete(kind="event", time=0, delete=False)
        machine.timer_register_or_delete(kind="event", time=3, delete=False)
        machine.checkpoint_and_restore(parallelism=2)
        machine.timers_advance(kind="event", time=0)
        assert machine.fired == [("event", "k0", "n0", 0)], f"advance to 0 after the restore fired {machine.fired}"
        machine.timer_counts_match_the_model()
        machine.timers_advance(kind="event", time=3)
        assert machine.fired == [("event", "k0", "n0", 3)], f"advance to 3 after the restore fired {machine.fired}"


@pytest.mark.requirement("SB-3")
@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_a_round_trip_hands_a_backend_without_rescaling_its_own_key_group_ranges(parallelism: int) -> None:
    """A backend that declares rescaling False may refuse handles of other key-group ranges (SB-3); the model's
    round trip through the reference backend once restored it from the reference's savepoint at the drawn
    parallelism, and so rejected such a correct backend at the default seed and examples."""
    replay(
        lambda directory: without_rescaling({}),
        [
            ("value_update", {"v": 7}),
            ("round_trip_through_reference_backend", {"parallelism": parallelism}),
            ("checkpoint_and_restore", {"parallelism": parallelism}),
            ("every_entry_matches_the_model", {}),
        ],
    )
