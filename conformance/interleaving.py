"""Threads that take turns at random points of their Python code, so that a test meets the interleavings a JVM's
task thread and asynchronous snapshot threads meet, on any machine and under any load.

The interpreter's own switching (`sys.setswitchinterval`) needs the waiting thread to be scheduled by the operating
system to ask for its turn, so on a busy machine threads switch every few milliseconds and a race between two
calls a few bytecodes long goes unseen. Here one of two member threads runs while the other waits; before each
bytecode the running member executes (its trace function's opcode event), with probability `switch_probability`
drawn from a seeded generator, it hands the turn to the other, so one seed gives one interleaving. A member that
does not take its turn within `patience` seconds (it is blocked in a lock the running one holds, say) is passed
over until it next executes Python code, so a backend that locks correctly never deadlocks the test, it only
interleaves less there.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from statecert.conformance.time_bound import TimeBoundExceeded


class Interleaving:
    """The turn-taking of two member threads: `run(here, beside)` calls `here` in the calling thread (the task
    thread, which created the backend) and `beside` in a new one, taking turns, and returns both results (what
    either raised is raised)."""

    def __init__(self, seed: int, switch_probability: float = 0.01, patience: float = 0.005) -> None:
        self._random = random.Random(seed)
        self._switch_probability = switch_probability
        self._patience = patience
        self._turn = threading.Condition()
        self._members: list[int] = []  # thread idents, in turn order
        self._waiting: set[int] = set()  # members waiting for their turn (not blocked elsewhere)
        self._running: int | None = None
        self.switches = 0

    def run(self, here: Callable[[], Any], beside: Callable[[], Any]) -> tuple[Any, Any]:
        results: list[Any] = [None, None]
        raised: list[BaseException] = []
        ready = threading.Barrier(2)

        def member(index: int, function: Callable[[], Any]) -> None:
            with self._turn:
                self._members.append(threading.get_ident())
            ready.wait()
            self._wait_for_turn()
            with self._turn:  # the first to run starts once the other waits for its turn: one seed, one interleaving
                self._turn.wait_for(lambda: len(self._waiting) == len(self._members) - 1, timeout=self._patience)
            previous = sys.gettrace()
            sys.settrace(self._trace)
            try:
                results[index] = function()
            except TimeBoundExceeded:
                raise  # the test's time is up (in the caller's thread): not the function's failure
            except BaseException as exc:  # raised in the caller's thread below
                raised.append(exc)
            finally:
                sys.settrace(previous)
                self._leave()

        thread = threading.Thread(target=member, args=(1, beside), daemon=True)  # a hung member cannot hold exit
        thread.start()
        try:
            member(0, here)
        except TimeBoundExceeded:
            raise  # the other member may be what hangs: waiting for it would hang the test past its bound
        except BaseException:
            thread.join()
            raise
        thread.join()
        if raised:
            raise raised[0]
        return results[0], results[1]

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        if event == "call":
            frame.f_trace_opcodes = True
        elif event == "opcode":
            if self._running != threading.get_ident():
                self._wait_for_turn()  # passed over while blocked: rejoin the turns
            elif self._random.random() < self._switch_probability:
                self._hand_over()
        return self._trace

    def _wait_for_turn(self) -> None:
        me = threading.get_ident()
        with self._turn:
            if self._running is None:
                self._running = me
                return
            self._waiting.add(me)
            self._turn.notify_all()
            if not self._turn.wait_for(lambda: self._running == me, timeout=self._patience):
                self._running = me  # the running member is blocked (or slow): go on beside it
            self._waiting.discard(me)

    def _hand_over(self) -> None:
        me = threading.get_ident()
        with self._turn:
            others = [m for m in self._members if m != me and m in self._waiting]
            if others:
                self._running = others[0]
                self.switches += 1
                self._turn.notify_all()
        if others:
            self._wait_for_turn()
        else:
            time.sleep(0)  # the other member is blocked elsewhere, or not yet waiting: let it get there

    def _leave(self) -> None:
        me = threading.get_ident()
        with self._turn:
            self._members.remove(me)
            if self._running == me:
                self._running = self._members[0] if self._members else None
            self._turn.notify_all()
