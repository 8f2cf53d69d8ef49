"""Command-line parsing that fails closed in one line: `statecert: error: <option>: <problem>` on stderr and exit
status 2, with no usage dump (bad command-line values, ERR-2)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the option; subcommand parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"statecert: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def int_between(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer within `low..high`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must lie in {low}..{high}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def factory_name(text: str) -> str:
    """An argparse type: a backend or storage to load, an entry-point name or module:attr. An empty one (say an unset
    shell variable) is refused rather than read as "not given", which would load the default backend instead."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected an entry-point name or module:attr, got {text!r}")
    return text


def fsspec_location(text: str) -> str:
    """An argparse type: a local path or a URL of a file system fsspec can open on this machine (its package, s3fs
    for `s3://` say, installed); refused in one line before anything runs, not as an ImportError from inside."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a path or an fsspec URL, got {text!r}")
    protocol, sep, _ = text.partition("://")
    if sep:
        import fsspec

        try:
            fsspec.get_filesystem_class(protocol)
        except (ValueError, ImportError) as exc:
            raise argparse.ArgumentTypeError(f"no file system for {protocol}:// ({exc})") from None
    return text


def _creatable_problem(text: str, what: str) -> str | None:
    """Why `text` could not be made (`what`: "file" or "directory") before anything runs, else None. Nothing is
    created here; missing parent directories are made when the work writes there."""
    if not text.strip():
        return f"expected a {what}, got {text!r}"
    path = Path(text).absolute()
    if what == "file" and path.is_dir():
        return f"{text} is a directory; name the file in it"
    if what == "directory" and path.exists() and not path.is_dir():
        return f"{text} is not a directory"
    ancestor = path if what == "directory" and path.exists() else path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is not a directory, so {text} cannot be created"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"{ancestor} is not writable, so {text} cannot be {'written' if ancestor == path else 'created'}"
    if what == "file" and path.exists() and not os.access(path, os.W_OK):
        return f"{text} is not writable"
    return None


def output_file_problem(text: str) -> str | None:
    """Why a report or plot could not be written to `text`, found before anything runs (a certification or a
    simulation would otherwise end in a traceback after its work): None when it can be."""
    return _creatable_problem(text, "file")


def output_file(text: str) -> str:
    """An argparse type: a file a report or plot can be written to (`output_file_problem`)."""
    problem = output_file_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def work_directory(text: str) -> str:
    """An argparse type: a directory to keep work in, existing or creatable and writable. An empty one (an unset
    shell variable) is refused rather than read as "not given"."""
    problem = _creatable_problem(text, "directory")
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


_MASTERS = re.compile(
    r"local(\[(\*|[1-9]\d*)(,\s*[1-9]\d*)?\])?"  # local, local[N], local[*], local[N,F]
    r"|local-cluster\[\s*[1-9]\d*\s*,\s*[1-9]\d*\s*,\s*[1-9]\d*\s*\]"  # local-cluster[N,cores,MB]
    r"|spark://[^/\s]+(:\d+)?(,[^/\s]+(:\d+)?)*"  # a standalone master, or several for HA
    r"|yarn|k8s://\S+"
)


def spark_master(text: str) -> str:
    """An argparse type: a master URL of the forms Spark parses (`SparkContext.createTaskScheduler`), refused in one
    line before a JVM starts rather than as Spark's "Could not parse Master URL" traceback."""
    if not _MASTERS.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(
            f"not a Spark master URL: {text!r}; expected local, local[N], local[N,F], local[*], "
            "local-cluster[N,C,M], spark://HOST:PORT, yarn or k8s://URL"
        )
    return text.strip()


def fsspec_directory(text: str) -> str:
    """An argparse type: a directory to write under, a URL as `fsspec_location` checks it; a local one (a plain path
    or `file://`) must also be a directory or creatable and writable (`work_directory`), so a demo does not fail
    half way with an OSError that names no option."""
    text = fsspec_location(text)
    protocol, sep, rest = text.partition("://")
    if not sep or protocol == "file":
        work_directory(rest if sep else text)
    return text
