"""Write the hostile corpus: `corpus/<case>/` for every case of `cases.CASES`, or only the cases named (kept for
provenance: the committed bytes are the test, never regenerated in CI; re-run after changing or adding a case,
naming it, so the other cases' committed bytes stay as they are).

Run: python -m tests.hostile.make_corpus [CASE ...]
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from tests.hostile.cases import CASES
from tests.hostile.savepoints import build

CORPUS = Path(__file__).resolve().parent / "corpus"


def main(names: list[str]) -> None:
    unknown = sorted(set(names) - {case.name for case in CASES})
    if unknown:
        print(f"make_corpus: error: unknown cases {unknown}", file=sys.stderr)
        sys.exit(2)
    cases = [case for case in CASES if not names or case.name in names]
    if not names:
        shutil.rmtree(CORPUS, ignore_errors=True)
    CORPUS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        bases = {name: Path(scratch) / name for name in ("hashmap", "rocksdb")}
        for name, target in bases.items():
            build(target, name)
        for case in cases:
            target = CORPUS / case.name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(bases[case.base], target)
            case.damage(target)
    print(f"{len(cases)} cases written to {CORPUS}")


if __name__ == "__main__":
    main(sys.argv[1:])
