"""Run by `mkdocs build` (the gen-files plugin): writes every page the code is the source of truth for, so that
none is edited by hand. The pages' texts come from one function each, which `tests/test_docs.py` also checks."""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]  # `tests.test_traceability` and this folder's modules

from catalogue_page import catalogue_page  # noqa: E402
from cli_reference import cli_reference  # noqa: E402
from config_reference import config_reference  # noqa: E402
from flink_differences import flink_differences  # noqa: E402
from measured_figures import BENCHMARKS, benchmarks_page, mutation_page, reliability_page  # noqa: E402
from requirement_index import requirement_index  # noqa: E402
from scenario_runners import scenario_runners  # noqa: E402
from tox_environments import tox_environments  # noqa: E402

PAGES = {
    "reference/cli.md": cli_reference,
    "reference/configuration.md": config_reference,
    "reference/requirements.md": requirement_index,
    "reference/catalogue.md": catalogue_page,
    "reference/tox-environments.md": tox_environments,
    "reference/flink-differences.md": flink_differences,
    "reference/scenario-runners.md": scenario_runners,
    "figures/benchmarks.md": benchmarks_page,
    "figures/reliability.md": reliability_page,
    "figures/mutation.md": mutation_page,
}

for path, page in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as out:
        out.write(page())
if BENCHMARKS.with_suffix(".png").exists():
    with mkdocs_gen_files.open("figures/figures.png", "wb") as png:
        png.write(BENCHMARKS.with_suffix(".png").read_bytes())
