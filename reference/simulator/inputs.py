"""The seeded input of a job: per source split, records with a key drawn from the split's keys (uniform, or skewed
so that a few keys get most records). The simulator and the Spark runner draw the same input from the same seed."""

from __future__ import annotations

import random

from statecert.reference.simulator.tasks import Record


def generate_inputs(rng: random.Random, sources: int, keys: int, records: int, skew: float = 1.0) -> list[list[Record]]:
    """Per source, `records` records with keys `s<source>-k<i>`, i < `keys`; i = keys * u**skew for skew > 1."""

    def index() -> int:
        return rng.randrange(keys) if skew == 1.0 else int(keys * rng.random() ** skew)

    return [[Record(f"s{s}-k{index()}", s, o) for o in range(records)] for s in range(sources)]
