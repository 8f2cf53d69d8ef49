"""The configuration reference: the keys statecert reads, as `statecert config --list --markdown` prints them."""

from __future__ import annotations

from statecert.cli.config_cmd import markdown
from statecert.reference.config import OPTIONS


def config_reference() -> str:
    return "\n".join(
        [
            "# Configuration keys",
            "",
            f"The {len(OPTIONS)} keys statecert reads, with Flink 2.x names (the 1.x `state.*` names are read as "
            "deprecated fallbacks), generated from the configuration catalog (`statecert config --list --markdown`) "
            "when the documentation is built. A certification passes them with `--config KEY=VALUE` or "
            "`[tool.statecert.config]`; a scenario in its `[config]` table.",
            "",
            markdown(),
            "",
        ]
    )
