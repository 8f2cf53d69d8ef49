"""Every assertion of the conformance suite has a message that starts with the requirement it checks, so that a
failure names its requirement (the report attributes it by the ID its message names) and says what was called and
expected; pytest's assertion rewriting adds what came back. No bare `assert`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SUITE = Path(__file__).resolve().parent.parent / "conformance" / "suite"
REQUIREMENT_ID = re.compile(r"^[A-Z]+(?:-[A-Z]+)*-\d+")
# a message the test builds from its requirement IDs: held in a variable of one of these names by the suite's
# convention (`rid`, `requirement`, `ids`, `cites`: the IDs; `what`, `wrong`: a text that starts with them)
ID_CARRIERS = {"rid", "requirement", "ids", "cites", "what", "wrong"}


def _starts_with_an_id(message: ast.expr) -> bool:
    while isinstance(message, ast.BinOp) and isinstance(message.op, ast.Add):
        message = message.left
    if isinstance(message, ast.Constant):
        return bool(REQUIREMENT_ID.match(str(message.value)))
    if isinstance(message, ast.Name):
        return message.id in ID_CARRIERS
    if isinstance(message, ast.JoinedStr) and message.values:
        first = message.values[0]
        if isinstance(first, ast.Constant):
            return bool(REQUIREMENT_ID.match(str(first.value)))
        if isinstance(first, ast.FormattedValue):
            return bool(ID_CARRIERS & {n.id for n in ast.walk(first.value) if isinstance(n, ast.Name)})
    return False


def test_every_suite_assertion_message_starts_with_a_requirement_id() -> None:
    offending = [
        f"{path.name}:{node.lineno}: {ast.unparse(node)[:120]}"
        for path in sorted(SUITE.glob("test_*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Assert) and (node.msg is None or not _starts_with_an_id(node.msg))
    ]
    assert not offending, (
        f"assert statements of conformance/suite: expected a message starting with a requirement ID, got "
        f"{len(offending)} without: {offending[:20]}"
    )
