"""The catalogue page: every deliberately broken backend and storage the suite must reject, with the requirement
its certification names violated and the bug in one line (`catalogue.read_catalogue`)."""

from __future__ import annotations

from pathlib import Path

from catalogue import BrokenEntry, read_catalogue

ROOT = Path(__file__).resolve().parents[2]


def _table(entries: list[BrokenEntry]) -> list[str]:
    rows = ["| # | name | requirement | the bug |", "| --- | --- | --- | --- |"]
    for e in entries:
        bug = e.bug.replace("|", "\\|")
        rows.append(f"| {e.number or ''} | `{e.name}` | [{e.requirement}](requirements.md#{e.requirement}) | {bug} |")
    return rows


def catalogue_page() -> str:
    backends = read_catalogue(ROOT / "tests" / "broken_backends.py")
    storages = read_catalogue(ROOT / "tests" / "broken_storages.py")
    return "\n".join(
        [
            "# Catalogue of broken backends and storages",
            "",
            f"{len(backends)} backends and {len(storages)} checkpoint storages with one realistic bug each, which a "
            "certification must reject naming the requirement given (`tox -e catalog` certifies every one; `tox` "
            "the first of each chapter). Generated from `tests/broken_backends.py` and `tests/broken_storages.py` "
            "(`CAUGHT_BY` and the comment describing each bug) when the documentation is built. Use any of them as "
            "`statecert certify tests.broken_backends:NAME` from a checkout to see what a failure looks like.",
            "",
            "## Backends",
            "",
            *_table(backends),
            "",
            "## Checkpoint storages",
            "",
            *_table(storages),
            "",
        ]
    )
