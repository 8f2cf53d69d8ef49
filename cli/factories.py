"""A user's state backend created before a command runs, so that one whose factory raises is one line naming it
(ERR-2) rather than a traceback from deep inside a run. The loader lets the factory's own exception propagate
(LD-5); the command line reports it."""

from __future__ import annotations

import traceback

from statecert.spec.errors import StateCertError


def factory_failure(subject: str, exc: BaseException) -> str:
    """One line for a backend or storage factory that raised: the exception and where it was raised."""
    raised = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" (raised at {raised.filename}:{raised.lineno})" if raised else ""
    return f"creating {subject} failed: {type(exc).__name__}: {exc}{where}"


def check_backend(name: str, where: str) -> None:
    """Create the state backend `name` once through the loader: an unknown name or a documented error propagates
    as it is, any other exception of its factory becomes a ValueError naming `where` (an option or a file)."""
    from statecert.reference.loader import load_state_backend

    try:
        load_state_backend(job_config={"state.backend.type": name})
    except (StateCertError, ValueError):
        raise
    except Exception as exc:
        raise ValueError(f"{where}: {factory_failure(repr(name), exc)}") from None
