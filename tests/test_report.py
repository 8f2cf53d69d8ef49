"""How test outcomes fold into requirement outcomes in the certification report (conformance/report.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from statecert.conformance.plugin import without_fixture_arguments
from statecert.conformance.report import ORDER, Report
from statecert.conformance.report import TestResult as Result
from statecert.spec.requirements import Requirement

REQUIREMENTS = {rid: Requirement(rid, "99-example.md", f"requirement {rid}") for rid in ("X-1", "X-2")}


def test_a_failure_attributed_elsewhere_leaves_the_other_requirement_unchecked_and_says_why() -> None:
    failed = Result("test_m::test_t", "failed", ("X-1", "X-2"), message="X-1: expected 1, got 2", violated=("X-1",))
    outcomes = Report({}, REQUIREMENTS, [failed]).requirement_outcomes()
    assert outcomes["X-1"]["outcome"] == "failed" and outcomes["X-1"]["reason"] == "X-1: expected 1, got 2"
    assert outcomes["X-2"]["outcome"] == "skipped", outcomes["X-2"]
    assert outcomes["X-2"]["reason"] == "not fully checked: test_m::test_t failed on X-1: X-1: expected 1, got 2"
    assert outcomes["X-2"]["failing_tests"] == []


@given(st.lists(st.sampled_from(["passed", "failed", "skipped", "unsupported", "expected-failure"]), min_size=1))
def test_a_requirement_takes_the_strongest_outcome_of_its_tests(outcomes: list[str]) -> None:
    results = [
        Result(f"test_m::test_{i}", outcome, ("X-1",), message=outcome, violated=("X-1",) * (outcome == "failed"))
        for i, outcome in enumerate(outcomes)
    ]
    got = Report({}, REQUIREMENTS, results).requirement_outcomes()["X-1"]["outcome"]
    expected = min(outcomes, key=ORDER.index)
    assert got == expected, f"tests {outcomes}: expected {expected}, got {got}"


def test_a_message_keeps_the_drawn_arguments_of_a_failing_call_and_drops_the_fixtures() -> None:
    """Hypothesis's note of a failing call shows fixture reprs (addresses, temporary paths, over several lines when
    long): they go, the drawn arguments stay, and so does whatever follows the call."""
    assertion = ["AssertionError: KS-RED-1: expected 'xyc', got 'axyc'", "Failing test case: test_reducing("]
    fixtures = [
        "    certification=<statecert.conformance.plugin.CertificationSession object at 0x7f00>,",
        "    tmp_path_factory=TempPathFactory(",
        "        _basetemp=PosixPath('/tmp/pytest-of-root/pytest-844'),",
        "        _retention_count=3,",
        "    ),",
    ]
    drawn = ["    values=['xyc'],", "    extra={", "        'certification': 1,", "    },"]
    after = [")", "Explanation: these lines ran only in failing cases"]
    note = "\n".join([*assertion, *fixtures, *drawn, *after])
    kept = without_fixture_arguments(note, ["certification", "tmp_path_factory"]).splitlines()
    assert kept == [*assertion, *drawn, *after], kept
