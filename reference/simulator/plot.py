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

    fig, (events, tasks, records, durations) = plt.subplots(
        4, 1, figsize=(11, 9), sharex=True, height_ratios=[1, 2, 2, 2]
    )
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
    span_colours = {"aligning": "tab:cyan", "unaligned": "tab:purple", "snapshot": "tab:olive"}
    for span in report["task_spans"]:
        offset = 0.2 if span["kind"] == "snapshot" else -0.2
        tasks.barh(
            names.index(span["task"]) + offset,
            max(span["end"] - span["start"], 0.5),
            left=span["start"],
            height=0.35,
            color=span_colours[span["kind"]],
            alpha=0.8,
        )
    for task, buckets in report.get("records_per_10ms", {}).items():
        records.step([int(t) for t in buckets], list(buckets.values()), where="post", label=task, linewidth=1)
    records.set_ylabel("records / 10 ms")
    if report.get("records_per_10ms"):
        records.legend(fontsize=7, ncol=4, loc="upper right")
    tasks.set_yticks(range(len(names)), names)
    tasks.set_ylabel("alignment (cyan), unaligned\n(purple), snapshot (olive)")
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
