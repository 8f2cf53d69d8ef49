"""The worked examples keep to their routes: the spec-only backend imports nothing from `statecert.reference`,
and the base-class one imports the reference code only through the public authoring kit. (`tox -e example`
certifies both.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize(
    "module",
    [
        "spec_only_backend.py",
        "spec_only_operator_backend.py",
        "spec_only_timers.py",
        "spec_only_ttl.py",
        "spec_only_serializers.py",
        "spec_only_snapshots.py",
    ],
)
def test_spec_only_example_imports_no_reference_code(module: str) -> None:
    modules = imported_modules(ROOT / "examples" / "spec-only-backend" / module)
    statecert = sorted(m for m in modules if m.startswith("statecert"))
    assert statecert and all(m.startswith("statecert.spec") for m in statecert), statecert


def test_base_class_example_uses_only_the_public_authoring_kit() -> None:
    modules = imported_modules(ROOT / "examples" / "dict-backend" / "dict_backend.py")
    reference = sorted(m for m in modules if m.startswith("statecert.reference"))
    assert reference == ["statecert.reference.authoring"], reference
