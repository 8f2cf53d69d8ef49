"""A user's state backend or storage created before a command runs, so that one whose factory raises is one line
naming it (ERR-2) rather than a traceback from deep inside a run. The loader lets the factory's own exception
propagate (LD-5); the command line reports it."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator

from statecert.spec.errors import StateCertError


def factory_failure(subject: str, exc: BaseException) -> str:
    """One line for a backend or storage factory that raised: the exception and where it was raised."""
    raised = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" (raised at {raised.filename}:{raised.lineno})" if raised else ""
    return f"creating {subject} failed: {type(exc).__name__}: {exc}{where}"


@contextlib.contextmanager
def reported_as_one_line(subject: str, where: str = "") -> Iterator[None]:
    """Around creating the backend or storage `subject`: an unknown name or a documented error propagates as it is,
    any other exception of its factory becomes a ValueError of one line, prefixed by `where` (an option or a file)
    when given."""
    try:
        yield
    except (StateCertError, ValueError):
        raise
    except Exception as exc:
        raise ValueError(f"{where}: " * bool(where) + factory_failure(subject, exc)) from None


def check_backend(name: str, where: str) -> None:
    """Create the state backend `name` once through the loader, a failure one line naming `where`."""
    from statecert.reference.loader import load_state_backend

    with reported_as_one_line(repr(name), where):
        load_state_backend(job_config={"state.backend.type": name})
