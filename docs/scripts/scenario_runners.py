"""The page of the scenario library on three runners (the simulator, Spark, Flink itself), from the JSON report of
`statecert scenario compare --report docs/data/scenario-runners.json`, and what running on Flink found."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "docs" / "data" / "scenario-runners.json"

FINDINGS = """\
## Where Flink disagreed, and what changed

- **changelog-switch** (fixed in the scenario): a run that switches the changelog backend on while resuming a
  savepoint failed on Flink: Flink restores in `NO_CLAIM` mode by default, which asks for a full first checkpoint,
  and Flink's changelog backend "does not support enforcing a full snapshot"; the checkpoint fails and the job
  fails over until its restart attempts run out. statecert's changelog backend takes that full checkpoint
  (KB-SNAP-10), so the simulator and Spark passed. The scenario now restores in `CLAIM` mode
  (`execution.state-recovery.claim-mode`), as Flink's message advises, and passes on all three runners.
- **native-savepoint-other-backend** (a difference of form): resuming a native RocksDB savepoint on the hashmap
  backend fails on Flink too, but as a job failure after its restart attempts (`IllegalStateException: Unexpected
  state handle type ... a different StateBackend ...`), where statecert's backends raise
  `UnsupportedSnapshotError` at once (KB-RESTORE-5). The Flink runner reports Flink's failure as that error, so the
  scenario's expectation holds on all three runners.

## How the Flink runner maps a scenario

Each run is one Flink 2.3 job on Flink's local mini-cluster, with Flink's own `hashmap` or `rocksdb` backend (the
scenario's incremental, changelog and other `[config]` keys are passed to Flink as they are): the input's splits
as a source (one subtask per split, its offset in union list state), the keyed running count or sum in a
`KeyedProcessFunction` with `ValueState`, and a two-phase-commit sink that appends each checkpoint's outputs when
the checkpoint completes. Epoch N is the input between a run's checkpoints N-1 and N: each source pauses at an
epoch's end until a completed checkpoint holds its offset, and holds where the next savepoint, stop or cancel of
the timeline comes. A task failure is an exception in the keyed subtask (processing) or in its snapshot; Flink's
fixed-delay restart strategy restarts the job. The final state is read from the run's last savepoint or retained
checkpoint with statecert's reader of Flink snapshots (IF-9); keys are Flink `String`s (the scenario's key,
rendered), whatever the scenario's key type.
"""


def scenario_runners() -> str:
    lines = ["# The scenario library on three runners", ""]
    if not REPORT.exists():
        return "\n".join([*lines, "No report yet: `statecert scenario compare --report " + str(REPORT) + "`.", ""])
    report = json.loads(REPORT.read_text(encoding="utf-8"))
    runners = report["runners"]
    lines += [
        f"Every scenario of the library on {', '.join(runners)}: `statecert scenario compare --report "
        f"docs/data/scenario-runners.json`, run with statecert {report['statecert']} at {report['generated_at']} "
        f"on this project's 2-core machine (Spark master {report.get('master') or 'local[2,4]'}). A scenario that "
        "cannot run on a runner says why.",
        "",
        "| scenario | " + " | ".join(runners) + " |",
        "| --- |" + " --- |" * len(runners),
    ]
    for name, row in sorted(report["verdicts"].items()):
        cells = []
        for runner in runners:
            v = row[runner]
            if v["verdict"] == "passed":
                cells.append(f"passed ({v['seconds']} s)")
            elif v["verdict"] == "FAILED":
                cells.append(f"**FAILED**: {v['detail']}")
            else:
                cells.append(f"cannot run: {v['detail']}")
        lines.append(f"| {name} | " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    tally = []
    for runner in runners:
        verdicts = [row[runner]["verdict"] for row in report["verdicts"].values()]
        tally.append(
            f"{runner}: {verdicts.count('passed')} passed, {verdicts.count('FAILED')} failed, "
            f"{verdicts.count('cannot run')} cannot run"
        )
    lines += ["", f"{len(report['verdicts'])} scenarios; " + "; ".join(tally) + "."]
    return "\n".join(lines) + "\n\n" + FINDINGS
