"""A PNG beside a scenario report: per scenario its wall time, checkpoints and failovers, coloured by verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_results(results: list[dict[str, Any]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["scenario"] for r in results]
    fig, (seconds, counts) = plt.subplots(1, 2, figsize=(12, 0.35 * len(names) + 1.5), sharey=True)
    colours = ["tab:green" if r["passed"] else "tab:red" for r in results]
    seconds.barh(names, [r["seconds"] for r in results], color=colours)
    seconds.set_xlabel("wall seconds (green: passed, red: failed)")
    checkpoints = [sum(run["completed_checkpoints"] for run in r["runs"]) for r in results]
    failovers = [sum(run["failovers"] for run in r["runs"]) for r in results]
    y = range(len(names))
    counts.barh([i - 0.2 for i in y], checkpoints, height=0.4, label="completed checkpoints", color="tab:blue")
    counts.barh([i + 0.2 for i in y], failovers, height=0.4, label="failovers", color="tab:orange")
    counts.legend(loc="lower right")
    seconds.invert_yaxis()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
