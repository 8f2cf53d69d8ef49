"""Write the hostile corpus: `corpus/<case>/` for every case of `cases.CASES` (kept for provenance: the committed
bytes are the test, never regenerated in CI; re-run after changing a case).

Run: python -m tests.hostile.make_corpus
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from tests.hostile.cases import CASES
from tests.hostile.savepoints import build

CORPUS = Path(__file__).resolve().parent / "corpus"


def main() -> None:
    shutil.rmtree(CORPUS, ignore_errors=True)
    CORPUS.mkdir()
    with tempfile.TemporaryDirectory() as scratch:
        bases = {name: Path(scratch) / name for name in ("hashmap", "rocksdb")}
        for name, target in bases.items():
            build(target, name)
        for case in CASES:
            target = CORPUS / case.name
            shutil.copytree(bases[case.base], target)
            case.damage(target)
    print(f"{len(CASES)} cases written to {CORPUS}")


if __name__ == "__main__":
    main()
