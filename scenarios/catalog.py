"""The scenario library shipped in `scenarios/library/`, and resolving a scenario argument (a file or a library
scenario's name)."""

from __future__ import annotations

from pathlib import Path

from statecert.scenarios.loader import load_scenario
from statecert.scenarios.model import Scenario
from statecert.spec.errors import ScenarioError

LIBRARY = Path(__file__).resolve().parent / "library"


def library_paths() -> list[Path]:
    return sorted(LIBRARY.glob("*.toml"))


def library() -> list[Scenario]:
    return [load_scenario(p) for p in library_paths()]


def resolve(argument: str) -> Path:
    """A scenario file path, or the name of a library scenario (`task-failure-processing`)."""
    path = Path(argument)
    if path.exists() or path.suffix == ".toml":
        return path
    named = LIBRARY / f"{argument}.toml"
    if named.exists():
        return named
    names = ", ".join(p.stem for p in library_paths())
    raise ScenarioError(f"{argument}: no such scenario file or library scenario; the library has {names}")
