"""The Spark runner on a cluster-shaped master: separate executor JVMs and Python workers (`local-cluster[2,1,1024]`
by default), every checkpoint and savepoint at a URL rather than on the driver's disk. Slow: runs only in
`tox -e cluster`, which sets STATECERT_CLUSTER_MASTER."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MASTER = os.environ.get("STATECERT_CLUSTER_MASTER")
SCENARIOS = ("worker-killed", "repeated-failures", "stop-and-rescale", "int-keys-rescale")

pytestmark = pytest.mark.skipif(not MASTER, reason="set STATECERT_CLUSTER_MASTER (tox -e cluster) to run on a cluster")


@pytest.mark.requirement("SCN-6", "SCN-7")
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_scenarios_pass_on_a_cluster_with_checkpoints_at_a_url(tmp_path: Path, backend: str) -> None:
    """Worker kills, storage faults (injected in the file system at the URL), stop-with-savepoint and rescaling on
    executors that share nothing with the driver but the checkpoint URL."""
    shared = os.environ.get("STATECERT_CLUSTER_CHECKPOINT_DIR", f"file://{tmp_path}/shared")
    report = tmp_path / "report.json"
    args = ["scenario", "run", *SCENARIOS, "--runner", "spark", "--master", str(MASTER), "--backend", backend]
    args += ["--checkpoint-dir", shared, "--workdir", str(tmp_path / "driver"), "--report", str(report)]
    done = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", *args], capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(report.read_text())
    assert data["master"] == MASTER and data["checkpoint_dir"] == shared.rstrip("/")
    assert [r["scenario"] for r in data["results"]] == list(SCENARIOS)
    assert all(r["passed"] for r in data["results"]), [r["failures"] for r in data["results"]]
    assert not list((tmp_path / "driver").rglob("_metadata")), "checkpoint state on the driver's disk"
