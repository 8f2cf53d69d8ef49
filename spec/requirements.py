"""The requirement IDs of the spec chapters, parsed from the Markdown shipped in this package."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_REQUIREMENT = re.compile(r"^- \*\*(?P<id>[A-Z]+(?:-[A-Z]+)*-\d+)\*\* (?P<hardening>\*\(hardening\)\* )?(?P<text>.+)$")
CONTRACT, HARDENED = "contract", "hardened"
"""The two levels: the Flink-equivalent contract, and hardening beyond what Flink's own backends do (chapters'
README)."""


_TITLE_END = re.compile(r"(?<=[a-z0-9)`'\"])(?:\. |: |; | \(| - )")


@dataclass(frozen=True)
class Requirement:
    id: str
    chapter: str
    text: str
    level: str = CONTRACT
    """`contract`, or `hardened` for a requirement marked *(hardening)*: more than Flink's own backends do."""

    @property
    def title(self) -> str:
        """A short title: the text's first clause, at most 80 characters (certificates list requirements by it)."""
        ends = (m.start() for m in _TITLE_END.finditer(self.text) if self.text.count("`", 0, m.start()) % 2 == 0)
        end = next(ends, None)
        title = self.text[:end] if end is not None else self.text.rstrip(".")
        return title if len(title) <= 80 else title[:79].rsplit(" ", 1)[0] + "…"


def load_requirements() -> dict[str, Requirement]:
    """Every requirement, by ID; a duplicate ID is a spec bug and raises ValueError."""
    found: dict[str, Requirement] = {}
    chapters = resources.files("statecert.spec").joinpath("chapters")
    for entry in sorted(chapters.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".md"):
            continue
        for line in entry.read_text(encoding="utf-8").splitlines():
            match = _REQUIREMENT.match(line)
            if match:
                if match["id"] in found:
                    raise ValueError(f"duplicate requirement ID {match['id']} in {entry.name}")
                level = HARDENED if match["hardening"] else CONTRACT
                found[match["id"]] = Requirement(match["id"], entry.name, match["text"], level)
    return found
