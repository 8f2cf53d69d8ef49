"""The time to a verdict: `statecert certify hashmap` and `statecert certify rocksdb` (full and incremental
checkpoints), each a whole certification with the default settings, run one after the other in one run, and the
quick profile of each. Prints wall and CPU seconds and the ratio rocksdb / hashmap; nothing is asserted.

Usage: python benchmarks/bench_certify.py [--json FILE]  (from the repository root; `tox -e bench` runs it)
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from figures import add_json_argument, record

RUNS = {
    "hashmap": ["hashmap"],
    "rocksdb": ["rocksdb"],
    "rocksdb_incremental": ["rocksdb", "--config", "execution.checkpointing.incremental=true"],
    "hashmap_quick": ["hashmap", "--profile", "quick"],
    "rocksdb_quick": ["rocksdb", "--profile", "quick"],
}


def certify(arguments: list[str], workdir: Path) -> dict[str, Any]:
    """One `statecert certify` in a child process: its wall seconds, its CPU seconds and its exit status."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", "certify", *arguments, "--report", str(workdir / "r.json")],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    verdict = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-200:]
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "exit": done.returncode, "verdict": verdict}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_json_argument(parser)
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="statecert-bench-certify-") as workdir:
        for name, arguments in RUNS.items():
            result = certify(arguments, Path(workdir))
            figures[name] = result
            print(
                f"statecert certify {' '.join(arguments):<62} {result['wall_s']:>7.1f} s wall "
                f"{result['cpu_s']:>7.1f} s CPU  exit {result['exit']}"
            )
    base = figures["hashmap"]["wall_s"]
    for name in ("rocksdb", "rocksdb_incremental"):
        figures[f"ratio_{name}_vs_hashmap"] = round(figures[name]["wall_s"] / base, 2)
        print(f"{name} / hashmap wall time: {figures[f'ratio_{name}_vs_hashmap']:.2f}x")
    figures["hashmap_wall_s"] = base
    figures["hashmap_quick_wall_s"] = figures["hashmap_quick"]["wall_s"]
    record(args.json, "certify", figures)


if __name__ == "__main__":
    main()
