"""Flink as the referee: `Referee.java`, compiled against the Flink distribution that the `apache-flink` package
installs, run as one JVM for the test session and asked line by line. Text crosses as hex of UTF-16 code units."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from statecert.scenarios.flink import distribution
from statecert.spec.errors import ScenarioError

SOURCE = Path(__file__).with_name("Referee.java")


class RefereeUnavailable(RuntimeError):
    """apache-flink or a Java 17 JDK is missing: the differential tests cannot run."""


def flink_lib() -> Path:
    """The `lib/` folder of the Flink distribution that the `apache-flink-libraries` package installs."""
    try:
        return distribution.flink_lib()
    except ScenarioError as exc:
        raise RefereeUnavailable(str(exc)) from None


def compiled(source: Path, classes: Path) -> tuple[str, str]:
    """`source` compiled against Flink's jars: the `java` command and the class path (RefereeUnavailable without a
    JDK or Flink's jars)."""
    try:
        return distribution.compile_job(source, classes)
    except ScenarioError as exc:
        raise RefereeUnavailable(str(exc)) from None


def hex_text(text: str) -> str:
    return text.encode("utf-16-be", "surrogatepass").hex()


def text_of(hex_: str) -> str:
    return bytes.fromhex(hex_).decode("utf-16-be", "surrogatepass")


@dataclass(frozen=True)
class FlinkOption:
    """A `ConfigOption` as Flink declares it: key, value class, default (None: no default; durations in
    milliseconds, memory sizes in bytes, enums by name), fallback keys (deprecated or not) and where it is declared."""

    key: str
    type_name: str
    default: str | None
    fallback_keys: tuple[str, ...]
    deprecated_keys: tuple[str, ...]
    declared_in: str


class Referee:
    """One JVM with Flink's classes on its class path; `ask` sends one request and returns the answer's words."""

    def __init__(self) -> None:
        lib = flink_lib()
        self.version = next(lib.glob("flink-dist-*.jar")).name.removeprefix("flink-dist-").removesuffix(".jar")
        self._classes = tempfile.TemporaryDirectory(prefix="statecert-flink-referee-")
        java, classpath = compiled(SOURCE, Path(self._classes.name))
        self._process = subprocess.Popen(
            [java, "-cp", classpath, "Referee"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
        )

    def ask(self, *words: object) -> list[str]:
        """Flink's answer to one request: its words after `ok`, or `["error", <Java exception class>]`."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(" ".join(str(w) for w in words) + "\n")
        self._process.stdin.flush()
        answer = self._process.stdout.readline().rstrip("\n").split(" ")
        return answer[1:] if answer[0] == "ok" else answer

    def options(self, *classes: str) -> dict[str, FlinkOption]:
        """Every public static `ConfigOption` of `classes`, by key."""
        found: dict[str, FlinkOption] = {}
        for entry in self.ask("options", *classes):
            key, type_name, default, fallbacks, declared = entry.split(",")
            keys = [f.split(":") for f in fallbacks.split(";") if f]
            found[text_of(key)] = FlinkOption(
                text_of(key),
                type_name,
                None if default == "-" else text_of(default),
                tuple(text_of(k[0]) for k in keys),
                tuple(text_of(k[0]) for k in keys if k[1:] == ["d"]),
                text_of(declared),
            )
        return found

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)
        self._classes.cleanup()
