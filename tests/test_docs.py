"""The documentation: the generated pages name every requirement ID, CLI subcommand and configuration key; the
catalogue describes every broken backend and storage; README.md stays a page for users; the changelog's newest
version is the one `statecert --version` prints. (`tox -e docs` builds the site itself, strictly.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from statecert.reference.config import OPTIONS
from statecert.spec.requirements import load_requirements

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs" / "scripts"))

from catalogue import read_catalogue  # noqa: E402
from cli_reference import cli_reference  # noqa: E402
from config_reference import config_reference  # noqa: E402
from measured_figures import DATA, _equivalent_mutants  # noqa: E402
from requirement_index import requirement_index  # noqa: E402

from statecert.cli.main import _parser  # noqa: E402


def test_the_requirement_index_anchors_every_requirement() -> None:
    page = requirement_index()
    missing = [rid for rid in load_requirements() if f'<a id="{rid}"></a>**{rid}**' not in page]
    assert not missing, f"requirement_index(): expected an anchor and entry for every ID, missing {missing}"


def test_the_cli_reference_has_every_subcommand() -> None:
    page = cli_reference()
    parser = _parser()
    subcommands = [
        name
        for action in parser._subparsers._group_actions
        for name in action.choices  # type: ignore[union-attr]
    ]
    missing = [name for name in subcommands if f"## `statecert {name}`" not in page]
    assert subcommands and not missing, f"cli_reference(): expected a section per subcommand, missing {missing}"


def test_the_configuration_reference_has_every_key() -> None:
    page = config_reference()
    missing = [option.key for option in OPTIONS if f"| `{option.key}` |" not in page]
    assert not missing, f"config_reference(): expected a row per configuration key, missing {missing}"


@pytest.mark.parametrize("module", ["broken_backends", "broken_storages"])
def test_the_catalogue_describes_every_broken_backend_and_storage(module: str) -> None:
    entries = read_catalogue(ROOT / "tests" / f"{module}.py")
    undescribed = [e.name for e in entries if not e.bug]
    assert entries and not undescribed, f"read_catalogue(tests/{module}.py): entries without a bug: {undescribed}"


def test_the_readme_is_a_page_for_users() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    hashes = [line for line in lines if re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", line)]
    assert len(lines) <= 250, f"README.md: expected at most 250 lines, got {len(lines)}"
    assert not hashes, f"README.md: expected no commit hashes, got {hashes}"


def test_the_version_is_the_changelogs_newest() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    newest = re.search(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.MULTILINE)
    printed = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", "--version"], capture_output=True, text=True, check=False
    ).stdout.split()
    assert newest and printed == ["statecert", newest[1]], (
        f"statecert --version: expected 'statecert {newest[1] if newest else '?'}', got {printed}"
    )


def test_every_mutant_argued_equivalent_is_a_survivor_of_its_committed_report() -> None:
    stale = []
    for target, module, line, mutation in _equivalent_mutants():
        path = DATA / f"mutation-{target}.json"
        results = json.loads(path.read_text())["results"] if path.exists() else []
        if not any(
            (r["module"], r["line"], r["mutation"], r["outcome"]) == (module, line, mutation, "survived")
            for r in results
        ):
            stale.append(f"{target} {module}:{line} {mutation}")
    assert not stale, (
        "mutation/equivalent.toml: expected every entry to name a survivor of docs/data/mutation-<target>.json, "
        f"got entries no committed report has as a survivor: {stale}"
    )
