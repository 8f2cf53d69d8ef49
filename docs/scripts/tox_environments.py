"""The tox environments page: each environment of `tox.ini` with its description, and which run by default (CI)."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tox_environments() -> str:
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "tox.ini")
    default = [e.strip() for e in config["tox"]["env_list"].split(",")]
    lines = [
        "# tox environments",
        "",
        f"`tox` (and CI, `.ci/run`) runs {', '.join(f'`{e}`' for e in default)}; the others run on demand with "
        "`tox -e NAME`. Generated from `tox.ini` when the documentation is built.",
        "",
        "| environment | default | what it runs |",
        "| --- | --- | --- |",
    ]
    for section in config.sections():
        if section.startswith("testenv:"):
            name = section.removeprefix("testenv:")
            description = " ".join(config[section].get("description", "").split()).replace("|", "\\|")
            lines.append(f"| `{name}` | {'yes' if name in default else ''} | {description} |")
    return "\n".join([*lines, ""])
