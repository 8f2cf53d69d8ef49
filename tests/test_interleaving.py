"""The suite's turn-taking threads (`statecert.conformance.interleaving`): they meet races a few lines long on any
machine, never deadlock a thread blocked in a lock, repeat themselves for one seed and pass on what they raise."""

from __future__ import annotations

import threading

import pytest

from statecert.conformance.interleaving import Interleaving


def _unlocked_increments(counter: list[int], times: int) -> None:
    for _ in range(times):
        seen = counter[0]
        counter[0] = seen + 1  # a turn taken between these two lines loses the other thread's increments


def test_turns_are_taken_inside_a_read_and_write_back_two_lines_apart() -> None:
    counter = [0]
    interleaving = Interleaving(seed=0)
    interleaving.run(lambda: _unlocked_increments(counter, 2_000), lambda: _unlocked_increments(counter, 2_000))
    assert interleaving.switches > 100, f"expected the threads to take turns often, got {interleaving.switches}"
    assert counter[0] < 4_000, "expected increments lost to turns taken between a read and its write-back"


def test_a_thread_blocked_in_a_lock_the_other_holds_is_passed_over() -> None:
    counter, lock = [0], threading.Lock()

    def locked_increments() -> None:
        for _ in range(300):
            with lock:
                seen = counter[0]
                counter[0] = seen + 1

    Interleaving(seed=0, patience=0.005).run(locked_increments, locked_increments)
    assert counter[0] == 600, f"expected every locked increment kept, got {counter[0]} of 600"


def _turn_order(seed: int) -> list[str]:
    order: list[str] = []

    def append(name: str) -> None:
        for i in range(200):
            order.append(f"{name}{i}")

    Interleaving(seed, patience=10.0).run(lambda: append("a"), lambda: append("b"))
    return order


def test_one_seed_gives_one_interleaving() -> None:
    assert _turn_order(7) == _turn_order(7)
    assert _turn_order(7) != _turn_order(8)


@pytest.mark.parametrize("failing", ["here", "beside"])
def test_what_either_thread_raises_is_raised(failing: str) -> None:
    def fail() -> None:
        raise RuntimeError(failing)

    here, beside = (fail, lambda: None) if failing == "here" else (lambda: None, fail)
    with pytest.raises(RuntimeError, match=failing):
        Interleaving(seed=0).run(here, beside)
