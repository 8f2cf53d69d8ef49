"""The time bound on a conformance test's phases (`conformance.time_bound`): a deadlock in the test's thread, or a
wait for a thread that never ends, is interrupted with `TimeBoundExceeded` naming where each thread waits; what no
signal interrupts ends the process after the grace period."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
from typing import Any

import pytest

from statecert.conformance.interleaving import Interleaving
from statecert.conformance.time_bound import TimeBoundExceeded, _not_the_standard_library, time_bound


def deadlocked_here() -> None:
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()  # waits for itself


def test_a_deadlock_in_the_test_thread_is_interrupted_and_named() -> None:
    with pytest.raises(TimeBoundExceeded) as raised, time_bound(1, "call", grace=5):
        deadlocked_here()
    message = str(raised.value)
    assert message.startswith("the test's call did not end within 1 s (--test-timeout)"), message
    assert "the test's thread in deadlocked_here (test_time_bound.py:" in message, message


def test_a_join_of_a_hung_thread_is_interrupted_naming_both_threads() -> None:
    release = threading.Event()
    worker = threading.Thread(target=release.wait, name="hung-worker", daemon=True)
    worker.start()
    try:
        with pytest.raises(TimeBoundExceeded) as raised, time_bound(1, "setup", grace=5):
            worker.join()
    finally:
        release.set()
    message = str(raised.value)
    assert "the test's setup did not end within 1 s" in message, message
    assert "thread 'hung-worker' in the standard library" in message, message


def test_a_block_ending_in_time_is_left_alone_and_the_bound_is_gone_after_it() -> None:
    with time_bound(1, "call"):
        pass
    time.sleep(1.5)  # an alarm left armed would raise here
    with time_bound(0, "call"):  # no bound
        time.sleep(1.2)


def test_a_hang_no_signal_interrupts_ends_the_process_after_the_grace_period() -> None:
    """A call that never comes back to the interpreter (here: the alarm signal blocked, as in a C library's own
    wait) is not interrupted; `grace` seconds after the bound, faulthandler prints the stacks and ends the process."""
    program = textwrap.dedent(
        """
        import signal, time
        from statecert.conformance.time_bound import time_bound
        with time_bound(1, "call", grace=1):
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
            time.sleep(60)
        print("not ended")
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=50)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "not ended" not in done.stdout
    assert "Timeout (0:00:02)!" in done.stderr, done.stderr


@pytest.mark.parametrize("hangs", [("here",), ("beside",), ("here", "beside")], ids=["here", "beside", "both"])
def test_a_hang_in_either_member_of_an_interleaving_is_interrupted(hangs: tuple[str, ...]) -> None:
    """The suite's `Interleaving` runs two calls in two threads: whichever hangs, the test's thread is interrupted,
    and does not wait for the other member past the bound (when both hang, it once did, until faulthandler ended
    the process)."""
    release = threading.Event()
    calls: dict[str, Any] = {"here": lambda: None, "beside": lambda: None}
    calls.update({member: release.wait for member in hangs})
    try:
        with pytest.raises(TimeBoundExceeded), time_bound(1, "call", grace=5):
            Interleaving(0).run(calls["here"], calls["beside"])
    finally:
        release.set()


def test_frames_of_installed_packages_are_named_though_they_lie_below_the_standard_library() -> None:
    """Without a venv, `site-packages` lies inside the standard library's directory: a backend installed there must
    still be named where it waits, not passed over as the standard library."""
    installed = os.path.join(sysconfig.get_paths()["purelib"], "their_backend", "state.py")
    standard = os.path.join(sysconfig.get_paths()["stdlib"], "threading.py")
    assert _not_the_standard_library(installed) and not _not_the_standard_library(standard)
