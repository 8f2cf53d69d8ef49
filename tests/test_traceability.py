"""Every spec requirement has a test, and every test cites only requirements that exist."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from statecert.spec.requirements import load_requirements

MARKER = re.compile(r"@pytest\.mark\.requirement\(([^)]*)\)")
QUOTED = re.compile(r"\"([^\"]+)\"")


ROOT = Path(__file__).resolve().parent.parent
TEST_DIRS = (ROOT / "tests", ROOT / "conformance" / "suite")
# Chapters that state obligations of a backend: the conformance suite must check every requirement in them.
BACKEND_CHAPTERS = ("KS", "TTL", "KB", "OS", "SB", "SP")


def cited(directories: tuple[Path, ...] = TEST_DIRS) -> dict[str, set[str]]:
    """Requirement ID -> test files citing it."""
    found: dict[str, set[str]] = {}
    for path in sorted(p for d in directories for p in d.glob("test_*.py")):
        for args in MARKER.findall(path.read_text(encoding="utf-8")):
            for requirement in QUOTED.findall(args):
                found.setdefault(requirement, set()).add(f"{path.parent.name}/{path.name}")
    return found


@functools.cache
def citing_tests(directory: Path = ROOT / "conformance" / "suite") -> dict[str, frozenset[str]]:
    """Requirement ID -> names of the test functions whose `@pytest.mark.requirement(...)` cites it (module-level
    `pytestmark` aside, which `cited` counts): parsed once per run."""
    found: dict[str, set[str]] = {}
    for path in sorted(directory.glob("test_*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef):
                for requirement in _cited_by(node):
                    found.setdefault(requirement, set()).add(node.name)
    return {requirement: frozenset(names) for requirement, names in found.items()}


def _cited_by(function: ast.FunctionDef) -> set[str]:
    """The requirement IDs of a test function's `@pytest.mark.requirement(...)` decorators."""
    return {
        argument.value
        for decorator in function.decorator_list
        if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "pytest.mark.requirement"
        for argument in decorator.args
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str)
    }


def test_spec_parses_with_unique_ids() -> None:
    requirements = load_requirements()
    assert len(requirements) >= 100, f"only {len(requirements)} requirements parsed from the chapters"
    assert all(r.text.strip() for r in requirements.values())


def test_every_cited_requirement_exists() -> None:
    unknown = {rid: files for rid, files in cited().items() if rid not in load_requirements()}
    assert not unknown, f"tests cite requirement IDs the spec does not define: {unknown}"


def test_every_requirement_has_a_test() -> None:
    untested = sorted(set(load_requirements()) - set(cited()))
    assert not untested, f"requirements without a test: {untested}"


def test_conformance_suite_covers_every_backend_obligation() -> None:
    in_suite = cited((ROOT / "conformance" / "suite",))
    missing = sorted(r for r in load_requirements() if r.split("-")[0] in BACKEND_CHAPTERS and r not in in_suite)
    assert not missing, f"backend requirements the conformance suite does not check: {missing}"
