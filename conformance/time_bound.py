"""The time bound on each phase of a conformance test (`--test-timeout`): a backend that deadlocks or never returns
fails the test it hangs in, and the certification goes on, instead of hanging the run with no report.

A bound is a `SIGALRM` timer, whose handler raises `TimeBoundExceeded` in the thread running the test: a deadlocked
lock acquire, a `join` of a thread that never ends and a sleep are all interrupted. The exception derives from
`BaseException`, not `Exception`, so that neither the backend's `except Exception` nor hypothesis takes it for a
failing example: hypothesis would shrink it, running the hanging example again with no bound left (pytest-timeout's
`pytest.fail` is such a failure, hypothesis issue #1980). A call that never returns to the interpreter (a C
library's own deadlock) is not interrupted by a signal: a grace period after the bound, `faulthandler` prints every
thread's stack and ends the process with status 1. Where there is no `SIGALRM` (Windows), that is the only bound.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import sysconfig
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

GRACE_SECONDS = 60
"""How long after its bound a phase that the signal did not end may go on before the process is ended."""
INNER_FRAMES = 3
"""How many of each thread's innermost frames outside the standard library a timeout names."""
_STDLIB = sysconfig.get_paths()["stdlib"]
_INSTALLED = (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])
"""Where installed packages live: below the standard library's directory in an interpreter without a venv."""
_NOT_THE_BACKENDS = f"{os.sep}rich{os.sep}"
"""Where the frames of `statecert certify`'s progress bar live: its refresh thread takes part in no deadlock."""


class TimeBoundExceeded(BaseException):
    """A test phase (setup, call or teardown) ran past `--test-timeout`; the message says where each thread was."""


def where_threads_are(frame: FrameType | None) -> str:
    """Where the interrupted thread (`frame`) and every other live thread were, innermost calls outside the standard
    library first: what a deadlock is made of."""
    frames = dict(sys._current_frames())
    me = threading.get_ident()
    if frame is not None:
        frames[me] = frame
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, top in sorted(frames.items(), key=lambda item: item[0] != me):
        calls: list[tuple[str, str, int]] = []
        f: FrameType | None = top
        while f is not None and len(calls) < INNER_FRAMES:
            if _not_the_standard_library(f.f_code.co_filename):
                calls.append((f.f_code.co_filename, f.f_code.co_name, f.f_lineno))
            f = f.f_back
        if ident != me and calls and all(_NOT_THE_BACKENDS in path for path, _, _ in calls):
            continue
        where = " < ".join(f"{name} ({os.path.basename(path)}:{line})" for path, name, line in calls)
        thread = "the test's thread" if ident == me else f"thread {names.get(ident, ident)!r}"
        parts.append(f"{thread} in {where or 'the standard library'}")
    return "; ".join(parts)


def _not_the_standard_library(path: str) -> bool:
    return not path.startswith(_STDLIB) or path.startswith(_INSTALLED)


def standard_error_descriptor() -> int | None:
    """A duplicate of the process's standard error descriptor, for stacks printed past a bound: pytest's capture
    puts a file of its own on descriptor 2 while a test runs, and a process that ends loses it (pytest's faulthandler
    plugin keeps one so, at configure time). None when there is none (pythonw)."""
    try:
        return os.dup(sys.__stderr__.fileno()) if sys.__stderr__ is not None else None
    except (ValueError, OSError):  # a standard error without a file descriptor
        return None


def end_the_process_after(seconds: int, stderr: int | None) -> bool:
    """Have `faulthandler` print every thread's stack to `stderr` (a descriptor; None: the process's standard error
    as it is then) and end the process with status 1 in `seconds`, unless cancelled; False when there is nowhere
    to print, and so no such bound."""
    file = sys.__stderr__ if stderr is None else stderr
    if file is None:
        return False
    try:
        faulthandler.dump_traceback_later(seconds, exit=True, file=file)
    except (ValueError, OSError):  # a standard error without a file descriptor
        return False
    return True


def threads_holding_exit() -> list[str]:
    """The threads besides this one that the interpreter's exit waits for (not daemons) and that still run: after a
    test ran past its bound, one may never end."""
    me = threading.current_thread()
    return [t.name for t in threading.enumerate() if t is not me and not t.daemon and t.is_alive()]


@contextmanager
def time_bound(seconds: int, phase: str, grace: int = GRACE_SECONDS, stderr: int | None = None) -> Iterator[None]:
    """Run the block under a bound of `seconds` (0: none); past it, `TimeBoundExceeded` is raised in the block, and
    `grace` seconds later still the process ends, its threads' stacks printed to `stderr` (a file descriptor,
    `standard_error_descriptor()`; None: the process's standard error)."""
    if seconds <= 0:
        yield
        return
    hard = end_the_process_after(seconds + grace, stderr)
    alarm = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    previous = None
    if alarm:

        def expired(signum: int, frame: FrameType | None) -> None:
            raise TimeBoundExceeded(
                f"the test's {phase} did not end within {seconds} s (--test-timeout): a call that never returns, "
                f"or one far slower than the suite expects; {where_threads_are(frame)}"
            )

        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        if hard:
            faulthandler.cancel_dump_traceback_later()
