"""The final state of a scenario run in plain Python: per key the aggregate's total in a completed checkpoint or
savepoint, read back through a backend (the Spark runner reads it as a DataFrame instead, `spark.state_reader`)."""

from __future__ import annotations

from typing import Any

from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.reference.simulator.cuts import operator_totals
from statecert.reference.storage.location import load_checkpoint_metadata

SINK_OPERATOR = "counter"


def final_totals(pointer: str, backend: Any, aggregate: KeyedAggregate, stages: int = 2) -> dict[Any, int]:
    """Per key (in a 3-stage job the first stage's key) the total of the sink operator's aggregate."""
    op = load_checkpoint_metadata(pointer).operator(SINK_OPERATOR)
    totals = operator_totals(op, backend, aggregate.key_type.serializer(), aggregate)
    if stages == 3:
        return {aggregate.key_type.first_stage(key): total for key, total in totals.items()}
    return totals
