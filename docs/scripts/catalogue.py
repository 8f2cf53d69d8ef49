"""The catalogue of deliberately broken backends and storages, read from `tests/broken_backends.py` and
`tests/broken_storages.py`: each entry's name, the requirement its certification must name violated (`CAUGHT_BY`),
and its bug in one line. The modules describe each bug in a numbered comment ("# 12. ...") above the class that
carries it (a range, "# 145-147.", above the first of several); an entry is described by the comment nearest above
the first class its definition builds on, or by that class's docstring where no numbered comment precedes it."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_NUMBERED = re.compile(r"^# (\d+)(?:-\d+)?\. (.*)$")
_SENTENCE_END = re.compile(r"(?<=[a-z0-9)`'\"])\. (?=[A-Z`(])")


@dataclass(frozen=True)
class BrokenEntry:
    name: str
    requirement: str
    number: int | None
    bug: str


def _numbered_comment_above(lines: list[str], line: int) -> tuple[int, str] | None:
    """The nearest numbered comment above 1-based `line`, as (number, its whole text)."""
    for i in range(line - 2, -1, -1):
        match = _NUMBERED.match(lines[i])
        if match:
            rest = []
            for following in lines[i + 1 :]:
                if not following.startswith("#"):
                    break
                rest.append(following.lstrip("#").strip())
            return int(match[1]), " ".join([match[2], *rest])
    return None


def _first_sentence(text: str) -> str:
    match = _SENTENCE_END.search(text)
    return text[: match.start() + 1] if match else text


def _definitions(tree: ast.Module) -> dict[str, ast.stmt]:
    found: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node
    return found


def _names_in(node: ast.stmt) -> Iterator[str]:
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            yield child.id


def _caught_by(tree: ast.Module) -> dict[str, str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CAUGHT_BY" for t in node.targets):
            value = ast.literal_eval(node.value)
            assert isinstance(value, dict)
            return {str(k): str(v) for k, v in value.items()}
    raise ValueError("no CAUGHT_BY in the module")


def _adjacent_comment(lines: list[str], node: ast.stmt) -> tuple[int, str] | None:
    """The numbered comment standing directly above a definition (its decorators included)."""
    decorators = getattr(node, "decorator_list", [])
    first = int(decorators[0].lineno) if decorators else node.lineno
    i = first - 2
    while i >= 0 and lines[i].startswith("#") and not _NUMBERED.match(lines[i]):
        i -= 1
    if i < 0 or not _NUMBERED.match(lines[i]):
        return None
    return _numbered_comment_above(lines, i + 2)


def _description(name: str, definitions: dict[str, ast.stmt], lines: list[str]) -> tuple[int | None, str]:
    """Going breadth first from entry `name` through the module-level names its definition uses (an assignment, a
    class, the entry's own function body; not a helper function's body): the first numbered comment directly above
    one of them; else the first docstring of a class defined after the module's first numbered comment (the shared
    scaffolding before it describes no bug); else the numbered comment nearest above the first class met, or above
    the first definition the entry builds on."""
    order: list[ast.stmt] = []
    seen: set[str] = set()
    queue = [name]
    while queue:
        current = queue.pop(0)
        node = definitions.get(current)
        if current in seen or node is None:
            continue
        seen.add(current)
        order.append(node)
        if not isinstance(node, ast.FunctionDef) or current == name:
            queue.extend(_names_in(node))
    for node in order:
        if comment := _adjacent_comment(lines, node):
            return comment
    scaffolding = next(i for i, line in enumerate(lines, 1) if _NUMBERED.match(line))
    classes = [node for node in order if isinstance(node, ast.ClassDef) and node.lineno > scaffolding]
    for node in classes:
        if text := ast.get_docstring(node):
            return None, " ".join(text.split())
    built_on = classes[0] if classes else order[1] if len(order) > 1 else None
    comment = _numbered_comment_above(lines, built_on.lineno) if built_on else None
    return comment if comment else (None, "")


def read_catalogue(path: Path) -> list[BrokenEntry]:
    """Every entry of the module's `CAUGHT_BY`, with its number and the first sentence of its description."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    definitions = _definitions(tree)
    entries = []
    for name, requirement in _caught_by(tree).items():
        number, text = _description(name, definitions, lines)
        entries.append(BrokenEntry(name, requirement, number, _first_sentence(text)))
    return entries
