"""Command-line parsing that fails closed in one line: `statecert: error: <option>: <problem>` on stderr and exit
status 2, with no usage dump (bad command-line values, ERR-2)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
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
