"""The differences from Flink kept on purpose (`differences.toml`), which the differential tests accept and the
documentation lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

DIFFERENCES = Path(__file__).with_name("differences.toml")


def documented_differences() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = tomllib.loads(DIFFERENCES.read_text(encoding="utf-8")).get("difference", [])
    return entries
