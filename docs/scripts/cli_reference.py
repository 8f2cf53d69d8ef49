"""The command-line reference: each `statecert` subcommand's help, as its argument parser prints it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

from statecert.cli.main import _parser


def _subcommands(parser: argparse.ArgumentParser, prefix: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", sub
                yield from _subcommands(sub, f"{prefix} {name}")


def cli_reference() -> str:
    os.environ["COLUMNS"] = "110"  # argparse wraps help at the terminal's width: one width for the page
    parser = _parser()
    lines = [
        "# Command line",
        "",
        "Generated from `statecert`'s argument parsers when the documentation is built. Bad values give one line "
        "naming the option and exit status 2, before anything runs.",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
        "",
    ]
    for name, sub in _subcommands(parser, "statecert"):
        lines += [f"## `{name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(lines)
