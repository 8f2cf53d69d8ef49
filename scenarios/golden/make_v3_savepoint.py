"""How `v3-savepoint/` was made (kept for provenance; the committed bytes are the test, never regenerated in CI).

The same savepoint as `v1-savepoint/` (see `make_v1_savepoint.py`), with `_metadata` in format version 3: msgpack
payload with a CRC-32 and file handles with their CRC-32C, without the changelog handle version 4 adds.
Run: python scenarios/golden/make_v3_savepoint.py scenarios/golden/v3-savepoint
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_v1_savepoint import main

if __name__ == "__main__":
    main(Path(sys.argv[1]), version=3)
