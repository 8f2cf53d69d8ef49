"""Where Flink's jars and a JDK are: the Flink distribution the `apache-flink-libraries` package installs (extra
`statecert[flink]`; the `lib/` folder under `pyflink/`), and `java`/`javac` on PATH. Missing ones raise one line."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

from statecert.spec.errors import ScenarioError

NEEDS = "the Flink runner needs statecert[flink] (apache-flink-libraries 2.x) and a Java 17 JDK (java, javac)"


def flink_lib() -> Path:
    """The `lib/` folder of the installed Flink distribution."""
    spec = importlib.util.find_spec("pyflink")
    for folder in [] if spec is None else list(spec.submodule_search_locations or []):
        if list((Path(folder) / "lib").glob("flink-dist-*.jar")):
            return Path(folder) / "lib"
    raise ScenarioError(f"{NEEDS}: Flink's jars are not installed (pip install 'statecert[flink]')")


def compile_job(source: Path, classes: Path) -> tuple[str, str]:
    """Compile `source` against Flink's jars into `classes`; the `java` command and the class path to run it."""
    lib = flink_lib()
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        raise ScenarioError(f"{NEEDS}: no {'javac' if javac is None else 'java'} on PATH")
    classpath = ":".join(str(p) for p in sorted(lib.glob("*.jar")))
    done = subprocess.run(
        [javac, "-nowarn", "-d", str(classes), "-cp", classpath, str(source)], capture_output=True, text=True
    )
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no output"])[0]
        raise ScenarioError(f"{NEEDS}: javac failed on {source.name}: {first}")
    return java, f"{classpath}:{classes}"
