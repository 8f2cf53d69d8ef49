"""Crash consistency (FMT-7, FMT-13, COORD-8): a child process that checkpoints (heap, and incremental RocksDB) is
SIGKILLed at distinct file operations; afterwards every checkpoint directory with `_metadata` restores to exactly
the state of its checkpoint, and recovery finds a checkpoint at least as new as the last one acknowledged.

`STATECERT_CRASH_POINTS` sets the kill points per backend: 6 in the self-tests (spread over the run); `tox -e crash`
kills at every operation (at least 100 per backend). `STATECERT_CRASH_REPORT=<dir>/crash.json` writes the tallies to
`<dir>/crash.<backend>.json`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import fsspec
import pytest

from statecert.reference.checkpointing import create_subtasks
from statecert.reference.coordinator.recovery import recover_from_storage
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.spec.state import VOID_NAMESPACE
from tests.crash.killing_fs import KILL_AT_ENV
from tests.crash.workload import BACKENDS, CHECKPOINTS, MAX_PARALLELISM, RETAINED, expected, make_backend
from tests.hostile.savepoints import COUNT, KEYS, SEEN, TAGS

ROOT = Path(__file__).resolve().parent.parent
POINTS = int(os.environ.get("STATECERT_CRASH_POINTS", "6"))
TALLIES: dict[str, dict[str, int]] = {}


def run_child(backend: str, workdir: Path, kill_at: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, KILL_AT_ENV: str(kill_at), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "tests.crash.workload", backend, str(workdir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def read_checkpoint(pointer: str, backend: str, local: Path) -> dict[str, Any]:
    operator = load_checkpoint_metadata(pointer).operator("op")
    subtasks = create_subtasks(
        make_backend(backend, str(local)), KEYS, 2, MAX_PARALLELISM, restore_from=operator, local_dir=str(local)
    )
    state: dict[str, Any] = {"count": {}, "seen": {}, "tags": {}}
    try:
        for s in subtasks:
            handles = {d.name: s.keyed.get_or_create_state(d) for d in (COUNT, SEEN, TAGS)}
            for name, read in (("count", "value"), ("seen", "get"), ("tags", "items")):
                for key in list(s.keyed.get_keys(name, VOID_NAMESPACE)):
                    s.keyed.set_current_key(key)
                    value = getattr(handles[name], read)()
                    state[name][key] = list(value) if name == "seen" else dict(value) if name == "tags" else value
    finally:
        for s in subtasks:
            s.dispose()
    return state


def kill_points(total: int) -> list[int]:
    if total <= POINTS:
        return list(range(1, total + 1))
    return sorted({1 + (i * (total - 1)) // (POINTS - 1) for i in range(POINTS)})


@pytest.mark.requirement("FMT-7", "FMT-13", "COORD-8")
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_kill_point_leaves_restorable_checkpoints(backend: str, tmp_path: Path) -> None:
    (tmp_path / "clean").mkdir()
    clean = run_child(backend, tmp_path / "clean", 0)
    assert clean.returncode == 0, clean.stderr
    total = int(clean.stdout.split()[-1])
    tally = {"file operations": total, "kill points": 0, "killed": 0, "complete-looking unrestorable": 0}
    for kill_at in kill_points(total):
        workdir = tmp_path / f"kill-{kill_at}"
        workdir.mkdir()
        done = run_child(backend, workdir, kill_at)
        tally["kill points"] += 1
        if done.returncode == 0 and int(done.stdout.split()[-1]) < kill_at:
            # RocksDB's background flushes and compactions vary the number of SST files, so a kill point near the
            # end of one run may lie beyond another's last operation; the finished run is checked all the same.
            tally["beyond this run's operations"] = tally.get("beyond this run's operations", 0) + 1
        else:
            assert done.returncode == -9, (
                f"kill point {kill_at}: the child was not killed ({done.returncode}) {done.stderr}"
            )
            tally["killed"] += 1
        acked = [int(line) for line in (workdir / "acks").read_text().split()] if (workdir / "acks").exists() else []
        job_dir = workdir / "checkpoints" / "job"
        complete = sorted(p for p in job_dir.glob("chk-*") if (p / "_metadata").exists()) if job_dir.exists() else []
        for directory in complete:
            checkpoint_id = int(directory.name.removeprefix("chk-"))
            try:
                restored = read_checkpoint(f"file://{directory}", backend, workdir / "restore")
            except Exception as exc:
                tally["complete-looking unrestorable"] += 1
                raise AssertionError(
                    f"kill point {kill_at}/{total}: {directory.name} has _metadata but does not restore: {exc!r}"
                ) from exc
            assert restored == expected(checkpoint_id), (
                f"kill point {kill_at}/{total}: {directory.name} restored to another state than checkpoint "
                f"{checkpoint_id}'s"
            )
        recovered = recover_from_storage(f"file://{job_dir}", RETAINED) if job_dir.exists() else None
        latest = recovered.store.latest if recovered else None
        if acked:
            assert latest is not None and latest.metadata.checkpoint_id >= acked[-1], (
                f"kill point {kill_at}/{total}: checkpoint {acked[-1]} was acknowledged, recovery found "
                f"{latest.metadata.checkpoint_id if latest else 'nothing'}"
            )
        if recovered is not None:
            leftovers = [p.name for p in job_dir.glob("chk-*") if not (p / "_metadata").exists()]
            assert leftovers == [], f"kill point {kill_at}: recovery left incomplete checkpoints {leftovers}"
        fs = fsspec.filesystem("file")
        fs.rm(str(workdir), recursive=True)
    assert tally["kill points"] >= min(POINTS, total)
    assert tally["killed"] >= tally["kill points"] * 9 // 10, f"most kill points must be reached: {tally}"
    assert CHECKPOINTS >= 2
    TALLIES[backend] = tally
    target = os.environ.get("STATECERT_CRASH_REPORT")
    if target:  # one file per backend: the backends may run in parallel workers
        path = Path(target).with_suffix(f".{backend}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({backend: tally}, indent=2, sort_keys=True) + "\n")
