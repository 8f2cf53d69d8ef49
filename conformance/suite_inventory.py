"""The conformance suite's tests that a run did not collect: a run naming only some of the suite's files (or test
functions) certifies nothing, so the plugin lists what it left out instead of calling its requirements "not a
backend obligation"."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SUITE_DIR = Path(__file__).resolve().parent / "suite"
SUITE_PACKAGE = "statecert.conformance.suite"


@dataclass(frozen=True)
class UncollectedTest:
    """A suite test function the run did not collect, seen through its marks as the plugin reads an item's."""

    module: str
    name: str
    marks: tuple[pytest.Mark, ...]

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return next((mark for mark in self.marks if mark.name == name), None)


def _marks(owner: Any) -> list[pytest.Mark]:
    marks = getattr(owner, "pytestmark", [])
    return [
        mark.mark if isinstance(mark, pytest.MarkDecorator) else mark
        for mark in (marks if isinstance(marks, list) else [marks])
    ]


def uncollected_tests(
    collected: Iterable[tuple[str, str]], modules: Mapping[str, ModuleType] | None = None
) -> Iterator[UncollectedTest]:
    """Every test function of the suite's modules that is not among `collected` ((module stem, function name)
    pairs), in file and definition order. `modules` are the suite modules the run imported, by stem; the others
    (nothing was collected from them) are imported to read their marks."""
    seen = set(collected)
    imported = modules or {}
    for path in sorted(SUITE_DIR.glob("test_*.py")):
        module = imported.get(path.stem) or importlib.import_module(f"{SUITE_PACKAGE}.{path.stem}")
        module_marks = _marks(module)
        for name, function in vars(module).items():
            if name.startswith("test_") and callable(function) and (path.stem, name) not in seen:
                yield UncollectedTest(path.stem, name, (*_marks(function), *module_marks))
