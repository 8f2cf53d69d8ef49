"""The figures of one benchmark run in one JSON file: each benchmark merges its own section (`--json PATH`), and
`summary.py` checks the performance targets against them and draws the PNG. Committed, the file lets a later run's
ratios be compared with this one's."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).resolve().parent / "results" / "figures.json"


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", help="merge this benchmark's figures into this JSON file (tox -e bench does)")


def record(path: str | None, benchmark: str, figures: dict[str, Any]) -> None:
    """Merge `figures` under `benchmark` into the JSON file at `path` (nothing when `path` is None), with the
    machine the run was on."""
    if not path:
        return
    file = Path(path)
    data: dict[str, Any] = json.loads(file.read_text()) if file.exists() else {}
    data["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    data.setdefault("started", now)
    data[benchmark] = {**figures, "measured_at": now}  # a benchmark run alone replaces its own section only
    file.parent.mkdir(parents=True, exist_ok=True)
    partial = file.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    partial.replace(file)
