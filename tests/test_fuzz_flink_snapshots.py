"""Fuzzing the Flink snapshot reader with damaged copies of snapshots Flink wrote: a `_metadata` or state file cut
short, bit-flipped or overwritten gives a documented error or a state; a cut state file is always refused (its size
is recorded). Flink's format has no checksums, so a flipped value byte may read as another value: that is Flink's
format, not a silent state change of the reader (FMT-8, IF-9)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.flink.savepoints import GOLDEN
from tests.fuzz_mutations import damaged
from tests.fuzz_support import FUZZ, outcome
from tests.test_flink_snapshot_reader import read_flink_state

VARIANTS = ("hashmap-canonical-savepoint", "rocksdb-canonical-savepoint-compressed", "hashmap-retained-checkpoint")


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="statecert-fuzz-flink-") as tmp:
        yield Path(tmp)


@pytest.mark.requirement("FMT-8", "IF-9")
@FUZZ
@given(data=st.data())
def test_a_damaged_flink_snapshot_reads_or_fails_with_a_documented_error(scratch: Path, data: st.DataObject) -> None:
    variant = data.draw(st.sampled_from(VARIANTS))
    target = scratch / "case"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(GOLDEN / variant, target)
    victim = data.draw(st.sampled_from(sorted(p.name for p in target.iterdir())))
    raw = (target / victim).read_bytes()
    bad = data.draw(damaged(raw))
    (target / victim).write_bytes(bad)

    def read() -> object:
        return [read_flink_state(str(target), uid) for uid in ("words", "buckets")]

    result = outcome(f"flink {'_metadata' if victim == '_metadata' else 'state file'}", read)
    if victim != "_metadata" and len(bad) < len(raw):
        assert result is None, f"FMT-12: {variant}/{victim} cut to {len(bad)} of {len(raw)} bytes was read"
