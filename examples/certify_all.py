"""Certify every example package under `examples/` through its own tox (what `tox -e example` runs).

Each certification is one process on one core, so the examples run side by side: first each tox environment is set up
in turn (each installs statecert from this checkout, and two builds of one source tree at once could collide), then
every example's certification runs at once. Each one's output is printed whole when it ends; the exit status is that
of the first example that failed, or 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent


def tox(example: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The example's own tox, in its own work directory: run from an outer tox, the `TOX_*` variables it sets (its
    `TOX_WORK_DIR` among them) would put every example in one shared environment."""
    argv = [sys.executable, "-m", "tox", "-c", str(example), "--workdir", str(example / ".tox"), "-e", "certify", *args]
    env = {name: value for name, value in os.environ.items() if not name.startswith("TOX_")}
    return subprocess.run(argv, capture_output=True, text=True, check=False, env=env)


def report(example: Path, step: str, done: subprocess.CompletedProcess[str]) -> None:
    print(f"==== {example.name}: {step}, exit status {done.returncode}", flush=True)
    print(done.stdout + done.stderr, end="", flush=True)


def main() -> int:
    examples = sorted(path for path in EXAMPLES.iterdir() if (path / "tox.ini").is_file())
    for example in examples:
        done = tox(example, "--notest")
        if done.returncode:
            report(example, "setting up", done)
            return done.returncode
    with ThreadPoolExecutor(max_workers=len(examples)) as pool:
        results = list(pool.map(tox, examples))
    for example, done in zip(examples, results, strict=True):
        report(example, "certifying", done)
    return next((done.returncode for done in results if done.returncode), 0)


if __name__ == "__main__":
    sys.exit(main())
