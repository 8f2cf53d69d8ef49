"""A Spark job that failed beyond Spark's own retries: how the Spark runner recognises one, runs a read-only query
again after it, and reports one it cannot get past as a documented error instead of a Java stack trace."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from statecert.spec.errors import StateCertError

T = TypeVar("T")

# What PySpark raises when a job fails in the JVM or in a Python worker (matched by name: PySpark's exception classes
# move between modules from release to release, and the runner imports no PySpark module at import time).
SPARK_FAILURES = ("Py4JJavaError", "PythonException", "SparkException")


class SparkJobFailed(StateCertError):
    """A Spark job failed beyond its task retries. From an epoch's job, the runner fails the scenario's job over
    (the epoch runs again from the latest completed checkpoint); from any other job (the oracle's queries, the state
    read-back), the scenario ends with this error, its message the failure's first line."""


def is_spark_failure(exc: BaseException) -> bool:
    return type(exc).__name__ in SPARK_FAILURES


def job_failed(exc: BaseException, what: str) -> SparkJobFailed:
    """`exc`, a Spark failure, as one line naming the job that failed."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return SparkJobFailed(f"{what}: {first}")


def retried(action: Callable[[], T], what: str, attempts: int = 3) -> T:
    """`action` (a read-only query: it reads committed output, the input or a completed checkpoint) run again when
    its Spark job fails: Spark retries a lost task, but a query whose broadcast or shuffle died with its executor
    fails as a whole; after `attempts`, SparkJobFailed naming `what`."""
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except Exception as exc:
            if not is_spark_failure(exc):
                raise
            if attempt == attempts:
                raise job_failed(exc, f"{what} (failed {attempts} times)") from exc
    raise AssertionError("unreachable")  # attempts >= 1
