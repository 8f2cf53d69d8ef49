"""Certify every example package under `examples/` through its own tox (what `tox -e example` runs).

Each certification is one process on one core, so the examples run side by side: first statecert is built from this
checkout once, as a wheel (two builds of one source tree at once could collide), then every example's tox environment
is set up from it at once (its `STATECERT_WHEEL`; run alone, an example's tox builds statecert from the checkout
itself), then every example's certification runs at once. Each one's output is printed whole when it ends; the exit
status is that of the first step that failed, or 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent


def tox(example: Path, *args: str, wheel: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The example's own tox, in its own work directory: run from an outer tox, the `TOX_*` variables it sets (its
    `TOX_WORK_DIR` among them) would put every example in one shared environment. With `wheel`, its environment
    installs statecert from that wheel."""
    argv = [sys.executable, "-m", "tox", "-c", str(example), "--workdir", str(example / ".tox"), "-e", "certify", *args]
    env = {name: value for name, value in os.environ.items() if not name.startswith("TOX_")}
    if wheel is not None:
        env["STATECERT_WHEEL"] = str(wheel)
    return subprocess.run(argv, capture_output=True, text=True, check=False, env=env)


def report(example: Path, step: str, done: subprocess.CompletedProcess[str]) -> None:
    print(f"==== {example.name}: {step}, exit status {done.returncode}", flush=True)
    print(done.stdout + done.stderr, end="", flush=True)


def side_by_side(examples: list[Path], *args: str, wheel: Path) -> list[subprocess.CompletedProcess[str]]:
    """Every example's tox with `args`, all at once."""
    with ThreadPoolExecutor(max_workers=len(examples)) as pool:
        return list(pool.map(lambda example: tox(example, *args, wheel=wheel), examples))


def main() -> int:
    examples = sorted(path for path in EXAMPLES.iterdir() if (path / "tox.ini").is_file())
    with tempfile.TemporaryDirectory(prefix="statecert-wheel-") as wheels:
        build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", wheels]
        built = subprocess.run([*build, str(EXAMPLES.parent)], capture_output=True, text=True, check=False)
        if built.returncode:
            report(EXAMPLES.parent, "building statecert", built)
            return built.returncode
        wheel = next(Path(wheels).glob("statecert-*.whl"))  # kept until the end: tox compares its path each run
        for example, done in zip(examples, side_by_side(examples, "--notest", wheel=wheel), strict=True):
            if done.returncode:
                report(example, "setting up", done)
                return done.returncode
        results = side_by_side(examples, wheel=wheel)
    for example, done in zip(examples, results, strict=True):
        report(example, "certifying", done)
    return next((done.returncode for done in results if done.returncode), 0)


if __name__ == "__main__":
    sys.exit(main())
