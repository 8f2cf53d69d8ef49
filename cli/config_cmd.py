"""`statecert config --list`: every configuration key statecert reads (Flink 2.x name, type, default, deprecated
1.x names, what it configures) and the Flink keys it knows but does not implement, with the reason;
`--markdown` prints the same as a Markdown table (the README's)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from statecert.reference.config import OPTIONS, UNSUPPORTED


def add_parser(sub: Any) -> None:
    p = sub.add_parser("config", help="list the configuration keys statecert reads (Flink 2.x names)")
    p.add_argument("--list", action="store_true", help="print the table of keys (the default)")
    p.add_argument("--markdown", action="store_true", help="print it as a Markdown table")


def _default(option: Any) -> str:
    if option.default_text is not None:
        return str(option.default_text)
    if isinstance(option.default, bool):
        return str(option.default).lower()
    return str(option.default)


def rows() -> list[tuple[str, str, str, str, str, str]]:
    """(key, type, default, deprecated keys, component, description) per option, in catalog order."""
    return [
        (o.key, o.type_name, _default(o), ", ".join(o.deprecated_keys), o.component, o.description) for o in OPTIONS
    ]


def markdown() -> str:
    """The keys as a Markdown table, then the Flink keys statecert does not implement (the documentation's
    configuration reference is this text)."""
    lines = [
        "| key | type | default | deprecated (1.x) keys | read by | what |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for key, kind, default, old, component, text in rows():
        old_keys = ", ".join(f"`{k}`" for k in old.split(", ")) if old else ""
        lines.append(f"| `{key}` | {kind} | {default} | {old_keys} | {component} | {text} |")
    lines += ["", "Known Flink keys statecert does not implement:", ""]
    lines += [f"- `{key}`: {reason}" for key, reason in sorted(UNSUPPORTED.items())]
    return "\n".join(lines)


def config(args: argparse.Namespace, console: Console) -> int:
    if args.markdown:
        console.print(markdown(), markup=False, soft_wrap=True)
        return 0
    console.width = max(console.width, 200)  # a reference table: wide rather than folded key names
    table = Table(title=f"configuration keys statecert reads ({len(OPTIONS)}; Flink 2.x names)")
    table.add_column("key", no_wrap=True)
    for column in ("type", "default", "deprecated (1.x) keys", "read by", "what"):
        table.add_column(column, overflow="fold")
    for row in rows():
        table.add_row(*row)
    console.print(table)
    unsupported = Table(title="Flink keys statecert knows but does not implement")
    unsupported.add_column("key")
    unsupported.add_column("why")
    for key, reason in sorted(UNSUPPORTED.items()):
        unsupported.add_row(key, reason)
    console.print(unsupported)
    return 0
