"""How test outcomes fold into requirement outcomes in the certification report (conformance/report.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from statecert.conformance.plugin import without_fixture_arguments
from statecert.conformance.report import ORDER, Report, certificate
from statecert.conformance.report import TestResult as Result
from statecert.spec.requirements import CONTRACT, HARDENED, Requirement

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


def test_the_certificate_says_with_which_configuration_and_known_bugs_the_backend_was_certified() -> None:
    """A platform team archives the Markdown certificate: a backend certified wrapped in the changelog backend, with
    a capability overridden or with known bugs excused, must say so there, not only in the JSON."""
    header = {
        "statecert_version": "0",
        "spec_version": "0",
        "date": "2026-11-27",
        "python": "3",
        "platform": "Linux-6-x86_64",
        "libraries": {"hypothesis": "6.100.0", "pytest": "8.0.0"},
        "contracts": ["state backend"],
        "backend": {"name": "b", "factory": "m:f", "version": "1", "capabilities": {}},
        "storage_under_test": None,
        "options": {
            "storage": "filesystem",
            "tiers": ["contract"],
            "max_examples": 25,
            "seed": 0,
            "backend_config": {"state.changelog.enabled": "true"},
            "expected_failures": "known-bugs.toml",
            "capability_overrides": {"ttl": False},
            "shrink_seconds": 30,
            "storage_under_test": None,
        },
    }
    passed = Result("test_x::test_a", "passed", ("X-1",))
    rows = certificate(Report(header, REQUIREMENTS, [passed]).to_dict()).splitlines()
    assert "| configuration | `state.changelog.enabled=true` |" in rows, rows[:20]
    assert "| capability overrides | `ttl=False` |" in rows, rows[:20]
    assert "| expected failures | `known-bugs.toml` |" in rows, rows[:20]
    assert "| python | 3 on Linux-6-x86_64 |" in rows, rows[:20]
    assert "| libraries | hypothesis 6.100.0, pytest 8.0.0 |" in rows, rows[:20]
    header["options"] = {**header["options"], "backend_config": {}, "expected_failures": None}
    rows = certificate(Report(header, REQUIREMENTS, [passed]).to_dict()).splitlines()
    assert "| configuration | the backend's defaults |" in rows and "| expected failures | - |" in rows, rows[:20]


@given(st.sets(st.sampled_from(["C-1", "C-2", "H-1", "H-2"])))
def test_each_level_fails_only_on_its_own_requirements(failing: set[str]) -> None:
    """The contract level (Flink-equivalent) fails only on contract requirements; the hardened level on any: a
    backend that behaves like Flink's fails only hardening requirements and is certified at the contract level."""
    requirements = {
        rid: Requirement(rid, "99-example.md", f"requirement {rid}", HARDENED if rid.startswith("H") else CONTRACT)
        for rid in ("C-1", "C-2", "H-1", "H-2")
    }
    results = [
        Result(f"test_m::test_{rid}", "failed" if rid in failing else "passed", (rid,), message=rid,
               violated=(rid,) * (rid in failing))
        for rid in sorted(requirements)
    ]  # fmt: skip
    levels = Report({"backend": {"capabilities": {}}}, requirements, results).to_dict()["levels"]
    contract_failing = sorted(rid for rid in failing if rid.startswith("C"))
    expected = {
        CONTRACT: {"verdict": "not certified" if contract_failing else "certified", "failed": contract_failing},
        HARDENED: {"verdict": "not certified" if failing else "certified", "failed": sorted(failing)},
    }
    got = {level: {**info, "failed": sorted(info["failed"])} for level, info in levels.items()}
    assert got == expected, f"levels with {sorted(failing)} failing: expected {expected}, got {got}"
