"""A timeline PNG of a simulation report: checkpoint triggers, completions, aborts, failovers and coordinator
crashes over simulated time (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

STYLE = {
    "trigger": ("tab:blue", 0.3),
    "complete": ("tab:green", 0.8),
    "abort": ("tab:orange", 0.8),
    "failover": ("tab:red", 1.0),
    "coordinator-crash": ("black", 1.0),
}


def plot_timeline(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (events, tasks, durations) = plt.subplots(3, 1, figsize=(11, 7), sharex=True, height_ratios=[1, 2, 2])
    rows = list(STYLE)
    for row, kind in enumerate(rows):
        times = [e["t"] for e in report["timeline"] if e["event"] == kind]
        colour, alpha = STYLE[kind]
        events.scatter(times, [row] * len(times), marker="|", s=200, color=colour, alpha=alpha)
    events.set_yticks(range(len(rows)), rows)
    events.set_title(
        f"{report['mode']} checkpoints, {report['backend']}, seed {report['seed']}: "
        f"{len(report['completed_checkpoints'])} completed, {len(report['failovers'])} failover(s), "
        f"exactly-once={report['checks']['exactly_once']}"
    )
    names = sorted({span["task"] for span in report["task_spans"]})
    for span in report["task_spans"]:
        colour = "tab:purple" if span["kind"] == "unaligned" else "tab:cyan"
        tasks.barh(
            names.index(span["task"]),
            max(span["end"] - span["start"], 0.5),
            left=span["start"],
            color=colour,
            alpha=0.7,
        )
    tasks.set_yticks(range(len(names)), names)
    tasks.set_ylabel("barrier alignment\n(purple: unaligned)")
    for e in report["timeline"]:
        if e["event"] in ("failover", "coordinator-crash"):
            tasks.axvline(e["t"], color=STYLE[e["event"]][0], alpha=0.6)
    starts = {e["checkpoint"]: e["t"] for e in report["timeline"] if e["event"] == "trigger"}
    done = [
        (e["t"], e["t"] - starts[e["checkpoint"]])
        for e in report["timeline"]
        if e["event"] == "complete" and e["checkpoint"] in starts
    ]
    durations.plot([t for t, _ in done], [d for _, d in done], marker="o", ms=3, color="tab:green")
    for e in report["timeline"]:
        if e["event"] == "failover":
            durations.axvline(e["t"], color="tab:red", alpha=0.6)
    durations.set_xlabel("simulated time (ms)")
    durations.set_ylabel("checkpoint duration (ms)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
