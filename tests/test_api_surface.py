"""The public API (spec protocols, authoring kit, plugin options and markers) against its committed snapshot: a
name may not disappear without a deprecation period (a deprecated alias that warns, listed in CHANGELOG.md), and a
new one is added to the snapshot deliberately (`python -m tests.api_surface`)."""

from __future__ import annotations

import json

from tests.api_surface import SNAPSHOT, api_surface


def _names(surface: dict[str, dict[str, list[str]]]) -> set[str]:
    return {
        f"{module}.{name}" + (f".{member}" if member else "")
        for module, names in surface.items()
        for name, members in names.items()
        for member in [None, *members]
    }


def test_no_public_name_disappears_and_every_new_one_is_recorded() -> None:
    committed, current = _names(json.loads(SNAPSHOT.read_text(encoding="utf-8"))), _names(api_surface())
    removed, added = sorted(committed - current), sorted(current - committed)
    assert not removed, (
        f"public API: expected every name of tests/api_surface.json to stay (keep a deprecated alias that warns, "
        f"and list it in CHANGELOG.md), got {len(removed)} gone: {removed[:20]}"
    )
    assert not added, (
        f"public API: expected tests/api_surface.json to record every public name (run python -m tests.api_surface "
        f"and list the addition in CHANGELOG.md), got {len(added)} new: {added[:20]}"
    )
