"""The final state of a scenario run in plain Python: per key the aggregate's total in a completed checkpoint or
savepoint, read back through a backend (the Spark runner reads it as a DataFrame instead, `spark.state_reader`)."""

from __future__ import annotations

from typing import Any

from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.reference.serializers import StringSerializer
from statecert.reference.simulator.cuts import operator_totals
from statecert.reference.storage.location import load_checkpoint_metadata

SINK_OPERATOR = "counter"


def final_totals(pointer: str, backend: Any, aggregate: KeyedAggregate) -> dict[str, int]:
    """Per key (the second shuffle's `/2` suffix removed) the total of the sink operator's aggregate."""
    op = load_checkpoint_metadata(pointer).operator(SINK_OPERATOR)
    totals = operator_totals(op, backend, StringSerializer(), aggregate)
    return {key.removesuffix("/2"): total for key, total in totals.items()}
