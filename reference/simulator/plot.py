"""A timeline PNG of one or more simulator runs (every run of a scenario file, one after the other): checkpoint
triggers, completions, aborts, savepoints, stops, failovers and coordinator crashes over simulated time, with each
resumed run's start and parallelism marked (matplotlib, headless; legends outside the data)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

STYLE = {
    "trigger": ("tab:blue", 0.3, "|"),
    "complete": ("tab:green", 0.8, "|"),
    "abort": ("tab:orange", 0.8, "|"),
    "savepoint": ("tab:purple", 1.0, "D"),
    "stop": ("tab:red", 1.0, "X"),
    "failover": ("tab:red", 1.0, "|"),
    "coordinator-crash": ("black", 1.0, "|"),
}
SPAN_COLOURS = {"aligning": "tab:cyan", "unaligned": "tab:purple", "snapshot": "tab:olive"}


def _events(report: dict[str, Any], kind: str) -> list[float]:
    """When events of `kind` happened in a run: timeline entries, savepoints and the stop with a savepoint."""
    if kind == "savepoint":
        return [s["at_ms"] for s in report.get("savepoints", [])]
    if kind == "stop":
        stopped = report.get("stopped_with_savepoint") and report.get("savepoints")
        return [report["savepoints"][-1]["at_ms"]] if stopped else []
    return [e["t"] for e in report["timeline"] if e["event"] == kind]


def plot_runs(reports: Sequence[dict[str, Any]], path: Path) -> None:
    """Every run of `reports` on one time axis, each starting where the one before it ended."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (events, tasks, records, durations) = plt.subplots(
        4, 1, figsize=(13, 10), sharex=True, height_ratios=[1.4, 2, 2, 2]
    )
    rows = list(STYLE)
    offset = 0.0
    names = sorted({span["task"] for report in reports for span in report["task_spans"]})
    counted = sorted({task for report in reports for task in report.get("records_per_10ms", {})})
    labelled: set[str] = set()
    for i, report in enumerate(reports):
        if i:
            previous = reports[i - 1]["parallelism"]
            change = f", rescaled from {previous}" if report["parallelism"] != previous else ""
            for axis in (events, tasks, records, durations):
                axis.axvline(offset, color="grey", linestyle="--", linewidth=1)
            events.text(offset, len(rows) - 0.4, f" run {i + 1}: parallelism {report['parallelism']}{change}",
                        fontsize=8, va="bottom")  # fmt: skip
        for row, kind in enumerate(rows):
            colour, alpha, marker = STYLE[kind]
            times = [offset + t for t in _events(report, kind)]
            events.scatter(times, [row] * len(times), marker=marker, s=120 if marker == "|" else 50,
                           color=colour, alpha=alpha, label=kind if i == 0 else None)  # fmt: skip
        for span in report["task_spans"]:
            lane = names.index(span["task"]) + (0.2 if span["kind"] == "snapshot" else -0.2)
            tasks.barh(lane, max(span["end"] - span["start"], 0.5), left=offset + span["start"], height=0.35,
                       color=SPAN_COLOURS[span["kind"]], alpha=0.8)  # fmt: skip
        for task, buckets in report.get("records_per_10ms", {}).items():  # one colour per task across the runs
            records.step([offset + int(t) for t in buckets], list(buckets.values()), where="post", linewidth=1,
                         color=f"C{counted.index(task) % 10}", label=None if task in labelled else task)  # fmt: skip
            labelled.add(task)
        starts = {e["checkpoint"]: e["t"] for e in report["timeline"] if e["event"] == "trigger"}
        done = [(e["t"], e["t"] - starts[e["checkpoint"]]) for e in report["timeline"]
                if e["event"] == "complete" and e["checkpoint"] in starts]  # fmt: skip
        durations.plot([offset + t for t, _ in done], [d for _, d in done], marker="o", ms=3, color="tab:green")
        for t in _events(report, "failover"):
            for axis in (tasks, durations):
                axis.axvline(offset + t, color="tab:red", alpha=0.6)
        offset += report["sim_time_ms"]
    events.set_yticks(range(len(rows)), rows)
    events.set_ylim(-0.8, len(rows) + 0.6)
    first = reports[0]
    events.set_title(
        f"{len(reports)} run(s), {first['mode']} checkpoints, {first['backend']}, seed {first['seed']}: "
        f"{sum(len(r['completed_checkpoints']) for r in reports)} checkpoints completed, "
        f"{sum(len(r['savepoints']) for r in reports)} savepoint(s), "
        f"{sum(len(r['failovers']) for r in reports)} failover(s)"
    )
    tasks.set_yticks(range(len(names)), names)
    tasks.set_ylabel("alignment (cyan), unaligned\n(purple), snapshot (olive)")
    records.set_ylabel("records / 10 ms")
    if any(r.get("records_per_10ms") for r in reports):
        records.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    durations.set_xlabel("simulated time (ms), the runs one after the other")
    durations.set_ylabel("checkpoint duration (ms)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
