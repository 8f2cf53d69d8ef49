"""One Flink referee JVM per test session; every test here is skipped, saying why, where Flink cannot run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.flink.referee import Referee, RefereeUnavailable


@pytest.fixture(scope="session")
def flink() -> Iterator[Referee]:
    try:
        referee = Referee()
    except RefereeUnavailable as exc:
        pytest.skip(str(exc))
    yield referee
    referee.close()
