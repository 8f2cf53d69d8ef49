"""Every Python package of the source tree ships in the wheel: `pyproject.toml` lists packages explicitly (the
top-level folders map to `statecert.*` through `package-dir`), so a new folder missing from the list works from
the source tree and breaks every installed copy."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed_in_pyproject() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for package, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            if "build" in relative.parts or any(p.startswith(".") for p in relative.parts):
                continue
            found.add(".".join([package, *relative.parts]))
    assert found <= listed, f"package folders missing from pyproject.toml [tool.setuptools] packages: {found - listed}"
