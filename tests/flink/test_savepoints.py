"""IF-9 against the live Flink: the job of `FlinkSavepoints.java` runs on Flink's mini-cluster once per variant, and
each fresh snapshot reads as the state computed from the job's records, with the states and serializers the golden
copy that CI reads records (so the golden files are what this Flink writes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from statecert.reference.flink.metadata import load_flink_checkpoint
from statecert.reference.flink.snapshot import choose_operator, header_of, keyed_handles
from tests.flink.referee import RefereeUnavailable
from tests.flink.savepoints import GOLDEN, VARIANTS, expected_state, write_snapshots
from tests.test_flink_snapshot_reader import NOT_READ, read_flink_state


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    try:
        yield write_snapshots(tmp_path_factory.mktemp("flink-savepoints"))
    except RefereeUnavailable as exc:
        pytest.skip(str(exc))


def _headers(pointer: Path) -> dict[str, list[tuple[str, str, str]]]:
    checkpoint = load_flink_checkpoint(str(pointer))
    found = {}
    for uid in ("words", "buckets"):
        op = choose_operator(checkpoint, uid)
        header = header_of(keyed_handles(op)[0], checkpoint.path, op.max_parallelism)
        found[uid] = [(m.name, m.kind, m.value.name) for m in header.states]
    return found


@pytest.mark.flink
@pytest.mark.requirement("IF-9")
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_snapshot_the_live_flink_writes_reads_as_its_jobs_state(fresh: dict[str, Path], variant: str) -> None:
    expected = expected_state()
    for uid in ("words", "buckets"):
        skip = {state for op, state in NOT_READ.get(variant, set()) if op == uid}
        got = read_flink_state(str(fresh[variant]), uid, skip)
        want = {k: v for k, v in expected[uid].items() if k[1] not in skip}
        assert got == want, f"IF-9: {variant} of the live Flink, operator {uid}: read {len(got)} values of {len(want)}"
    assert _headers(fresh[variant]) == _headers(GOLDEN / variant), (
        f"IF-9: {variant}: the live Flink's states and serializers differ from the golden copy's "
        "(python -m tests.flink.savepoints writes them again)"
    )
