"""The simulator's seeded input (`reference/simulator/inputs.py`): keys drawn in arrays are exactly the keys
`random.Random` draws one record at a time, and the generator is left where those draws leave it, so inputs and
the savepoints taken from them stay the same for a seed (SIM-1)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecert.reference.simulator.inputs import draw_key_indices, generate_inputs
from statecert.reference.simulator.record import Record

key_counts = st.one_of(st.integers(1, 70), st.sampled_from([64, 128, 2**16, 2**16 + 1, 2**31 - 1, 2**32 - 1]))


def one_at_a_time(rng: random.Random, sources: int, keys: int, records: int, skew: float) -> list[list[Record]]:
    """The record-at-a-time draws the arrays must reproduce (the input's definition)."""

    def index() -> int:
        return rng.randrange(keys) if skew == 1.0 else int(keys * rng.random() ** skew)

    return [[Record(f"s{s}-k{index()}", s, o) for o in range(records)] for s in range(sources)]


@pytest.mark.requirement("SIM-1")
@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**64),
    sources=st.integers(1, 4),
    keys=key_counts,
    records=st.integers(0, 700),
    skew=st.sampled_from([1.0, 0.0, 1.2, 3.0]),
    drawn_before=st.integers(0, 700),
)
def test_inputs_drawn_in_arrays_are_the_record_at_a_time_draws(
    seed: int, sources: int, keys: int, records: int, skew: float, drawn_before: int
) -> None:
    expected_rng, rng = random.Random(seed), random.Random(seed)
    for r in (expected_rng, rng):  # the generator anywhere in its stream, not only just seeded
        r.getrandbits(32 * drawn_before) if drawn_before else None
    expected = one_at_a_time(expected_rng, sources, keys, records, skew)
    got = generate_inputs(rng, sources, keys, records, skew)
    assert got == expected, f"generate_inputs(seed={seed}, {sources}, {keys}, {records}, {skew}) drew other keys"
    assert rng.getstate() == expected_rng.getstate(), "the generator was left elsewhere than the draws leave it"
    assert rng.random() == expected_rng.random()


@pytest.mark.requirement("SIM-1")
def test_a_million_keys_are_drawn_without_a_python_step_per_record() -> None:
    """The array path is what the simulator uses at scale: 1,000,000 draws equal the record-at-a-time ones."""
    seed, keys = 7, 500
    expected_rng = random.Random(seed)
    expected = [expected_rng.randrange(keys) for _ in range(1_000_000)]
    rng = random.Random(seed)
    got = draw_key_indices(rng, 4, keys, 250_000).reshape(-1).tolist()
    assert got == expected
    assert rng.getstate() == expected_rng.getstate()
